"""The follow-through timer's work: after each opted-in rep's customer meeting ends, one "How did it
go?" card in their 1:1 chat (:func:`bot.insight_cards.follow_through_card`).

The same reps, tokens, working hours and claims as briefs (:mod:`bot.brief_delivery`): reps with
briefs on, read with their own stored token; nothing in quiet hours or on a day off (a meeting
that ended then is not followed up later than its window); one card per meeting per rep across
instances and retries (a claim under ``after:<meeting id>`` in the brief claims), a post that
fails gives its claim back. A group chat gets nothing, and a meeting whose external attendees are
no CRM contact the rep may see (a hidden account's) gets no card.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, assert_never

from botbuilder.schema import ConversationReference

from bot import brief_store, insight_cards
from bot.brief_delivery import is_group, post_card
from bot.proactive_reps import proactive_rep
from copilot.briefs.mailbox_settings import rep_schedule
from copilot.briefs.schedule import brief_verdict
from copilot.errors import ProactivePostFailed
from copilot.followthrough import follow_throughs_at
from copilot.models.factory import build_model
from copilot.settings import is_offline_model

if TYPE_CHECKING:
    from bot.runtime import BotRuntime

logger = logging.getLogger(__name__)
CLAIM_PREFIX = "after:"


@dataclass
class FollowThroughReport:
    """What one timer run did."""

    reps: int = 0
    posted: list[tuple[str, str]] = field(default_factory=list)
    """(rep's AAD object id, meeting id) of each card this run posted."""
    already_posted: int = 0
    not_signed_in: int = 0
    held: int = 0
    """Reps in quiet hours or on a day off: nothing posted."""
    failed: int = 0


async def deliver_follow_throughs(runtime: BotRuntime, *, at: datetime) -> FollowThroughReport:
    """Post each opted-in rep's follow-through card of every customer meeting that ended in the
    last hour, once."""
    pool = runtime.service.pool
    lease = timedelta(seconds=runtime.bot_settings.proactive_claim_lease_seconds)
    report = FollowThroughReport()
    for sub in await brief_store.subscribers(pool):
        report.reps += 1
        if is_group(sub.reference):
            continue
        rep = await proactive_rep(runtime, sub.tenant_id, sub.aad_object_id, sub.reference, on=at.date())
        if rep is None:
            report.not_signed_in += 1
            continue
        schedule = await rep_schedule(runtime.settings, rep.broker, sub.preferences.time_zone)
        match brief_verdict(at, schedule):
            case "post":
                pass
            case "quiet_hours" | "day_off":
                report.held += 1
                continue
            case verdict:
                assert_never(verdict)
        async with pool.connection() as conn:
            model = runtime.settings.copilot_model
            found = await follow_throughs_at(
                runtime.settings,
                rep.identity,
                rep.broker,
                conn,
                at=at,
                model=None if is_offline_model(model) else build_model(model),
            )
        reference = ConversationReference().deserialize(sub.reference)
        for follow in found:
            claim = CLAIM_PREFIX + follow.meeting_id
            if not await brief_store.claim_brief(pool, rep.identity, claim, lease=lease):
                report.already_posted += 1
                continue
            card = insight_cards.follow_through_card(
                follow, record_url_template=runtime.bot_settings.record_url_template
            )
            try:
                activity_id = await post_card(runtime, reference, card)
            except ProactivePostFailed as failure:
                await brief_store.release_brief(pool, rep.identity, claim)
                report.failed += 1
                logger.warning("follow-through of meeting %s not posted: %s", follow.meeting_id, failure)
                continue
            except BaseException:
                await brief_store.release_brief(pool, rep.identity, claim)
                raise
            await brief_store.mark_posted(pool, rep.identity, claim, activity_id)
            report.posted.append((sub.aad_object_id, follow.meeting_id))
    logger.info(
        "follow-throughs: %d reps, %d posted, %d already posted, %d not signed in, %d held, %d failed",
        report.reps,
        len(report.posted),
        report.already_posted,
        report.not_signed_in,
        report.held,
        report.failed,
    )
    return report
