"""A rep's daily digest, composed for Teams: their schedule, their snoozes, ``digest_at`` as them.

Shared by the digest timer (``bot.digest_delivery``) and ``digest me`` (``bot.handler``).
"""

from __future__ import annotations

from datetime import datetime

from bot import digest_store
from bot.brief_store import Pool
from bot.rep_tokens import SignedInRep
from copilot.briefs.digest import WaitingProposals, digest_at
from copilot.briefs.schedule import RepSchedule, local_day
from copilot.briefs.types import Digest
from copilot.settings import Settings


async def rep_digest(
    settings: Settings,
    pool: Pool,
    proposals: WaitingProposals,
    rep: SignedInRep,
    schedule: RepSchedule,
    *,
    at: datetime,
) -> Digest:
    """The rep's digest of their day containing ``at`` (in their zone), snoozed records left out."""
    leave_out = await digest_store.snoozed(pool, rep.identity, local_day(at, schedule))
    async with pool.connection() as conn:
        return await digest_at(
            settings, rep.identity, rep.broker, conn, proposals, at=at, zone=schedule.tz, leave_out=leave_out
        )
