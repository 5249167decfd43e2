"""The tools the model is given: the CRM's read tools come from ``copilot/tools/``; these are
the copilot's own reads (preferences, recent writes, the knowledge search) and the write
tools built from the registry. Above ``writes/`` and ``context``, which they use."""
