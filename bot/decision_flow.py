"""A decision on an approval card: checked against the proposal actually pending, decided once,
and the card updated in place to its outcome (every live copy of it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from botbuilder.core import TurnContext

from bot import cards, conversations
from bot.answer_flow import AnswerFlow
from bot.audience import PRIVATE_ONLY, answers_here, rep_zone
from bot.card_panels import ALREADY_DECIDED, NOT_YOURS, replace_card
from bot.card_submit import CardSubmission, InvalidSubmission, parse_submission, to_decision
from bot.progress import TurnProgress
from bot.rep_tokens import SignedInRep
from bot.replies import card_message
from bot.settings import BotSettings
from bot.sign_in_flow import SignInFlow
from copilot.errors import InvalidDecision, ProposalNotPending, ThreadAccessDenied, ThreadNotFound
from copilot.runner import CopilotService
from copilot.turns import Proposal, TurnResult
from copilot.writes.undo import undoable

ProgressFor = Callable[[TurnContext], TurnProgress]
"""The turn's one progress stream (the bot's, whose clock tests may pin)."""


class DecisionFlow:
    """Answers an approval card's Approve / Reject / Save: one ``decide`` call per submission."""

    def __init__(
        self,
        service: CopilotService,
        settings: BotSettings,
        sign_in: SignInFlow,
        answers: AnswerFlow,
        progress: ProgressFor,
    ):
        self.service = service
        self.settings = settings
        self.sign_in = sign_in
        self.answers = answers
        self.progress = progress

    async def on_submit(self, turn_context: TurnContext, value: dict[str, Any]) -> None:
        """A card's decision submit, decided only where the copilot answers."""
        if not answers_here(turn_context.activity, self.settings):
            # No approval card is posted where the copilot does not answer; an old or
            # forwarded one is not decided here either (that would read the CRM).
            await turn_context.send_activity(PRIVATE_ONLY)
            return
        await self.on_decision(turn_context, value)

    async def on_decision(self, turn_context: TurnContext, value: dict[str, Any]) -> None:
        """Decide the submitted proposal under the card's hold, update the card, post the result."""
        try:
            submission = parse_submission(value)
        except InvalidSubmission as exc:
            await turn_context.send_activity(exc.message)
            return
        rep = await self.sign_in.rep(turn_context)
        if rep is None:
            return

        built: list[dict[str, Any]] = []

        progress = self.progress(turn_context)

        def decision_for(pending: Mapping[str, Proposal]) -> list[dict[str, Any]]:
            # Built against the proposal actually pending, inside the one decide call.
            proposal = pending.get(submission.tool_call_id)
            if proposal is None:
                raise ProposalNotPending(submission.tool_call_id)
            built.append(to_decision(submission, proposal))
            # A real decision: the write and the model's follow-up may take a while, so the
            # stream opens now ("Working on it…", then keep-alives), not at the first lookup.
            progress.start_soon()
            return built

        result: TurnResult | Literal["not_pending"] = "not_pending"
        async with conversations.deciding(
            self.service.pool, submission.thread_id, submission.tool_call_id
        ) as hold:
            # Not held: decided already, or being decided by another click right now.
            # Either way it is answered below, by show_decided, which checks the thread
            # is the rep's before saying anything about it.
            if hold.granted:
                decided = await self._decide(rep, submission, decision_for, progress)
                if decided is None:
                    return
                result = decided
            if isinstance(result, TurnResult):
                proposal = result.decided.get(submission.tool_call_id)
                if proposal is not None:
                    await self.update_card(turn_context, submission.thread_id, proposal, built[0], result)
                # Marked only once the card shows the outcome (both commit when the hold
                # ends): if the process dies before, the next click shows the outcome
                # instead of "already decided". Still pending (e.g. the CRM was
                # unavailable): the card stays open for another try.
                if proposal is not None and not any(
                    p.tool_call_id == submission.tool_call_id for p in result.proposals
                ):
                    await hold.mark_decided()
        if result == "not_pending":
            await self.show_decided(turn_context, rep, submission.thread_id, submission.tool_call_id)
            return
        await self.answers.send_result(turn_context, result, progress)

    async def _decide(
        self,
        rep: SignedInRep,
        submission: CardSubmission,
        decision_for: Callable[[Mapping[str, Proposal]], list[dict[str, Any]]],
        progress: TurnProgress,
    ) -> TurnResult | Literal["not_pending"] | None:
        """The decision's result, or ``"not_pending"``; None when the rep was already told
        why nothing happened."""
        try:
            return await self.service.decide(
                rep.identity, rep.broker, submission.thread_id, decision_for, progress.update
            )
        except (ThreadAccessDenied, ThreadNotFound):
            await progress.end(NOT_YOURS)
        except ProposalNotPending:
            await progress.stop()
            return "not_pending"
        except (InvalidSubmission, InvalidDecision) as exc:
            await progress.end(exc.message)
        return None

    async def show_decided(
        self, turn_context: TurnContext, rep: SignedInRep, thread_id: str, tool_call_id: str
    ) -> None:
        """A click on a card whose proposal is no longer pending.

        Usually a repeat (the card already shows its outcome). But if the process died
        after the write and its checkpoint and before the card was updated, the rep never
        saw the outcome: show it now, on the card, instead of "already decided".
        """
        try:
            decided = await self.service.decided(rep.identity, thread_id, tool_call_id)
        except (ThreadAccessDenied, ThreadNotFound):
            await turn_context.send_activity(NOT_YOURS)
            return
        async with conversations.deciding(self.service.pool, thread_id, tool_call_id) as hold:
            if decided is None or not hold.granted:
                await turn_context.send_activity(ALREADY_DECIDED)
                return
            proposal, outcome = decided
            decision = {"tool_call_id": tool_call_id, "type": "approve"}
            await self.update_card(
                turn_context,
                thread_id,
                proposal,
                decision,
                TurnResult(thread_id, writes={tool_call_id: outcome}),
            )
            await hold.mark_decided()

    async def update_card(
        self,
        turn_context: TurnContext,
        thread_id: str,
        proposal: Proposal,
        decision: dict[str, Any],
        result: TurnResult,
    ) -> None:
        """Show a decided proposal's outcome on the copy clicked and on its newest copy."""
        if any(p.tool_call_id == proposal.tool_call_id for p in result.proposals):
            return  # still pending (e.g. the CRM was unavailable): the card stays as it is
        outcome = result.writes.get(proposal.tool_call_id)
        detail: dict[str, Any] = outcome.to_json() if outcome is not None else {}
        kind: str
        if decision["type"] == "reject":
            kind, detail = "rejected", {"reason": decision.get("reason", "")}
        elif outcome is not None and outcome.status == "done":
            kind = "approved"
        elif outcome is not None and outcome.status == "conflict":
            kind = "conflict"
        else:
            kind = "failed"
            detail.setdefault("message", "The change could not be made.")
        card = cards.outcome_card(
            proposal,
            kind,  # type: ignore[arg-type]
            detail=detail,
            locale=turn_context.activity.locale,
            zone=rep_zone(turn_context.activity),
            # Just executed, so within the window whenever there is one.
            undo=undoable(proposal.tool) and self.service.settings.undo_window_hours > 0,
        )
        clicked = turn_context.activity.reply_to_id
        newest = await conversations.card_copy(self.service.pool, thread_id, proposal.tool_call_id)
        if not clicked and newest is None:
            await turn_context.send_activity(card_message(card))
            return
        # The copy clicked, and the newest copy if that is another one: a decided
        # proposal leaves no live buttons anywhere.
        if clicked:
            await replace_card(turn_context, None, clicked, card)
        if newest is not None and newest.activity_id != clicked:
            await replace_card(turn_context, newest.conversation_id, newest.activity_id, card)
