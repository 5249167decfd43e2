"""Webhook retries: Teams may deliver the same activity twice; only the first is queued."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: bot/ builds the activity, functions.host the pool
    from botbuilder.schema import Activity

    from bot.conversations import Pool


async def first_delivery(pool: Pool, activity: Activity) -> bool:
    """Record the activity's delivery; False if this exact activity was already accepted.

    Activities without an id cannot be told apart and always count as first deliveries.
    """
    if not activity.id or activity.conversation is None:
        return True
    async with pool.connection() as conn:
        cur = await conn.execute(
            """
            INSERT INTO inbound_activities (channel_id, conversation_id, activity_id)
            VALUES (%s, %s, %s)
            ON CONFLICT DO NOTHING
            RETURNING 1 AS fresh
            """,
            (activity.channel_id or "", activity.conversation.id, activity.id),
        )
        return await cur.fetchone() is not None


DEDUPE_WINDOW = timedelta(days=2)
"""How long a delivery is remembered: only needs to outlive Teams' retries (minutes)."""


async def prune_deliveries(pool: Pool, *, older_than: timedelta = DEDUPE_WINDOW) -> int:
    """Forget deliveries older than ``older_than`` (the daily retention); returns how many."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "DELETE FROM inbound_activities WHERE received_at < now() - %s", (older_than,)
        )
        return max(cur.rowcount, 0)
