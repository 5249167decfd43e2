"""The Teams bot: questions go to the runner, proposals come back as one card each.

``CopilotBot`` keeps the activity entry points and the routing; each feature answers in a
module of its own, with the shared service, rep tokens and settings passed in:

* a card submit goes by its ``value["copilot"]`` kind through one table (``CopilotBot.submits``)
  to the feature that answers it: ``bot.decision_flow`` (decide, outcome card),
  ``bot.card_panels`` (Edit… / Reject… / Back, Open), ``bot.brief_flow`` (digest feedback,
  "Not now"), ``bot.desk_flow`` (a delegation's Revoke); Undo and command buttons become
  typed questions;
* a typed question: help and reset, else an agent turn whose result ``bot.answer_flow`` posts.
  Everything else a rep does is said to the agent in their own words: a read of their desk
  (waiting approvals, stats, delegations, a brief, the digest, deals at risk, what changed) is
  answered with its card (the view the tool left, ``copilot.views``), and a change (briefs or
  the digest turned on or moved, a delegation) is proposed on an approval card like every
  change (the bot keeps each rep's 1:1 chat as where posts go, ``bot.posting_settings``);
* invokes: Teams SSO's token exchange (``bot.sign_in_flow``) and feedback on an answer
  (``bot.answer_flow``).

Decisions arrive as ``Action.Submit`` (works on Teams mobile). The bot checks the
submission against the proposal that is actually pending, resumes the run, and
updates the same card in place to its outcome.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from botbuilder.core import InvokeResponse, TurnContext
from botbuilder.core.teams import TeamsActivityHandler
from botbuilder.schema import ActivityTypes, ChannelAccount, SignInConstants

from bot import brief_store, cards, conversations, feedback
from bot.ai_entities import client_time_zone
from bot.answer_flow import TURN_DONE, AnswerFlow
from bot.audience import BRIEFS_PRIVATE_ONLY, PRIVATE_ONLY, answers_here, in_group
from bot.brief_flow import SUGGESTION_DECLINED, BriefFlow
from bot.card_panels import CardPanels
from bot.card_submit import undo_audit_id
from bot.decision_flow import DecisionFlow
from bot.desk_flow import DeskFlow
from bot.posting_settings import BotPostingSettings
from bot.progress import Clock, Sleep, TurnProgress
from bot.rep_tokens import RepTokens, SignedInRep
from bot.replies import send_card
from bot.settings import BotSettings
from bot.sign_in_flow import SignInFlow
from copilot.runner import CopilotService

__all__ = [
    "BRIEFS_PRIVATE_ONLY",
    "PRIVATE_ONLY",
    "SUGGESTION_DECLINED",
    "CopilotBot",
    "on_turn_error",
]
"""The bot and, re-exported from where the tests have always imported them, replies its features send."""

logger = logging.getLogger(__name__)

Submit = Callable[[TurnContext, dict[str, Any]], Awaitable[None]]
"""Answers one kind of card submit (its ``value``)."""


class CopilotBot(TeamsActivityHandler):
    """Routes Teams activities to the feature that answers them, and questions to the runner."""

    def __init__(self, service: CopilotService, reps: RepTokens, settings: BotSettings):
        super().__init__()
        self.service = service
        self.settings = settings
        # Progress streams' time (tests pin it to show a long turn without waiting for it).
        self.progress_clock: Clock = time.monotonic
        self.progress_sleep: Sleep = asyncio.sleep
        # The rep's brief and digest settings are the bot's to keep (with the chat they go to):
        # the copilot's settings tool reaches them through this port.
        service.posting = BotPostingSettings(service.pool, settings.brief_lead_minutes)
        self.sign_in = SignInFlow(service, reps, settings)
        self.answers = AnswerFlow(service, settings, self.sign_in)
        self.panels = CardPanels(service, self.sign_in, self.answers)
        self.decisions = DecisionFlow(service, settings, self.sign_in, self.answers, self._progress)
        self.briefs = BriefFlow(service, settings, self.sign_in)
        self.desk = DeskFlow(service, settings, self.sign_in)
        self.submits = self._submits()
        # A turn whose read was the rep's desk is answered with the desk's card.
        self.answers.desk_cards = {
            "approvals": self.desk.show_approvals,
            "delegations": self.desk.show_delegations,
            "digest": self.briefs.digest_me,
        }

    @property
    def reps(self) -> RepTokens:
        """How reps are signed in: the sign-in flow's, so replacing it (as the SSO tests do)
        reaches every feature."""
        return self.sign_in.reps

    @reps.setter
    def reps(self, reps: RepTokens) -> None:
        self.sign_in.reps = reps

    def _progress(self, turn_context: TurnContext) -> TurnProgress:
        """The turn's one progress stream (the same one for every caller in the turn)."""
        return TurnProgress.for_turn(turn_context, clock=self.progress_clock, sleep=self.progress_sleep)

    def _submits(self) -> dict[str, Submit]:
        """The dispatch table: a card submit's ``value["copilot"]`` kind → what answers it.

        A kind not here (or no kind) is read as a typed message.
        """
        return {
            cards.SUBMIT_KIND: self.decisions.on_submit,
            cards.VIEW_KIND: self.panels.on_view,
            cards.OPEN_KIND: self.panels.on_open,
            cards.DIGEST_FEEDBACK_KIND: self.briefs.on_digest_feedback,
            cards.REVOKE_DELEGATION_KIND: self.desk.on_revoke_delegation,
            cards.DECLINE_SUGGESTION_KIND: self.briefs.on_not_now,
            cards.UNDO_KIND: self._on_undo,
            cards.COMMAND_KIND: self._on_command,
        }

    # --- Teams events -------------------------------------------------------------------------

    async def on_members_added_activity(
        self, members_added: list[ChannelAccount], turn_context: TurnContext
    ) -> None:
        """The welcome card, when the bot itself is added to a conversation."""
        bot_id = turn_context.activity.recipient.id if turn_context.activity.recipient else None
        if any(member.id == bot_id for member in members_added):
            await send_card(turn_context, cards.welcome_card())

    async def on_message_activity(self, turn_context: TurnContext) -> None:
        """A message (typed, or a card's submit); its turn leaves its progress stream closed.

        On an error the stream is left for ``on_turn_error``, whose message closes it.
        """
        try:
            await self._on_message(turn_context)
        except BaseException:
            if (progress := TurnProgress.of(turn_context)) is not None:
                progress.close()
            raise
        progress = TurnProgress.of(turn_context)
        if progress is not None and progress.open:
            # A path that sent no final message of its own: do not leave "Working on it…" open.
            await progress.end(TURN_DONE)
        elif progress is not None:
            await progress.stop()

    async def _on_message(self, turn_context: TurnContext) -> None:
        value = turn_context.activity.value
        kind = value.get("copilot") if isinstance(value, dict) else None
        if isinstance(kind, str) and (submit := self.submits.get(kind)) is not None:
            await submit(turn_context, value)
            return
        text = TurnContext.remove_recipient_mention(turn_context.activity) or ""
        await self._on_question(turn_context, text.strip())

    async def on_invoke_activity(self, turn_context: TurnContext) -> InvokeResponse:
        """Teams SSO's token exchange and feedback on an answer; the rest as botbuilder does."""
        if turn_context.activity.name == SignInConstants.token_exchange_operation_name:
            return await self.sign_in.token_exchange(turn_context, self._on_question)
        if turn_context.activity.name == feedback.FEEDBACK_INVOKE:
            return await self.answers.on_feedback(turn_context)
        return await super().on_invoke_activity(turn_context)

    async def _on_undo(self, turn_context: TurnContext, value: dict[str, Any]) -> None:
        # An approved card's Undo button: a turn that proposes the undo (its approval
        # card follows); who may undo is checked by the undo itself, not by the card.
        audit_id = undo_audit_id(value)
        text = cards.undo_request(audit_id) if audit_id is not None else ""
        await self._on_question(turn_context, text.strip())

    async def _on_command(self, turn_context: TurnContext, value: dict[str, Any]) -> None:
        # A command button (welcome or help card): the same as typing its text.
        await self._on_question(turn_context, str(value.get("text", "")).strip())

    # --- questions ------------------------------------------------------------------------------

    async def _on_question(
        self, turn_context: TurnContext, text: str, *, activity_id: str | None = None
    ) -> None:
        """Answer ``text`` (``activity_id``: the message it came in, if not this activity)."""
        if not text:
            # Only spaces, or only an attachment: say what to ask rather than nothing.
            await turn_context.send_activity(cards.EMPTY_MESSAGE_REPLY)
            return
        if text.lower() in cards.HELP_COMMANDS:
            await send_card(turn_context, cards.help_card())
            return
        if not answers_here(turn_context.activity, self.settings):
            # Before any sign-in or CRM call: nothing of the CRM is shown to the group.
            await turn_context.send_activity(PRIVATE_ONLY)
            return
        rep = await self.sign_in.rep(turn_context, keeping=text)
        if rep is None:
            return
        zone = client_time_zone(turn_context.activity.entities, turn_context.activity.local_timezone)
        if not in_group(turn_context.activity):
            # The rep's 1:1 chat is where their briefs and digest go, kept before any change to
            # them is asked for (and approved, maybe on a later turn); with the zone Teams
            # reports, for the timers. Each written only if it changed.
            reference = TurnContext.get_conversation_reference(turn_context.activity).serialize()
            await brief_store.record_chat(self.service.pool, rep.identity, reference, zone)
        elif zone is not None:
            await brief_store.record_time_zone(
                self.service.pool, rep.identity.tenant_id, rep.identity.aad_object_id, zone
            )
        conversation_id = turn_context.activity.conversation.id
        if text.lower() in cards.RESET_COMMANDS:
            await conversations.forget(self.service.pool, conversation_id, rep.identity)
            await turn_context.send_activity("Starting a new conversation.")
            return
        await self._run_turn(turn_context, rep, text, activity_id)

    async def _run_turn(
        self, turn_context: TurnContext, rep: SignedInRep, text: str, activity_id: str | None
    ) -> None:
        """The agent's turn on the conversation's thread, its progress streamed, its result posted."""
        conversation_id = turn_context.activity.conversation.id
        thread_id = await conversations.thread_for(self.service.pool, conversation_id, rep.identity)
        progress = self._progress(turn_context)
        await progress.start()
        # Named by its activity: a queue redelivery of a message already taken (the worker
        # died before acknowledging it) is not asked a second time.
        activity_id = activity_id or turn_context.activity.id
        result = await self.service.run_turn(
            rep.identity,
            rep.broker,
            thread_id,
            text,
            progress.update,
            message_id=f"teams-activity:{activity_id}" if activity_id else None,
            # A Teams chat lasts months: the runner moves it to a new thread when due
            # (copilot/rotation.py), and result.thread_id is the one remembered below.
            rotate=True,
        )
        reference = TurnContext.get_conversation_reference(turn_context.activity).serialize()
        await conversations.remember(
            self.service.pool, conversation_id, rep.identity, result.thread_id, reference
        )
        await self.answers.send_result(turn_context, result, progress, rep)


async def on_turn_error(turn_context: TurnContext, error: Exception) -> None:
    """Last resort: log with a correlation id and tell the rep briefly (never a stack trace)."""
    correlation = uuid.uuid4().hex[:8]
    logger.exception("turn failed (ref %s): %s", correlation, error, exc_info=error)
    if turn_context.activity.type == ActivityTypes.message:
        # Not "nothing was changed": an approved write may have committed before a later
        # step failed; its card and the audit log say what happened.
        message = (
            f"Sorry, something went wrong on my side (ref {correlation}). Anything you approved "
            "shows its outcome on its card; please ask again."
        )
        progress = TurnProgress.of(turn_context)
        if progress is not None:
            await progress.end(message)  # closes the turn's stream, if one is open
        else:
            await turn_context.send_activity(message)
