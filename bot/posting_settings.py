"""The copilot's port to the reps' brief and digest settings (:class:`copilot.posting.PostingSettings`),
kept by the bot in ``brief_settings`` with the 1:1 chat the posts go to (``bot/brief_store.py``).

The bot keeps a rep's 1:1 chat there on every turn in it (``brief_store.record_chat``), so a
change the rep asks for in their own words, and approves on its card, finds where to post.
"""

from __future__ import annotations

from dataclasses import replace

from bot import brief_store
from bot.brief_store import Pool
from copilot.identity import RepIdentity
from copilot.posting import NO_CHAT, PostingChange, PostingUnreachable, Preferences


class BotPostingSettings:
    """Brief and digest settings in the bot's table; an unset lead time reads as the admin's."""

    def __init__(self, pool: Pool, default_lead_minutes: int):
        self.pool = pool
        self.default_lead_minutes = default_lead_minutes

    def _shown(self, prefs: Preferences) -> Preferences:
        return replace(prefs, lead_minutes=prefs.lead_minutes or self.default_lead_minutes)

    async def current(self, identity: RepIdentity) -> Preferences:
        """The rep's settings; :class:`PostingUnreachable` when no 1:1 chat is kept for them."""
        prefs = await brief_store.kept_preferences(self.pool, identity)
        if prefs is None:
            raise PostingUnreachable(NO_CHAT)
        return self._shown(prefs)

    async def change(self, identity: RepIdentity, change: PostingChange) -> Preferences:
        """Apply ``change``; :class:`PostingUnreachable` when no 1:1 chat is kept for the rep."""
        prefs = await brief_store.change_settings(self.pool, identity, change)
        if prefs is None:
            raise PostingUnreachable(NO_CHAT)
        return self._shown(prefs)
