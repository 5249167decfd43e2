"""Brief and digest settings stored for a test's setup, through the bot's own store functions
(as an approved ``change_briefs_and_digest`` stores them), when the test is about what the
timers do, not how the rep asked."""

from __future__ import annotations

from datetime import time
from typing import Any

from bot import brief_store
from bot.brief_store import Pool
from copilot.identity import RepIdentity
from copilot.posting import PostingChange, Preferences


async def keep_settings(
    pool: Pool,
    identity: RepIdentity,
    reference: dict[str, Any],
    *,
    time_zone: str | None = None,
    briefs: bool | None = None,
    digest: bool | None = None,
    digest_time: time | None = None,
) -> Preferences:
    """The rep's 1:1 chat kept (``reference``) and these settings applied; the settings now."""
    await brief_store.record_chat(pool, identity, reference, time_zone)
    prefs = await brief_store.change_settings(
        pool, identity, PostingChange(briefs=briefs, digest=digest, digest_time=digest_time)
    )
    assert prefs is not None
    return prefs
