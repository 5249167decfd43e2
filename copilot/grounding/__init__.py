"""Grounding for every model: answers only from this run's reads, and tool calls written as text
recovered as real calls or refused (invariant 8). Pure parts here; the middleware that applies
them is :mod:`copilot.middleware.grounding`."""

COULD_NOT_LOOK_UP = (
    "I couldn't look that up reliably — try again or rephrase. Nothing was changed in the CRM."
)
"""The honest answer when a model's reply could not be grounded in this run's reads."""
