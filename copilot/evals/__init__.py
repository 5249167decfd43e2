"""``python -m copilot eval``: how well the copilot answers, per model, on datasets built from
the sandbox's seed. Modules, one job each:

* :mod:`~copilot.evals.dataset`     items, expectations and thresholds (JSONL + JSON)
* :mod:`~copilot.evals.phrasing`    templates, synonyms, typos and casing (seeded)
* :mod:`~copilot.evals.generate`    the datasets from a freshly seeded sandbox, read over MCP
* :mod:`~copilot.evals.crm`         the CRM as one rep sees it (MCP, the rep's token)
* :mod:`~copilot.evals.environment` sandbox, fresh database, settings per model, sign-in
* :mod:`~copilot.evals.observe`     model calls, tokens, tool calls and results (callbacks)
* :mod:`~copilot.evals.run`         items through ``CopilotService``, scored per turn
* :mod:`~copilot.evals.scripted`    the eval's own misbehaving models (``--model scripted:lazy``)
* :mod:`~copilot.evals.metrics`     the metrics (pure)
* :mod:`~copilot.evals.report`      one table per model, the JSON report
* :mod:`~copilot.evals.langsmith`   the ``--langsmith`` upload step (a hook to fill)
* :mod:`~copilot.evals.command`     the command
"""
