"""Conversation threads and who may open them (invariant 7).

A thread row stores the owning tenant and rep. Every turn and every resume calls
:func:`authorize` *before* the checkpointer restores state, so a guessed or leaked
thread id never yields someone else's conversation. Thread ids are random (192 bits).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from psycopg import AsyncConnection, sql
from psycopg.errors import UniqueViolation
from psycopg.rows import dict_row

from copilot.errors import ThreadAccessDenied, ThreadNotFound

# LangGraph's checkpoint tables, keyed by thread_id: retention removes a thread's state
# from them too (they exist only after `db migrate` ran the LangGraph setup).
_CHECKPOINT_TABLES = ("checkpoint_writes", "checkpoint_blobs", "checkpoints")

_DENIED = (
    "you do not have access to this conversation thread; "
    "start a new conversation or ask the person who started it to share it with you"
)


def new_thread_id() -> str:
    """A fresh, unguessable thread id (32 URL-safe characters, about 192 random bits).

    Never starts with ``-``: a command line would take ``--thread -abc…`` for an option.
    """
    while True:
        # Redrawing (about 1 draw in 64) keeps the id's length and alphabet; the first
        # character is then one of 63, which costs a negligible 0.02 bits.
        thread_id = secrets.token_urlsafe(24)
        if not thread_id.startswith("-"):
            return thread_id


SIDE_SUFFIX = "~side"
"""Ends a side thread's id; ``~`` is not in the URL-safe alphabet of thread ids."""


def side_thread_id(thread_id: str) -> str:
    """The checkpoint thread earlier versions ran a question asked while ``thread_id`` waited
    in (no ``threads`` row of its own). Such a question now runs on a new thread of the rep's
    (``CopilotService._side_answer``); retention and data deletion still clear these leftovers.
    """
    return f"{thread_id}{SIDE_SUFFIX}"


@dataclass(frozen=True)
class ThreadInfo:
    """One thread as listed for a rep."""

    thread_id: str
    tenant_id: str
    owner_aad_id: str
    created_at: datetime
    last_active_at: datetime
    delegated: bool
    """True when the rep sees this thread through a delegation, not as its owner."""


async def create_thread(
    conn: AsyncConnection[Any],
    *,
    tenant_id: str,
    owner_aad_id: str,
    thread_id: str | None = None,
    now: datetime | None = None,
    lineage: str | None = None,
) -> str:
    """Record a new thread owned by ``owner_aad_id`` in ``tenant_id``; returns its id.

    Passing an existing ``thread_id`` is refused rather than silently taking it over.
    ``now`` is the creation time (default the database's clock); ``lineage`` the first
    thread of the conversation this one continues (default: it starts one).
    """
    if not tenant_id or not owner_aad_id:
        raise ValueError("a thread needs a tenant and an owner")
    thread_id = new_thread_id() if thread_id is None else thread_id
    try:
        await conn.execute(
            """
            INSERT INTO threads (thread_id, tenant_id, owner_aad_id, created_at, last_active_at, lineage)
            VALUES (%(id)s, %(tenant)s, %(owner)s, coalesce(%(now)s, now()), coalesce(%(now)s, now()),
                    coalesce(%(lineage)s, %(id)s))
            """,
            {"id": thread_id, "tenant": tenant_id, "owner": owner_aad_id, "now": now, "lineage": lineage},
        )
    except UniqueViolation as exc:
        raise ThreadAccessDenied(_DENIED, thread_id=thread_id) from exc
    return thread_id


async def delete_thread(conn: AsyncConnection[Any], thread_id: str) -> None:
    """Remove a thread row (and what cascades with it); its checkpoints are the saver's to delete."""
    await conn.execute("DELETE FROM threads WHERE thread_id = %s", (thread_id,))


Purpose = Literal["converse", "decide"]
"""What the caller wants of a thread: ask in it (and read it), or decide its pending proposals."""


