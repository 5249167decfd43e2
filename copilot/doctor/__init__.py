"""``python -m copilot doctor``: a preflight of a deployed configuration.

A small check framework (:mod:`copilot.doctor.framework`) and the copilot's own checks
(settings, database, audit, Entra, CRM, Graph, models, LangSmith). The bot's and the
Functions app's checks live in their own layers (``bot/doctor.py``, ``functions/doctor.py``),
and the top layer composes all of them (``functions.doctor.all_checks``), so every
dependency still points ``functions/ → bot/ → copilot/``.
"""
