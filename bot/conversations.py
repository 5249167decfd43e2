"""Conversation ↔ thread mapping, approval-card locations and conversation references."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from copilot.identity import RepIdentity

Pool = AsyncConnectionPool[AsyncConnection[DictRow]]


async def thread_for(pool: Pool, conversation_id: str, identity: RepIdentity) -> str | None:
    """The thread this rep runs in this Teams conversation, if any (``None`` also when retention
    deleted it: the conversation then goes on in a new thread, never "start over")."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """
            SELECT c.thread_id FROM conversations c JOIN threads t ON t.thread_id = c.thread_id
             WHERE c.conversation_id = %s AND c.tenant_id = %s AND c.aad_object_id = %s
            """,
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
            DO UPDATE SET conversation_id = EXCLUDED.conversation_id, activity_id = EXCLUDED.activity_id,
                          decided_at = NULL
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


@dataclass(frozen=True)
class CardCopy:
    """Where the newest copy of one proposal's approval card was posted, and when first."""

    thread_id: str
    tool_call_id: str
    conversation_id: str
    activity_id: str
    created_at: datetime


async def card_copy(
    pool: Pool, thread_id: str, tool_call_id: str, *, owner: RepIdentity | None = None
) -> CardCopy | None:
    """The newest copy of a proposal's approval card, if one was posted (and, with
    ``owner``, only if its thread is that rep's own)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """
            SELECT c.thread_id, c.tool_call_id, c.conversation_id, c.activity_id, c.created_at
              FROM approval_cards c JOIN threads t ON t.thread_id = c.thread_id
             WHERE c.thread_id = %(thread)s AND c.tool_call_id = %(call)s
               AND (%(any)s OR (t.tenant_id = %(tenant)s AND t.owner_aad_id = %(aad)s))
            """,
            {
                "thread": thread_id,
                "call": tool_call_id,
                "any": owner is None,
                "tenant": owner.tenant_id if owner else "",
                "aad": owner.aad_object_id if owner else "",
            },
        )
        row = await cur.fetchone()
    return None if row is None else _copy(row)


async def undecided_cards(
    pool: Pool, identity: RepIdentity, *, limit: int = 200, owner_aad_id: str | None = None
) -> list[CardCopy]:
    """Approval cards not yet decided on threads this rep owns (never shared ones), or with
    ``owner_aad_id`` on those of that colleague of the rep's tenant (whose approvals the rep
    holds), newest first: the candidates for "my approvals" (the thread's state, read
    through the runner's decision check, says which of them still wait and may be decided)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """
            SELECT c.thread_id, c.tool_call_id, c.conversation_id, c.activity_id, c.created_at
              FROM approval_cards c JOIN threads t ON t.thread_id = c.thread_id
             WHERE t.tenant_id = %s AND t.owner_aad_id = %s AND c.decided_at IS NULL
             ORDER BY c.created_at DESC
             LIMIT %s
            """,
            (identity.tenant_id, owner_aad_id or identity.aad_object_id, limit),
        )
        rows = await cur.fetchall()
    return [_copy(row) for row in rows]


def _copy(row: DictRow) -> CardCopy:
    return CardCopy(
        thread_id=str(row["thread_id"]),
        tool_call_id=str(row["tool_call_id"]),
        conversation_id=str(row["conversation_id"]),
        activity_id=str(row["activity_id"]),
        created_at=row["created_at"],
    )


@dataclass
class CardHold:
    """The right to decide one proposal's card, for the length of a :func:`deciding` block."""

    granted: bool
    """False if another submission is deciding this card right now, or already decided it."""
    _conn: AsyncConnection[Any] | None = field(default=None, repr=False)
    _key: tuple[str, str] | None = field(default=None, repr=False)

    async def mark_decided(self) -> None:
        """The decision went through: later submissions of the card are told so.

        Committed when the hold ends, together with the lock's release, so no submission
        can slip in between (and a crash before the end leaves the card undecided).
        """
        if self._conn is None or self._key is None:
            return
        await self._conn.execute(
            "UPDATE approval_cards SET decided_at = now() WHERE thread_id = %s AND tool_call_id = %s",
            self._key,
        )


@asynccontextmanager
async def deciding(pool: Pool, thread_id: str, tool_call_id: str) -> AsyncIterator[CardHold]:
    """Hold one proposal's card while a submission decides it (double clicks decide once).

    The hold is a transaction-scoped advisory lock on a connection of its own, so it
    ends with the block, or with the process if that dies mid-approval: a crash never
    leaves a card stuck as "already decided" while its proposal is still pending.
    Cards the bot did not record (e.g. posted by an older version) can be held too;
    the runner's own exactly-once guarantees cover them.
    """
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(_TRY_HOLD_SQL, (f"{thread_id}:{tool_call_id}",))
        held = await cur.fetchone()
        if held is None or not held["held"]:
            yield CardHold(granted=False)
            return
        cur = await conn.execute(
            "SELECT decided_at FROM approval_cards WHERE thread_id = %s AND tool_call_id = %s",
            (thread_id, tool_call_id),
        )
        card = await cur.fetchone()
        if card is not None and card["decided_at"] is not None:
            yield CardHold(granted=False)
            return
        yield CardHold(granted=True, _conn=conn, _key=(thread_id, tool_call_id))


# Transaction-scoped, so it also works behind PgBouncer in transaction mode.
_TRY_HOLD_SQL = "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 20261202)) AS held"


PENDING_MESSAGE_MINUTES = 15
"""A message kept across a sign-in is answered only if the sign-in comes within this time."""


@dataclass(frozen=True)
class PendingMessage:
    """A message that waits for its rep to sign in."""

    text: str
    activity_id: str | None


async def keep_pending(
    pool: Pool, tenant_id: str, aad_object_id: str, conversation_id: str, text: str, activity_id: str | None
) -> None:
    """Keep a message while its rep signs in (the latest one per rep and conversation)."""
    async with pool.connection() as conn:
        await conn.execute(
            """
            INSERT INTO pending_messages (tenant_id, aad_object_id, conversation_id, text, activity_id)
            VALUES (%s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, aad_object_id, conversation_id)
            DO UPDATE SET text = EXCLUDED.text, activity_id = EXCLUDED.activity_id, received_at = now()
            """,
            (tenant_id, aad_object_id, conversation_id, text, activity_id),
        )


async def take_pending(
    pool: Pool, tenant_id: str, aad_object_id: str, conversation_id: str
) -> PendingMessage | None:
    """The message kept for this rep and conversation, removed; ``None`` if none or too old."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """
            DELETE FROM pending_messages
             WHERE tenant_id = %s AND aad_object_id = %s AND conversation_id = %s
            RETURNING text, activity_id, received_at > now() - make_interval(mins => %s) AS fresh
            """,
            (tenant_id, aad_object_id, conversation_id, PENDING_MESSAGE_MINUTES),
        )
        row = await cur.fetchone()
    if row is None or not row["fresh"]:
        return None
    return PendingMessage(str(row["text"]), row["activity_id"])


async def prune_pending(pool: Pool) -> int:
    """Forget messages whose rep never signed in within ``PENDING_MESSAGE_MINUTES``."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "DELETE FROM pending_messages WHERE received_at < now() - make_interval(mins => %s)",
            (PENDING_MESSAGE_MINUTES,),
        )
        return cur.rowcount
