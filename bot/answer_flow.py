"""Replying with a turn's result: the answer (AI label, citations, feedback buttons), the approval
cards of its new proposals, and the 👍 / 👎 that come back on an answer."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import assert_never

from botbuilder.core import InvokeResponse, MessageFactory, TurnContext

from bot import cards, conversations, feedback, insight_cards
from bot.ai_entities import (
    FEEDBACK_CHANNEL_DATA,
    answer_style,
    client_platform,
    message_entity,
    number_citations,
)
from bot.audience import BRIEFS_PRIVATE_ONLY, in_group, rep_zone, sender_aad_id, tenant_id
from bot.json_entity import JsonEntity
from bot.progress import TurnProgress
from bot.rep_tokens import SignedInRep
from bot.replies import card_message, send_card
from bot.settings import BotSettings
from bot.sign_in_flow import SignInFlow
from bot.stats_card import stats_card
from copilot.runner import CopilotService
from copilot.turns import Proposal, TurnResult
from copilot.views import BriefView, CatchUpView, DeskCard, DeskView, RiskView, StatsView, view_ids

logger = logging.getLogger(__name__)

Shows = Callable[[TurnContext, SignedInRep], Awaitable[None]]
"""Posts one of the rep's desk cards, for the signed-in rep."""

TURN_DONE = "Done."
"""Closes a progress stream that nothing else closed (a path that posted no answer)."""


def approvals_lead(new_cards: int) -> str:
    """The message that closes a turn's stream when the turn ends in approval cards, not an answer."""
    if new_cards == 0:
        return "Your proposed changes still wait for your decision on their cards above."
    if new_cards == 1:
        return "Here is the change for your approval:"
    return f"Here are the {new_cards} changes for your approval:"


