"""Rejected proposals, kept for analytics (invariant 6: they are not writes, not audited)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from copilot.errors import IdempotencyMismatch


@dataclass(frozen=True)
class Rejection:
    """One rejected proposal and the rep's reason."""

    id: int
    tenant_id: str
    rep_aad_id: str
    thread_id: str
    tool_call_id: str
    tool: str
    args: dict[str, Any]
    reason: str
    rejected_at: datetime


async def record(
    conn: AsyncConnection[Any],
    *,
    tenant_id: str,
    rep_aad_id: str,
    thread_id: str,
    tool_call_id: str,
    tool: str,
    args: dict[str, Any],
    reason: str,
) -> int:
    """Record a rejection once per tool call; a repeat (double click) returns the same id.

    A repeat that disagrees about the tool, arguments or reason raises
    :class:`IdempotencyMismatch`: a proposal is decided once.
    """
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            """
            INSERT INTO rejections (tenant_id, rep_aad_id, thread_id, tool_call_id, tool, args, reason)
            VALUES (%s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (thread_id, tool_call_id) DO NOTHING
            RETURNING id
            """,
            (tenant_id, rep_aad_id, thread_id, tool_call_id, tool, Jsonb(args), reason),
        )
        inserted = await cur.fetchone()
        if inserted is not None:
            return int(inserted["id"])
        # Compared in SQL so jsonb's own normalisation applies to both sides.
        await cur.execute(
            """
            SELECT id, (tool = %s AND args = %s::jsonb AND reason = %s) AS same
              FROM rejections WHERE thread_id = %s AND tool_call_id = %s
            """,
            (tool, Jsonb(args), reason, thread_id, tool_call_id),
        )
        existing = await cur.fetchone()
    if existing is None:  # only if it was deleted between the two statements
        raise RuntimeError(f"rejection of {thread_id}:{tool_call_id} vanished while being recorded")
    if not existing["same"]:
        raise IdempotencyMismatch(
            "this proposal was already rejected with a different reason or arguments",
            key=f"{thread_id}:{tool_call_id}",
        )
    return int(existing["id"])


async def list_rejections(conn: AsyncConnection[Any], *, thread_id: str) -> list[Rejection]:
    """The thread's rejections, oldest first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            """
            SELECT id, tenant_id, rep_aad_id, thread_id, tool_call_id, tool, args, reason, rejected_at
              FROM rejections WHERE thread_id = %s ORDER BY id
            """,
            (thread_id,),
        )
        rows = await cur.fetchall()
    return [Rejection(**row) for row in rows]
