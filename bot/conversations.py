"""Conversation ↔ thread mapping, approval-card locations and conversation references."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from copilot.identity import RepIdentity

Pool = AsyncConnectionPool[AsyncConnection[DictRow]]


async def thread_for(pool: Pool, conversation_id: str, identity: RepIdentity) -> str | None:
    """The thread this rep runs in this Teams conversation, if any."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT thread_id FROM conversations WHERE conversation_id = %s AND tenant_id = %s AND aad_object_id = %s",
            (conversation_id, identity.tenant_id, identity.aad_object_id),
        )
        row = await cur.fetchone()
    return None if row is None else str(row["thread_id"])


async def remember(
    pool: Pool, conversation_id: str, identity: RepIdentity, thread_id: str, reference: dict[str, Any]
) -> None:
    """Record which thread the conversation uses and how to reach it proactively."""
    async with pool.connection() as conn:
        await conn.execute(
            """
            INSERT INTO conversations (conversation_id, tenant_id, aad_object_id, thread_id, reference)
            VALUES (%s, %s, %s, %s, %s)
            ON CONFLICT (conversation_id, tenant_id, aad_object_id)
            DO UPDATE SET thread_id = EXCLUDED.thread_id, reference = EXCLUDED.reference, updated_at = now()
            """,
            (conversation_id, identity.tenant_id, identity.aad_object_id, thread_id, Jsonb(reference)),
        )


async def forget(pool: Pool, conversation_id: str, identity: RepIdentity) -> None:
    """Start over: the next message opens a new thread."""
    async with pool.connection() as conn:
        await conn.execute(
            "DELETE FROM conversations WHERE conversation_id = %s AND tenant_id = %s AND aad_object_id = %s",
            (conversation_id, identity.tenant_id, identity.aad_object_id),
        )


async def save_card(
    pool: Pool, thread_id: str, tool_call_id: str, conversation_id: str, activity_id: str
) -> None:
    """Where the approval card of one proposal was posted (to update it in place later)."""
    async with pool.connection() as conn:
        await conn.execute(
            """
            INSERT INTO approval_cards (thread_id, tool_call_id, conversation_id, activity_id)
            VALUES (%s, %s, %s, %s)
            ON CONFLICT (thread_id, tool_call_id)
            DO UPDATE SET activity_id = EXCLUDED.activity_id, decided_at = NULL
            """,
            (thread_id, tool_call_id, conversation_id, activity_id),
        )


async def card_activity(pool: Pool, thread_id: str, tool_call_id: str) -> str | None:
    """The activity id of a proposal's approval card."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT activity_id FROM approval_cards WHERE thread_id = %s AND tool_call_id = %s",
            (thread_id, tool_call_id),
        )
        row = await cur.fetchone()
    return None if row is None else str(row["activity_id"])


async def claim_card(pool: Pool, thread_id: str, tool_call_id: str) -> bool:
    """Mark a proposal's card as being decided; False if another submission got there first.

    Cards the bot did not record (e.g. posted by an older version) cannot be claimed and
    are left to the runner's own exactly-once guarantees.
    """
    async with pool.connection() as conn:
        cur = await conn.execute(
            """
            UPDATE approval_cards SET decided_at = now()
             WHERE thread_id = %s AND tool_call_id = %s AND decided_at IS NULL
            RETURNING 1 AS claimed
            """,
            (thread_id, tool_call_id),
        )
        if await cur.fetchone() is not None:
            return True
        cur = await conn.execute(
            "SELECT 1 FROM approval_cards WHERE thread_id = %s AND tool_call_id = %s",
            (thread_id, tool_call_id),
        )
        return await cur.fetchone() is None


async def release_card(pool: Pool, thread_id: str, tool_call_id: str) -> None:
    """The decision did not go through (invalid, or the CRM was down): the card is open again."""
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE approval_cards SET decided_at = NULL WHERE thread_id = %s AND tool_call_id = %s",
            (thread_id, tool_call_id),
        )
