"""What the copilot posts on its own, stored: the reps' preferences and the claims that post once.

``brief_settings`` holds a rep's preferences (briefs on or off, their lead time, the digest on
or off, its time, the time zone Teams reports) and the conversation reference of the rep's 1:1
chat with the bot, kept on each turn there (where the timers post). The settings change only as
an approved ``change_briefs_and_digest`` changes them (:mod:`bot.posting_settings`). ``brief_claims`` is keyed (tenant, rep,
meeting), ``digest_claims`` (tenant, rep, local day): a timer claims with ``INSERT … ON
CONFLICT DO NOTHING`` before posting, as the write claims do, so scaled-out instances and timer
retries post once. A claim whose post failed is released, so the next run posts it; a claim
whose instance was killed between claiming and recording the post (no activity id) is taken
again once it is older than :data:`CLAIM_LEASE`, by one atomic ``UPDATE … RETURNING``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from psycopg import AsyncConnection, sql
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from copilot.identity import RepIdentity
from copilot.posting import PostingChange, Preferences

Pool = AsyncConnectionPool[AsyncConnection[DictRow]]

CLAIM_LEASE = timedelta(minutes=10)
"""How long a claim without a recorded post holds: far longer than a post takes (seconds), so a
claim older than this belongs to an instance that died before recording its post."""

ClaimTable = Literal["brief_claims", "digest_claims"]
"""The two claim tables: keyed by meeting id and by the rep's local day."""
_CLAIM_KEY: dict[ClaimTable, str] = {"brief_claims": "meeting_id", "digest_claims": "day"}


@dataclass(frozen=True)
class BriefSubscriber:
    """A rep who turned briefs (or the digest) on, the 1:1 chat they go to, and their settings."""

    tenant_id: str
    aad_object_id: str
    reference: dict[str, Any]
    preferences: Preferences = field(default_factory=Preferences)


def _preferences(row: dict[str, Any]) -> Preferences:
    return Preferences(
        enabled=bool(row["enabled"]),
        lead_minutes=row["lead_minutes"],
        digest_enabled=bool(row["digest_enabled"]),
        digest_time=row["digest_time"],
        time_zone=row["time_zone"],
    )


async def preferences(pool: Pool, identity: RepIdentity) -> Preferences:
    """The rep's settings (none stored: the defaults, everything off)."""
    return await kept_preferences(pool, identity) or Preferences()


