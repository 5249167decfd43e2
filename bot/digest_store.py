"""The daily digest, stored: its once-per-day claims and the rep's "Not useful" / "Snooze".

Claims live in ``digest_claims`` (tenant, rep, the rep's local day) and go through
:func:`bot.brief_store.claim` like the briefs' (insert, or take over a stale claim after the
lease). Feedback lives in ``digest_feedback``: "Not useful" once per digest, "Snooze" once per
record per digest, each with the day it was said on; a snoozed record is left out of the rep's
digests of the days before its ``snoozed_until`` (:data:`SNOOZE_DAYS` later).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, timedelta

from bot import brief_store
from bot.brief_store import Pool
from bot.cards.digest import DigestFeedbackKind
from copilot.identity import RepIdentity

SNOOZE_DAYS = 7


async def claim_digest(
    pool: Pool, identity: RepIdentity, day: date, *, lease: timedelta = brief_store.CLAIM_LEASE
) -> datetime | None:
    """Claim the digest of the rep's ``day``: the claim's token for the one caller that may post it."""
    return await brief_store.claim(pool, "digest_claims", identity, day, lease=lease)


async def confirm_digest(pool: Pool, identity: RepIdentity, day: date, token: datetime) -> datetime | None:
    """Renew the day's claim before posting, if it is still the caller's (else ``None``)."""
    return await brief_store.confirm_claim(pool, "digest_claims", identity, day, token)


async def mark_digest_posted(pool: Pool, identity: RepIdentity, day: date, activity_id: str | None) -> None:
    """Record the message the day's digest was posted as."""
    await brief_store.mark_claim_posted(pool, "digest_claims", identity, day, activity_id)


async def release_digest(pool: Pool, identity: RepIdentity, day: date, token: datetime | None = None) -> None:
    """Give the day's claim back (the post failed), so the next run posts it (with ``token``:
    only if it is still the caller's)."""
    await brief_store.release_claim(pool, "digest_claims", identity, day, token)


async def record_feedback(
    pool: Pool,
    identity: RepIdentity,
    day: date,
    kind: DigestFeedbackKind,
    records: Sequence[str] = (),
) -> date | None:
    """Store "Not useful" on the day's digest, or "Snooze" of ``records``; a repeat is kept once.

    Returns the day snoozed records come back (None for "Not useful").
    """
    until = day + timedelta(days=SNOOZE_DAYS) if kind == "snooze" else None
    rows = [(r, until) for r in dict.fromkeys(records)] if kind == "snooze" else [("", None)]
    async with pool.connection() as conn:
        for record_id, snoozed_until in rows:
            await conn.execute(
                """
                INSERT INTO digest_feedback (tenant_id, aad_object_id, day, kind, record_id, snoozed_until)
                VALUES (%s, %s, %s, %s, %s, %s)
                ON CONFLICT (tenant_id, aad_object_id, day, kind, record_id) DO NOTHING
                """,
                (identity.tenant_id, identity.aad_object_id, day, kind, record_id, snoozed_until),
            )
    return until


async def snoozed(pool: Pool, identity: RepIdentity, day: date) -> frozenset[str]:
    """The records the rep snoozed that stay out of the digest of ``day``."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """
            SELECT DISTINCT record_id FROM digest_feedback
             WHERE tenant_id = %s AND aad_object_id = %s AND kind = 'snooze'
               AND day <= %s AND snoozed_until > %s
            """,
            (identity.tenant_id, identity.aad_object_id, day, day),
        )
        return frozenset(str(r["record_id"]) for r in await cur.fetchall())