async def authorize(
    conn: AsyncConnection[Any],
    *,
    thread_id: str,
    tenant_id: str,
    aad_id: str,
    now: datetime,
    purpose: Purpose = "converse",
) -> str | None:
    """Allow the caller in if they own the thread (same tenant) or hold a delegation for it.

    The one check of who may act on a thread, the rep an interrupt belongs to included: for
    ``purpose="decide"`` a live approval delegation from the thread's owner (same tenant,
    within its window, not revoked; ``copilot/delegation.py``) also admits the caller.
    Returns the owner's object id when only such a delegation admitted the caller (the
    decision is then the delegate's, on the owner's behalf), else None.

    Raises :class:`ThreadNotFound` for an unknown id and :class:`ThreadAccessDenied`
    otherwise; neither message names the owner.
    """
    row = await _fetch_one(
        conn,
        """
        SELECT (t.tenant_id = %(tenant)s AND t.owner_aad_id = %(aad)s) AS is_owner,
               EXISTS (SELECT 1 FROM thread_delegations d
                        WHERE d.thread_id = t.thread_id
                          AND d.tenant_id = %(tenant)s
                          AND d.delegate_aad_id = %(aad)s) AS is_delegate,
               (%(decide)s AND EXISTS (
                   SELECT 1 FROM approval_delegations g
                    WHERE g.tenant_id = t.tenant_id AND g.owner_aad_id = t.owner_aad_id
                      AND g.tenant_id = %(tenant)s AND g.delegate_aad_id = %(aad)s
                      AND g.revoked_at IS NULL AND g.starts_at <= %(now)s AND g.ends_at > %(now)s
               )) AS decides_for_owner,
               t.owner_aad_id
          FROM threads t
         WHERE t.thread_id = %(thread)s
        """,
        {"thread": thread_id, "tenant": tenant_id, "aad": aad_id, "decide": purpose == "decide", "now": now},
    )
    if row is None:
        raise ThreadNotFound(
            "this conversation thread does not exist (it may have expired); start a new conversation",
            thread_id=thread_id,
        )
    if row["is_owner"] or row["is_delegate"]:
        return None
    if row["decides_for_owner"]:
        return str(row["owner_aad_id"])
    raise ThreadAccessDenied(_DENIED, thread_id=thread_id)


async def touch(conn: AsyncConnection[Any], thread_id: str, now: datetime | None = None) -> datetime:
    """Mark the thread active at ``now`` (default the database's clock; retention counts from
    the last activity); returns when it was active before."""
    row = await _fetch_one(
        conn,
        """
        UPDATE threads t SET last_active_at = coalesce(%(now)s, now())
          FROM (SELECT thread_id, last_active_at FROM threads WHERE thread_id = %(id)s FOR UPDATE) before
         WHERE t.thread_id = before.thread_id
        RETURNING before.last_active_at
        """,
        {"id": thread_id, "now": now},
    )
    if row is None:
        raise ThreadNotFound("this conversation thread does not exist", thread_id=thread_id)
    last: datetime = row["last_active_at"]
    return last


# --- rotation (copilot/rotation.py): a conversation is a chain of threads -------------------


async def current_of(conn: AsyncConnection[Any], thread_id: str) -> str:
    """The newest thread of the chain ``thread_id`` belongs to (itself if it was never rotated)."""
    row = await _fetch_one(
        conn,
        """
        WITH RECURSIVE chain(thread_id, rotated_to, depth) AS (
            SELECT thread_id, rotated_to, 0 FROM threads WHERE thread_id = %(id)s
            UNION ALL
            SELECT t.thread_id, t.rotated_to, c.depth + 1
              FROM threads t JOIN chain c ON t.thread_id = c.rotated_to
        )
        SELECT thread_id FROM chain ORDER BY depth DESC LIMIT 1
        """,
        {"id": thread_id},
    )
    return thread_id if row is None else str(row["thread_id"])


async def rotate(
    conn: AsyncConnection[Any],
    thread_id: str,
    tenant_id: str,
    owner_aad_id: str,
    *,
    now: datetime | None = None,
) -> str | None:
    """Open the successor of ``thread_id`` (same owner, same conversation); returns its id, or
    ``None`` if the caller is not the thread's owner (or it was rotated already).

    Call under the thread's run lock: the old thread then names its successor, and every
    later turn on it follows there (:func:`current_of`).
    """
    row = await _fetch_one(
        conn,
        """
        SELECT tenant_id, owner_aad_id, coalesce(lineage, thread_id) AS lineage FROM threads
         WHERE thread_id = %s AND tenant_id = %s AND owner_aad_id = %s AND rotated_to IS NULL
        """,
        (thread_id, tenant_id, owner_aad_id),
    )
    if row is None:
        return None
    async with conn.transaction():
        successor = await create_thread(
            conn,
            tenant_id=row["tenant_id"],
            owner_aad_id=row["owner_aad_id"],
            now=now,
            lineage=row["lineage"],
        )
        await conn.execute(
            "UPDATE threads SET rotated_to = %s, lineage = %s WHERE thread_id = %s",
            (successor, row["lineage"], thread_id),
        )
    return successor


async def predecessor(conn: AsyncConnection[Any], thread_id: str) -> str | None:
    """The thread ``thread_id`` took over from, if any."""
    row = await _fetch_one(conn, "SELECT thread_id FROM threads WHERE rotated_to = %s", (thread_id,))
    return None if row is None else str(row["thread_id"])


async def rotated_with_checkpoints(conn: AsyncConnection[Any], thread_id: str) -> list[str]:
    """The threads of ``thread_id``'s conversation that were rotated away from and may still
    hold checkpoints (their proposals were pending, or they were not compacted yet)."""
    rows = await _fetch_all(
        conn,
        """
        SELECT thread_id FROM threads
         WHERE lineage = (SELECT coalesce(lineage, thread_id) FROM threads WHERE thread_id = %(id)s)
           AND rotated_to IS NOT NULL AND checkpoints_cleared_at IS NULL AND thread_id <> %(id)s
         ORDER BY created_at
        """,
        {"id": thread_id},
    )
    return [str(row["thread_id"]) for row in rows]