async def kept_preferences(pool: Pool, identity: RepIdentity) -> Preferences | None:
    """The rep's settings as kept with their 1:1 chat; None when no chat is kept for them."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """
            SELECT enabled, lead_minutes, digest_enabled, digest_time, time_zone FROM brief_settings
             WHERE tenant_id = %s AND aad_object_id = %s
            """,
            (identity.tenant_id, identity.aad_object_id),
        )
        row = await cur.fetchone()
    return _preferences(row) if row else None


async def briefs_enabled(pool: Pool, identity: RepIdentity) -> bool:
    """Whether the rep turned briefs on (no choice stored: off)."""
    return (await preferences(pool, identity)).enabled


async def record_time_zone(pool: Pool, tenant_id: str, aad_object_id: str, time_zone: str) -> None:
    """Keep the time zone a Teams turn reported for a rep who has settings (written only if it changed)."""
    async with pool.connection() as conn:
        await conn.execute(
            """
            UPDATE brief_settings SET time_zone = %s
             WHERE tenant_id = %s AND aad_object_id = %s AND time_zone IS DISTINCT FROM %s
            """,
            (time_zone, tenant_id, aad_object_id, time_zone),
        )


async def record_chat(
    pool: Pool, identity: RepIdentity, reference: dict[str, Any], time_zone: str | None
) -> None:
    """Keep the rep's 1:1 chat as where their briefs and digest go (and the zone Teams reported),
    before any setting is changed: a change the rep approves later finds it. Settings are left
    as they are (a new row: everything off); written only when the chat or the zone changed."""
    async with pool.connection() as conn:
        await conn.execute(
            """
            INSERT INTO brief_settings AS s (tenant_id, aad_object_id, enabled, reference, time_zone)
            VALUES (%(tenant)s, %(aad)s, false, %(reference)s, %(zone)s)
            ON CONFLICT (tenant_id, aad_object_id) DO UPDATE SET
                   reference = EXCLUDED.reference,
                   time_zone = coalesce(EXCLUDED.time_zone, s.time_zone)
             WHERE s.reference IS DISTINCT FROM EXCLUDED.reference
                OR (EXCLUDED.time_zone IS NOT NULL AND s.time_zone IS DISTINCT FROM EXCLUDED.time_zone)
            """,
            {
                "tenant": identity.tenant_id,
                "aad": identity.aad_object_id,
                "reference": Jsonb(reference),
                "zone": time_zone,
            },
        )


async def change_settings(pool: Pool, identity: RepIdentity, change: PostingChange) -> Preferences | None:
    """Apply ``change`` (None fields: left as they are) to the rep's kept settings; the settings
    as stored now, or None when no chat is kept for the rep (:func:`record_chat`)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """
            UPDATE brief_settings AS s SET
                   enabled = coalesce(%(enabled)s, s.enabled),
                   lead_minutes = coalesce(%(lead)s, s.lead_minutes),
                   digest_enabled = coalesce(%(digest_enabled)s, s.digest_enabled),
                   digest_time = coalesce(%(digest_time)s::time, s.digest_time),
                   updated_at = now()
             WHERE tenant_id = %(tenant)s AND aad_object_id = %(aad)s
            RETURNING enabled, lead_minutes, digest_enabled, digest_time, time_zone
            """,
            {
                "tenant": identity.tenant_id,
                "aad": identity.aad_object_id,
                "enabled": change.briefs,
                "lead": change.lead_minutes,
                "digest_enabled": change.digest,
                "digest_time": change.digest_time,
            },
        )
        row = await cur.fetchone()
    return _preferences(row) if row else None


async def subscribers(pool: Pool, *, digest: bool = False) -> list[BriefSubscriber]:
    """Every rep with briefs on (``digest``: with the digest on), oldest choice first."""
    condition = "digest_enabled" if digest else "enabled"
    async with pool.connection() as conn:
        cur = await conn.execute(
            f"""
            SELECT tenant_id, aad_object_id, reference, enabled, lead_minutes, digest_enabled,
                   digest_time, time_zone
              FROM brief_settings
             WHERE {condition} ORDER BY updated_at, tenant_id, aad_object_id
            """
        )
        rows = await cur.fetchall()
    return [
        BriefSubscriber(r["tenant_id"], r["aad_object_id"], dict(r["reference"]), _preferences(r))
        for r in rows
    ]


# --- claims -------------------------------------------------------------------------------------


async def claim(
    pool: Pool, table: ClaimTable, identity: RepIdentity, key: object, *, lease: timedelta = CLAIM_LEASE
) -> datetime | None:
    """Claim one post for one rep: its claim time (the caller's token) for the one caller that may
    post it, else ``None``.

    A fresh claim is an ``INSERT … ON CONFLICT DO NOTHING``. An existing claim is taken over
    only if it never recorded its post and is older than ``lease`` (default :data:`CLAIM_LEASE`; its instance was
    killed mid-post): one ``UPDATE … WHERE stale … RETURNING``, which row-locks and re-checks,
    so of two callers re-claiming at once only one gets the row. A caller that works long
    between claiming and posting confirms the claim first (:func:`confirm_claim`).
    """
    column = sql.Identifier(_CLAIM_KEY[table])
    args = (identity.tenant_id, identity.aad_object_id, key)
    async with pool.connection() as conn:
        cur = await conn.execute(
            sql.SQL(
                "INSERT INTO {table} (tenant_id, aad_object_id, {key}) VALUES (%s, %s, %s) "
                "ON CONFLICT (tenant_id, aad_object_id, {key}) DO NOTHING RETURNING claimed_at"
            ).format(table=sql.Identifier(table), key=column),
            args,
        )
        row = await cur.fetchone()
        if row is not None:
            return _claimed_at(row)
        cur = await conn.execute(
            sql.SQL(
                "UPDATE {table} SET claimed_at = now() "
                "WHERE tenant_id = %s AND aad_object_id = %s AND {key} = %s "
                "AND activity_id IS NULL AND claimed_at < now() - %s RETURNING claimed_at"
            ).format(table=sql.Identifier(table), key=column),
            (*args, lease),
        )
        row = await cur.fetchone()
        return None if row is None else _claimed_at(row)


