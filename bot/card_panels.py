"""An approval card's copies: its Edit… / Reject… / Back panels, a "my approvals" row's Open, and
updating a card the bot posted, here or in another of the rep's chats."""

from __future__ import annotations

import logging
from typing import Any, get_args

from botbuilder.core import TurnContext
from botbuilder.schema import ConversationAccount
from botframework.connector.models import ErrorResponseException

from bot import cards, conversations
from bot.answer_flow import AnswerFlow
from bot.audience import rep_zone
from bot.rep_tokens import SignedInRep
from bot.replies import Card, card_message
from bot.sign_in_flow import SignInFlow
from copilot.errors import ThreadAccessDenied, ThreadNotFound
from copilot.runner import CopilotService
from copilot.turns import Proposal

logger = logging.getLogger(__name__)

NOT_YOURS = (
    "This card belongs to another conversation or another person, so I can't act on it. Nothing was changed."
)
ALREADY_DECIDED = "That proposal was already decided, so nothing was changed."


async def replace_card(
    turn_context: TurnContext, conversation_id: str | None, activity_id: str, card: Card
) -> None:
    """Update a card the bot posted, in this conversation or (``conversation_id``) another one."""
    update = card_message(card)
    update.id = activity_id
    here = turn_context.activity.conversation.id if turn_context.activity.conversation else None
    if conversation_id is None or conversation_id == here:
        await turn_context.update_activity(update)
        return
    # TurnContext.update_activity addresses its own conversation; the adapter takes
    # the activity's (the same Bot Connector service, another chat of this rep's).
    update.conversation = ConversationAccount(id=conversation_id)
    update.service_url = turn_context.activity.service_url
    try:
        await turn_context.adapter.update_activity(turn_context, update)
    except ErrorResponseException as exc:
        # The chat is gone or the bot was removed from it: nothing left to click there.
        logger.warning("could not update card %s in another conversation: %s", activity_id, exc)


class CardPanels:
    """Answers the buttons that show an approval card again, without deciding it."""

    def __init__(self, service: CopilotService, sign_in: SignInFlow, answers: AnswerFlow):
        self.service = service
        self.sign_in = sign_in
        self.answers = answers

    async def on_view(self, turn_context: TurnContext, value: dict[str, Any]) -> None:
        """Edit…, Reject… or Back on an approval card: the card, updated in place, with that
        panel open (kept by the bot, so a client's re-layout never collapses it)."""
        rep = await self.sign_in.rep(turn_context)
        if rep is None:
            return
        thread_id, tool_call_id = str(value.get("thread_id") or ""), str(value.get("tool_call_id") or "")
        views: dict[str, cards.CardView] = {v: v for v in get_args(cards.CardView)}
        view = views.get(str(value.get("view")))
        copy = await conversations.card_copy(self.service.pool, thread_id, tool_call_id)
        if copy is None or view is None:
            await turn_context.send_activity(NOT_YOURS)
            return
        proposal = await self.still_pending(turn_context, rep, thread_id, tool_call_id)
        if proposal is None:
            return
        card = cards.approval_card(
            proposal,
            thread_id=thread_id,
            locale=turn_context.activity.locale,
            view=view,
            zone=rep_zone(turn_context.activity),
        )
        clicked = turn_context.activity.reply_to_id
        await replace_card(
            turn_context, None if clicked else copy.conversation_id, clicked or copy.activity_id, card
        )

    async def on_open(self, turn_context: TurnContext, value: dict[str, Any]) -> None:
        """A "my approvals" row's Open: post that proposal's approval card again, here, and
        take the buttons off its previous copy (one live copy per proposal)."""
        rep = await self.sign_in.rep(turn_context)
        if rep is None:
            return
        thread_id, tool_call_id = str(value.get("thread_id") or ""), str(value.get("tool_call_id") or "")
        # Whose it is (the owner, or an approval delegate) is the runner's check, below.
        previous = await conversations.card_copy(self.service.pool, thread_id, tool_call_id)
        if previous is None:
            await turn_context.send_activity(NOT_YOURS)
            return
        proposal = await self.still_pending(turn_context, rep, thread_id, tool_call_id)
        if proposal is None:
            return
        posted = await self.answers.send_card(turn_context, thread_id, proposal)
        if posted is not None and posted != previous.activity_id:
            await replace_card(
                turn_context, previous.conversation_id, previous.activity_id, cards.moved_card(proposal)
            )

    async def still_pending(
        self, turn_context: TurnContext, rep: SignedInRep, thread_id: str, tool_call_id: str
    ) -> Proposal | None:
        """The proposal if it still waits in the rep's own thread; else the rep is told why not."""
        try:
            pending = (await self.service.pending(rep.identity, thread_id)).proposals
        except (ThreadAccessDenied, ThreadNotFound):
            await turn_context.send_activity(NOT_YOURS)
            return None
        proposal = next((p for p in pending if p.tool_call_id == tool_call_id), None)
        if proposal is None:
            await turn_context.send_activity(ALREADY_DECIDED)
        return proposal
