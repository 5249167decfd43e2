"""``python -m evals``: how well the copilot answers, per model, on datasets built from
the sandbox's seed. Modules, one job each:

* :mod:`~evals.dataset`     items, expectations and thresholds (JSONL + JSON)
* :mod:`~evals.phrasing`    templates, synonyms, typos and casing (seeded)
* :mod:`~evals.generate`    the datasets from a freshly seeded sandbox, read over MCP
* :mod:`~evals.brief_items` the brief and digest items from the reps' calendars and reads (pure)
* :mod:`~evals.crm`         the CRM as one rep sees it (MCP, the rep's token)
* :mod:`~evals.environment` sandbox, fresh database, settings per model, sign-in
* :mod:`~evals.observe`     model calls, tokens, tool calls and results (callbacks)
* :mod:`~evals.run`         items through ``CopilotService``, scored per turn
* :mod:`~evals.briefs`      brief items through ``briefs_at`` / ``digest_at``, once per eval
* :mod:`~evals.scripted`    the eval's own misbehaving models (``--model scripted:lazy``)
* :mod:`~evals.metrics`     the metrics (pure)
* :mod:`~evals.report`      one table per model, the JSON report
* :mod:`~evals.langsmith`   the ``--langsmith`` upload step (a hook to fill)
* :mod:`~evals.command`     the command
* :mod:`~evals.cli`         ``python -m evals``: its arguments
"""