class AnswerFlow:
    """Posts a turn's answer and approval cards, and stores the rep's feedback on an answer."""

    def __init__(self, service: CopilotService, settings: BotSettings, sign_in: SignInFlow):
        self.service = service
        self.settings = settings
        self.sign_in = sign_in
        self.desk_cards: dict[DeskCard, Shows] = {}
        """The rep's desk cards the bot composes from its own records (``bot.desk_flow``,
        ``bot.brief_flow``), by the view a turn's read left; set by ``CopilotBot``."""

    async def send_result(
        self,
        turn_context: TurnContext,
        result: TurnResult,
        progress: TurnProgress | None,
        rep: SignedInRep | None = None,
    ) -> None:
        """The turn's answer, if any, then one approval card for each proposal not yet shown."""
        if progress is not None:
            await progress.stop()  # a held progress update never arrives after the result
        # Cards already in the chat stay where they are (also when the rep asked
        # something while they wait): one live copy per proposal, never a re-post.
        new = [
            proposal
            for proposal in result.proposals
            if await conversations.card_activity(
                self.service.pool, proposal.thread_id or result.thread_id, proposal.tool_call_id
            )
            is None
        ]
        if result.views and rep is not None:
            await self.send_views(turn_context, result, progress, rep)
        elif result.answer:
            await self.send_answer(turn_context, result, progress)
        elif progress is not None and progress.open:
            # No answer to close the stream with: close it before the first card, so no
            # "Working on it…" stays open above the cards (one stream per turn, ended first).
            await progress.end(approvals_lead(len(new)) if result.proposals else TURN_DONE)
        for proposal in new:
            # Each on its own thread's card: one made while others waited resumes its own.
            await self.send_card(turn_context, proposal.thread_id or result.thread_id, proposal)

    async def send_views(
        self, turn_context: TurnContext, result: TurnResult, progress: TurnProgress | None, rep: SignedInRep
    ) -> None:
        """The card of each view the turn's reads left (:mod:`copilot.views`), whichever words
        asked for it: a risk report, a catch-up, a brief, or one of the rep's desk cards.

        A card says what the answer's text would, so the text is posted too only when it cites
        a record no card shows (a model that also read something else); a desk card is the
        answer. A brief or the digest is the rep's own day: in a group chat it is not shown.
        """
        covered: set[str] = set()
        for view in result.views:
            covered |= view_ids(view) or set()
        desk = any(isinstance(view, DeskView) for view in result.views)
        if result.answer and not desk and set(result.citations) - covered:
            await self.send_answer(turn_context, result, progress)
        elif progress is not None and progress.open:
            await progress.end(insight_cards.VIEW_LEAD)  # no stream left open above the cards
        template = self.settings.record_url_template
        for view in result.views:
            match view:
                case RiskView() | CatchUpView():
                    await send_card(turn_context, insight_cards.view_card(view, record_url_template=template))
                case BriefView(brief=brief):
                    if in_group(turn_context.activity):
                        await turn_context.send_activity(BRIEFS_PRIVATE_ONLY)
                        continue
                    card = cards.brief_card(
                        brief,
                        now=self.service.clock(),
                        locale=turn_context.activity.locale,
                        record_url_template=template,
                    )
                    await send_card(turn_context, card)
                case StatsView(stats=stats):
                    await send_card(turn_context, stats_card(stats))
                case DeskView(card=which):
                    if (show := self.desk_cards.get(which)) is not None:
                        await show(turn_context, rep)
                case _:
                    assert_never(view)

    async def send_answer(
        self, turn_context: TurnContext, result: TurnResult, progress: TurnProgress | None
    ) -> None:
        """The answer, labelled as AI-generated, with feedback buttons and its sources.

        Sources as Teams citations (``[n]`` markers, the record on hover) where the client
        shows them, else in a card's Sources list (``bot.ai_entities.answer_style``). The
        message is recorded as this thread's answer, so feedback on it finds the thread.
        """
        assert result.answer is not None
        activity = turn_context.activity
        template = self.settings.record_url_template
        style = answer_style(
            self.settings.answer_sources,
            channel_id=activity.channel_id,
            platform=client_platform(activity.entities),
            dev_mode=self.settings.dev_mode,
            cited=len(result.citations),
        )
        if result.citations and style == "entities":
            numbered = number_citations(result.answer, result.citations, result.sources, template)
            message = MessageFactory.text(numbered.text)
            entity = message_entity(numbered.citations)
        elif result.citations:
            card = cards.answer_card(
                result.answer,
                result.citations,
                record_url_template=template,
                documents={i: (s.name, s.url) for i, s in result.sources.items() if s.kind == "knowledge"},
            )
            message = card_message(card)
            entity = message_entity()
        else:
            # Nothing to cite: the text alone (a card too would show it twice).
            message = MessageFactory.text(result.answer)
            entity = message_entity()
        message.entities = [JsonEntity(entity), *(progress.final_entities() if progress is not None else [])]
        message.channel_data = dict(FEEDBACK_CHANNEL_DATA)
        response = await turn_context.send_activity(message)
        aad = sender_aad_id(activity)
        stream_id = progress.stream_id if progress is not None else None
        message_id = getattr(response, "id", None) or stream_id
        if aad and message_id and activity.conversation is not None:
            # The run id (tracing on) lets the rep's thumbs reach LangSmith as feedback on it.
            await feedback.record_answer(
                self.service.pool,
                conversation_id=activity.conversation.id,
                message_id=message_id,
                also_known_as=[stream_id],
                thread_id=result.thread_id,
                identity=await self.sign_in.identity_of(tenant_id(activity) or "", aad),
                run_id=result.run_id,
            )

    async def send_card(self, turn_context: TurnContext, thread_id: str, proposal: Proposal) -> str | None:
        """Post a proposal's approval card and record where; the new activity's id."""
        card = cards.approval_card(
            proposal,
            thread_id=thread_id,
            locale=turn_context.activity.locale,
            zone=rep_zone(turn_context.activity),
        )
        response = await turn_context.send_activity(card_message(card))
        if response is not None and response.id:
            await conversations.save_card(
                self.service.pool,
                thread_id,
                proposal.tool_call_id,
                turn_context.activity.conversation.id,
                response.id,
            )
            return str(response.id)
        return None

    async def on_feedback(self, turn_context: TurnContext) -> InvokeResponse:
        """``message/submitAction`` (👍 / 👎 and a comment): stored with the answer it is about.

        Answered with 200 and an empty body, as Teams requires; a payload that is not
        feedback gets 400 with the reason, and nothing is stored. Feedback needs no sign-in
        and reads nothing of the CRM: it is the Teams user's own opinion of a message.
        """
        activity = turn_context.activity

        def refused(message: str) -> InvokeResponse:
            return InvokeResponse(
                status=HTTPStatus.BAD_REQUEST, body={"error": "invalid_feedback", "message": message}
            )

        value = activity.value if isinstance(activity.value, dict) else None
        if value is not None and value.get("actionName") not in (None, feedback.FEEDBACK_ACTION):
            return refused(f"Only feedback is handled here, not {str(value.get('actionName'))[:40]!r}.")
        try:
            given = feedback.parse_feedback(value)
        except feedback.InvalidFeedback as exc:
            return refused(exc.message)
        aad = sender_aad_id(activity)
        if not aad or activity.conversation is None:
            return refused("Feedback is taken only from a signed-in Microsoft 365 user in a conversation.")
        stored = await feedback.record_feedback(
            self.service.pool,
            conversation_id=activity.conversation.id,
            activity_id=activity.reply_to_id,
            rater=await self.sign_in.identity_of(tenant_id(activity) or "", aad),
            feedback=given,
        )
        logger.info("feedback %s (%s) on answer %s", stored.id, stored.rating, stored.activity_id)
        if stored.run_id is not None:
            # Also LangSmith feedback on the answer's run (sent off the turn; False when off).
            await self.service.tracing.record_feedback(stored.run_id, stored.rating, stored.comment)
        return InvokeResponse(status=HTTPStatus.OK, body={})