async def mark_checkpoints_cleared(conn: AsyncConnection[Any], thread_id: str) -> None:
    """Record that a rotated thread's checkpoints were deleted (nothing was pending there)."""
    await conn.execute("UPDATE threads SET checkpoints_cleared_at = now() WHERE thread_id = %s", (thread_id,))


async def grant_delegation(
    conn: AsyncConnection[Any],
    *,
    thread_id: str,
    owner_tenant_id: str,
    owner_aad_id: str,
    delegate_aad_id: str,
) -> None:
    """Let ``delegate_aad_id`` (same tenant) open the owner's thread; only the owner may grant.

    Granting twice is a no-op.
    """
    row = await _fetch_one(
        conn,
        "SELECT tenant_id = %s AND owner_aad_id = %s AS is_owner FROM threads WHERE thread_id = %s",
        (owner_tenant_id, owner_aad_id, thread_id),
    )
    if row is None:
        raise ThreadNotFound("this conversation thread does not exist", thread_id=thread_id)
    if not row["is_owner"]:
        # A delegate cannot re-share: only the owner decides who sees the thread.
        raise ThreadAccessDenied("only the person who started this thread can share it", thread_id=thread_id)
    if delegate_aad_id == owner_aad_id:
        return
    await conn.execute(
        """
        INSERT INTO thread_delegations (thread_id, tenant_id, delegate_aad_id, granted_by)
        VALUES (%s, %s, %s, %s)
        ON CONFLICT (thread_id, delegate_aad_id) DO NOTHING
        """,
        (thread_id, owner_tenant_id, delegate_aad_id, owner_aad_id),
    )


async def list_threads(
    conn: AsyncConnection[Any], *, tenant_id: str, aad_id: str, limit: int = 20
) -> list[ThreadInfo]:
    """The caller's threads (owned or delegated), most recently active first."""
    rows = await _fetch_all(
        conn,
        """
        SELECT t.thread_id, t.tenant_id, t.owner_aad_id, t.created_at, t.last_active_at,
               NOT (t.tenant_id = %(tenant)s AND t.owner_aad_id = %(aad)s) AS delegated
          FROM threads t
         WHERE (t.tenant_id = %(tenant)s AND t.owner_aad_id = %(aad)s)
            OR EXISTS (SELECT 1 FROM thread_delegations d
                        WHERE d.thread_id = t.thread_id
                          AND d.tenant_id = %(tenant)s
                          AND d.delegate_aad_id = %(aad)s)
         ORDER BY t.last_active_at DESC, t.thread_id
         LIMIT %(limit)s
        """,
        {"tenant": tenant_id, "aad": aad_id, "limit": limit},
    )
    return [ThreadInfo(**row) for row in rows]


async def expire_threads(conn: AsyncConnection[Any], *, older_than: timedelta) -> list[str]:
    """Delete threads idle for longer than ``older_than``, with their checkpoints; returns their ids.

    Delegations go with the thread (ON DELETE CASCADE) and so do pending idempotency
    keys; the audit log and rejections are records of what happened and stay.
    """
    async with conn.transaction():
        rows = await _fetch_all(
            conn, "DELETE FROM threads WHERE last_active_at < now() - %s RETURNING thread_id", (older_than,)
        )
        expired = [str(row["thread_id"]) for row in rows]
        if not expired:
            return []
        await conn.execute("DELETE FROM idempotency_keys WHERE thread_id = ANY(%s)", (expired,))
        for table in _CHECKPOINT_TABLES:
            present = await _fetch_one(conn, "SELECT to_regclass(%s) IS NOT NULL AS present", (table,))
            if present is not None and present["present"]:
                await conn.execute(
                    sql.SQL("DELETE FROM {} WHERE thread_id = ANY(%s)").format(sql.Identifier(table)),
                    (expired,),
                )
    return sorted(expired)


async def _fetch_one(conn: AsyncConnection[Any], query: str, params: Any) -> dict[str, Any] | None:
    # Dict rows whatever the connection's own row factory (the pool's is dict_row, a
    # plain connection's is tuples).
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchone()


async def _fetch_all(conn: AsyncConnection[Any], query: str, params: Any) -> list[dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()


async def was_answered(conn: AsyncConnection[Any], thread_id: str, message_id: str) -> bool:
    """Whether the thread already answered the message named ``message_id``."""
    cur = await conn.execute(
        "SELECT 1 FROM answered_messages WHERE thread_id = %s AND message_id = %s", (thread_id, message_id)
    )
    return await cur.fetchone() is not None


async def mark_answered(conn: AsyncConnection[Any], thread_id: str, message_id: str) -> None:
    """Record that the thread answered the message named ``message_id`` (idempotent)."""
    await conn.execute(
        "INSERT INTO answered_messages (thread_id, message_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        (thread_id, message_id),
    )
