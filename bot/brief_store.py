"""Meeting prep briefs, stored: the reps' opt-in and the claims that post each brief once.

``brief_settings`` holds a rep's ``brief on|off`` and the conversation reference of the 1:1
chat it was said in (where the timer posts). ``brief_claims`` is keyed (tenant, rep, meeting):
the timer claims with ``INSERT … ON CONFLICT DO NOTHING`` before posting, as the write claims
do, so scaled-out instances and timer retries post one brief per meeting per rep. A claim whose
post failed is released, so the next run posts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from copilot.identity import RepIdentity

Pool = AsyncConnectionPool[AsyncConnection[DictRow]]


@dataclass(frozen=True)
class BriefSubscriber:
    """A rep who turned briefs on, and the 1:1 chat their briefs go to."""

    tenant_id: str
    aad_object_id: str
    reference: dict[str, Any]


async def set_briefs(pool: Pool, identity: RepIdentity, *, enabled: bool, reference: dict[str, Any]) -> None:
    """Store the rep's choice and the 1:1 chat it was made in (the last one said wins)."""
    async with pool.connection() as conn:
        await conn.execute(
            """
            INSERT INTO brief_settings (tenant_id, aad_object_id, enabled, reference)
            VALUES (%s, %s, %s, %s)
            ON CONFLICT (tenant_id, aad_object_id)
            DO UPDATE SET enabled = EXCLUDED.enabled, reference = EXCLUDED.reference, updated_at = now()
            """,
            (identity.tenant_id, identity.aad_object_id, enabled, Jsonb(reference)),
        )


async def briefs_enabled(pool: Pool, identity: RepIdentity) -> bool:
    """Whether the rep turned briefs on (no choice stored: off)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT enabled FROM brief_settings WHERE tenant_id = %s AND aad_object_id = %s",
            (identity.tenant_id, identity.aad_object_id),
        )
        row = await cur.fetchone()
    return bool(row and row["enabled"])


async def subscribers(pool: Pool) -> list[BriefSubscriber]:
    """Every rep with briefs on, oldest choice first."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """
            SELECT tenant_id, aad_object_id, reference FROM brief_settings
             WHERE enabled ORDER BY updated_at, tenant_id, aad_object_id
            """
        )
        rows = await cur.fetchall()
    return [BriefSubscriber(r["tenant_id"], r["aad_object_id"], dict(r["reference"])) for r in rows]


async def claim_brief(pool: Pool, identity: RepIdentity, meeting_id: str) -> bool:
    """Claim the brief of one meeting for one rep: ``True`` for the one caller that may post it."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """
            INSERT INTO brief_claims (tenant_id, aad_object_id, meeting_id) VALUES (%s, %s, %s)
            ON CONFLICT (tenant_id, aad_object_id, meeting_id) DO NOTHING
            """,
            (identity.tenant_id, identity.aad_object_id, meeting_id),
        )
        return cur.rowcount == 1


async def mark_posted(pool: Pool, identity: RepIdentity, meeting_id: str, activity_id: str | None) -> None:
    """Record the message the brief was posted as."""
    async with pool.connection() as conn:
        await conn.execute(
            """
            UPDATE brief_claims SET activity_id = %s
             WHERE tenant_id = %s AND aad_object_id = %s AND meeting_id = %s
            """,
            (activity_id or "", identity.tenant_id, identity.aad_object_id, meeting_id),
        )


async def release_brief(pool: Pool, identity: RepIdentity, meeting_id: str) -> None:
    """Give a claim back (its post failed), so the next timer run posts the brief."""
    async with pool.connection() as conn:
        await conn.execute(
            """
            DELETE FROM brief_claims
             WHERE tenant_id = %s AND aad_object_id = %s AND meeting_id = %s AND activity_id IS NULL
            """,
            (identity.tenant_id, identity.aad_object_id, meeting_id),
        )
