"""``python -m bench run``: what the copilot costs, as ratios against bare LangChain.

Every result is a ratio against a baseline measured in the same run, interleaved (ours,
bare, ours, bare, ...), so the machine's noise hits both alike; nothing is compared with
an absolute threshold. ``CRM_KIND`` picks the CRM profile measured (``reference``, or
``dataverse``: the sandbox's Dataverse face; see :mod:`~bench.environment`). Modules, one job each:

* :mod:`~bench.scenarios`   the bench's scenarios, on the records the rep's CRM shows
* :mod:`~bench.model`       the scripted chat model both sides use
* :mod:`~bench.counting`    counts of the expensive things (sessions, exchanges, checkouts, ...)
* :mod:`~bench.stats`       interleaved timing, medians and ratios
* :mod:`~bench.sandbox`     the sandbox as a subprocess, reached only over the network
* :mod:`~bench.database`    a fresh, migrated PostgreSQL database for the run
* :mod:`~bench.environment` all of the above wired together, and the rep signed in
* :mod:`~bench.baseline`    the bare LangChain / LangGraph agents
* :mod:`~bench.turns`       turn cost and approve-click cost, ours against bare
* :mod:`~bench.load`        N concurrent requests: latency and wall time per request
* :mod:`~bench.processes`   HTTP servers run as subprocesses
* :mod:`~bench.acks`        the Functions HTTP trigger's ack against a bare enqueueing trigger
* :mod:`~bench.function_host` the bench's stand-in for the Functions host (a subprocess)
* :mod:`~bench.channel`     channel tokens the bench signs, with their OpenID metadata
* :mod:`~bench.azurite`     the Azurite queue emulator (npm) as a subprocess
* :mod:`~bench.bots`        bot dev server replies against an echo bot
* :mod:`~bench.echo_bot`  the minimal botbuilder echo bot (a subprocess)
* :mod:`~bench.imports`     cold import times of the Functions paths
* :mod:`~bench.report`      the table and the JSON document
* :mod:`~bench.run`         the command: runs everything, progress on stderr
* :mod:`~bench.capacity`    the capacity model from parameters, calibrated against a run
* :mod:`~bench.cli`         ``python -m bench run|capacity``: arguments and the error edge
"""

from __future__ import annotations
