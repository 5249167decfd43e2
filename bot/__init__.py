"""The Teams bot: activity handling, Adaptive Cards, SSO and streaming. Imports ``copilot`` only."""

DEFAULT_TURN_QUEUE = "copilot-turns"
"""``BotSettings.queue_name``'s default (``COPILOT_TURN_QUEUE`` unset). Kept here, not in
``bot.settings``, so the Function App can name its queue triggers when it is indexed
without importing pydantic-settings (``functions/turns.py``)."""
