"""The brief timer's work: each opted-in rep's new meeting prep briefs, posted once to their 1:1 chat.

For every rep with briefs on (``bot.brief_store``): their stored token (``RepTokens``; none →
nothing is read for them), ``copilot.briefs.service.briefs_at`` read with that token, and each
brief posted proactively as :func:`bot.cards.brief_card` through the stored conversation
reference of the rep's 1:1 chat. A group chat or channel never gets a brief. Each brief is
claimed before it is posted (one per meeting per rep across instances and retries); a post that
fails gives its claim back, so the next run posts it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from botbuilder.core import CardFactory, MessageFactory, TurnContext
from botbuilder.schema import ConversationReference

from bot import brief_store, cards
from bot.handler import GROUP_CONVERSATION_TYPES
from bot.proactive_reps import proactive_rep
from copilot.briefs.service import briefs_at
from copilot.identity import RepIdentity

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


def is_group(reference: dict[str, object]) -> bool:
    """Whether a stored conversation reference is a group chat or a channel (never briefed)."""
    conversation = reference.get("conversation")
    kind = conversation.get("conversationType") if isinstance(conversation, dict) else None
    return kind in GROUP_CONVERSATION_TYPES


async def deliver_briefs(
    runtime: BotRuntime, *, at: datetime, lead_minutes: int | None = None
) -> DeliveryReport:
    """Post every opted-in rep's briefs of meetings starting in ``[at, at + lead_minutes)``, once
    (``lead_minutes`` unset: the admin's ``COPILOT_BRIEF_LEAD_MINUTES``)."""
    pool = runtime.service.pool
    lead = runtime.bot_settings.brief_lead_minutes if lead_minutes is None else lead_minutes
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
        async with pool.connection() as conn:
            run = await briefs_at(runtime.settings, rep.identity, rep.broker, conn, at=at, lead_minutes=lead)
        reference = ConversationReference().deserialize(sub.reference)
        for brief in run.briefs:
            if not await brief_store.claim_brief(pool, rep.identity, brief.meeting_id):
                report.already_posted += 1
                continue
            card = cards.brief_card(brief, record_url_template=runtime.bot_settings.record_url_template)
            await _post(runtime, rep.identity, reference, brief.meeting_id, card)
            report.posted.append((sub.aad_object_id, brief.meeting_id))
    logger.info(
        "briefs: %d reps, %d posted, %d already posted, %d not signed in, %d group chats",
        report.reps,
        len(report.posted),
        report.already_posted,
        report.not_signed_in,
        report.group_chats,
    )
    return report


async def _post(
    runtime: BotRuntime,
    identity: RepIdentity,
    reference: ConversationReference,
    meeting_id: str,
    card: cards.Card,
) -> None:
    pool = runtime.service.pool
    sent: list[str | None] = []

    async def send(turn_context: TurnContext) -> None:
        response = await turn_context.send_activity(
            MessageFactory.attachment(CardFactory.adaptive_card(card))
        )
        sent.append(response.id if response else None)

    try:
        await runtime.adapter.continue_conversation(
            reference, send, runtime.bot_settings.microsoft_app_id or None
        )
    except BaseException:
        # Not posted: the next run may post it (the claim is given back).
        await brief_store.release_brief(pool, identity, meeting_id)
        raise
    await brief_store.mark_posted(pool, identity, meeting_id, sent[0] if sent else None)
