"""The brief timer's work: each opted-in rep's new meeting prep briefs, posted once to their 1:1 chat.

For every rep with briefs on (``bot.brief_store``): their stored token (``RepTokens``; none →
nothing is read for them), their working hours (``copilot.briefs.mailbox_settings``: nothing on
a day off or in quiet hours; a held brief goes out when working hours start if its meeting has
not started, since the window then still holds it), ``copilot.briefs.service.briefs_at`` read
with that token and the rep's own lead time (else the admin's), and each brief posted
proactively as :func:`bot.cards.brief_card` through the stored conversation reference of the
rep's 1:1 chat. A group chat or channel never gets a brief. Each brief is claimed before it is
posted (one per meeting per rep across instances and retries); a post that fails gives its claim
back, so the next run posts it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, assert_never

from botbuilder.core import CardFactory, MessageFactory, TurnContext
from botbuilder.schema import ConversationReference

from bot import brief_store, cards
from bot.audience import GROUP_CONVERSATION_TYPES
from bot.proactive_reps import proactive_rep
from copilot.briefs.mailbox_settings import rep_schedule
from copilot.briefs.schedule import brief_verdict
from copilot.briefs.service import briefs_at
from copilot.errors import ProactivePostFailed

if TYPE_CHECKING:
    from bot.runtime import BotRuntime

logger = logging.getLogger(__name__)


@dataclass
class DeliveryReport:
    """What one timer run did."""

    reps: int = 0
    posted: list[tuple[str, str]] = field(default_factory=list)
    """(rep's AAD object id, meeting id) of each brief this run posted."""
    already_posted: int = 0
    not_signed_in: int = 0
    group_chats: int = 0
    quiet_hours: int = 0
    """Reps in their quiet hours (outside working hours on a working day): briefs held."""
    day_off: int = 0
    """Reps on a day that is not one of their working days: nothing posted."""
    failed: int = 0
    """Briefs whose post did not reach the chat: claim given back, the next run posts them."""


def is_group(reference: dict[str, object]) -> bool:
    """Whether a stored conversation reference is a group chat or a channel (never briefed)."""
    conversation = reference.get("conversation")
    kind = conversation.get("conversationType") if isinstance(conversation, dict) else None
    return kind in GROUP_CONVERSATION_TYPES


async def deliver_briefs(
    runtime: BotRuntime, *, at: datetime, lead_minutes: int | None = None
) -> DeliveryReport:
    """Post every opted-in rep's briefs of meetings starting in ``[at, at + lead)``, once, to
    reps in their working hours (``lead_minutes`` unset: the rep's own lead time, else the
    admin's ``COPILOT_BRIEF_LEAD_MINUTES``)."""
    pool = runtime.service.pool
    lease = timedelta(seconds=runtime.bot_settings.proactive_claim_lease_seconds)
    report = DeliveryReport()
    for sub in await brief_store.subscribers(pool):
        report.reps += 1
        if is_group(sub.reference):
            report.group_chats += 1
            continue
        rep = await proactive_rep(runtime, sub.tenant_id, sub.aad_object_id, sub.reference, on=at.date())
        if rep is None:
            report.not_signed_in += 1
            continue
        prefs = sub.preferences
        schedule = await rep_schedule(runtime.settings, rep.broker, prefs.time_zone)
        match brief_verdict(at, schedule):
            case "post":
                pass
            case "quiet_hours":
                report.quiet_hours += 1
                continue
            case "day_off":
                report.day_off += 1
                continue
            case verdict:
                assert_never(verdict)
        lead = lead_minutes or prefs.lead_minutes or runtime.bot_settings.brief_lead_minutes
        async with pool.connection() as conn:
            run = await briefs_at(
                runtime.settings, rep.identity, rep.broker, conn, at=at, lead_minutes=lead, zone=schedule.tz
            )
        reference = ConversationReference().deserialize(sub.reference)
        for brief in run.briefs:
            if not await brief_store.claim_brief(pool, rep.identity, brief.meeting_id, lease=lease):
                report.already_posted += 1
                continue
            card = cards.brief_card(
                brief, now=at, record_url_template=runtime.bot_settings.record_url_template
            )
            try:
                activity_id = await post_card(runtime, reference, card)
            except ProactivePostFailed as failure:
                # The connector refused it (throttled, down): the next run posts it; other reps'
                # briefs still go out now.
                await brief_store.release_brief(pool, rep.identity, brief.meeting_id)
                report.failed += 1
                logger.warning("brief of meeting %s not posted: %s", brief.meeting_id, failure)
                continue
            except BaseException:
                # Not posted: the next run may post it (the claim is given back).
                await brief_store.release_brief(pool, rep.identity, brief.meeting_id)
                raise
            await brief_store.mark_posted(pool, rep.identity, brief.meeting_id, activity_id)
            report.posted.append((sub.aad_object_id, brief.meeting_id))
    logger.info(
        "briefs: %d reps, %d posted, %d already posted, %d not signed in, %d group chats, "
        "%d in quiet hours, %d on a day off, %d failed (to be retried)",
        report.reps,
        len(report.posted),
        report.already_posted,
        report.not_signed_in,
        report.group_chats,
        report.quiet_hours,
        report.day_off,
        report.failed,
    )
    return report


async def post_card(runtime: BotRuntime, reference: ConversationReference, card: cards.Card) -> str | None:
    """Post ``card`` proactively through a stored conversation reference (the Bot Connector path
    the queue worker's replies take); returns the posted message's id (if the connector gave one).

    Raises :class:`ProactivePostFailed` when the send did not complete: the adapter hands an error
    raised inside its callback (the connector's 429 or 5xx) to the turn-error handler and returns
    normally, so only the callback's own record tells a post from a failure."""
    sent: list[str | None] = []

    async def send(turn_context: TurnContext) -> None:
        response = await turn_context.send_activity(
            MessageFactory.attachment(CardFactory.adaptive_card(card))
        )
        sent.append(response.id if response else None)

    await runtime.adapter.continue_conversation(
        reference, send, runtime.bot_settings.microsoft_app_id or None
    )
    if not sent:
        raise ProactivePostFailed("the Bot Connector did not accept the proactive message")
    return sent[0]