async def confirm_claim(
    pool: Pool, table: ClaimTable, identity: RepIdentity, key: object, token: datetime
) -> datetime | None:
    """Renew a claim right before its post, if it is still the caller's (``token``: the claim
    time :func:`claim` gave it): the new token, else ``None`` (another instance took it over
    while this one composed the post past the lease; that one posts it)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            sql.SQL(
                "UPDATE {table} SET claimed_at = now() "
                "WHERE tenant_id = %s AND aad_object_id = %s AND {key} = %s "
                "AND activity_id IS NULL AND claimed_at = %s RETURNING claimed_at"
            ).format(table=sql.Identifier(table), key=sql.Identifier(_CLAIM_KEY[table])),
            (identity.tenant_id, identity.aad_object_id, key, token),
        )
        row = await cur.fetchone()
    return None if row is None else _claimed_at(row)


def _claimed_at(row: Any) -> datetime:
    value = row["claimed_at"] if isinstance(row, dict) else row[0]
    assert isinstance(value, datetime)
    return value


async def mark_claim_posted(
    pool: Pool, table: ClaimTable, identity: RepIdentity, key: object, activity_id: str | None
) -> None:
    """Record the message a claimed post went out as (from then on the claim is final)."""
    async with pool.connection() as conn:
        await conn.execute(
            sql.SQL(
                "UPDATE {table} SET activity_id = %s WHERE tenant_id = %s AND aad_object_id = %s AND {key} = %s"
            ).format(table=sql.Identifier(table), key=sql.Identifier(_CLAIM_KEY[table])),
            (activity_id or "", identity.tenant_id, identity.aad_object_id, key),
        )


async def release_claim(
    pool: Pool, table: ClaimTable, identity: RepIdentity, key: object, token: datetime | None = None
) -> None:
    """Give a claim back (its post failed), so the next timer run posts it; with ``token``, only
    if it is still the caller's (never one another instance took over)."""
    async with pool.connection() as conn:
        await conn.execute(
            sql.SQL(
                "DELETE FROM {table} WHERE tenant_id = %s AND aad_object_id = %s AND {key} = %s "
                "AND activity_id IS NULL AND (%s::timestamptz IS NULL OR claimed_at = %s)"
            ).format(table=sql.Identifier(table), key=sql.Identifier(_CLAIM_KEY[table])),
            (identity.tenant_id, identity.aad_object_id, key, token, token),
        )


async def claim_brief(
    pool: Pool, identity: RepIdentity, meeting_id: str, *, lease: timedelta = CLAIM_LEASE
) -> datetime | None:
    """Claim the brief of one meeting for one rep: the claim's token for the one caller that may post it."""
    return await claim(pool, "brief_claims", identity, meeting_id, lease=lease)


async def mark_posted(pool: Pool, identity: RepIdentity, meeting_id: str, activity_id: str | None) -> None:
    """Record the message the brief was posted as."""
    await mark_claim_posted(pool, "brief_claims", identity, meeting_id, activity_id)


async def release_brief(pool: Pool, identity: RepIdentity, meeting_id: str) -> None:
    """Give a claim back (its post failed), so the next timer run posts the brief."""
    await release_claim(pool, "brief_claims", identity, meeting_id)
