"""The rep's desk cards the bot composes from its own records, read as the rep with no model:
the waiting approvals (theirs and the colleagues' they may decide) and the delegations, each
the answer to a turn whose read was that desk (``bot.answer_flow``, ``copilot.views``); and a
delegation card's Revoke."""

from __future__ import annotations

from typing import Any

from botbuilder.core import TurnContext

from bot import cards, conversations, delegations
from bot.audience import rep_zone
from bot.rep_tokens import SignedInRep
from bot.replies import send_card, send_reply
from bot.settings import BotSettings
from bot.sign_in_flow import SignInFlow
from copilot.errors import ThreadAccessDenied, ThreadNotFound
from copilot.runner import CopilotService


class DeskFlow:
    """Shows the rep's desk cards and answers a delegation card's Revoke."""

    def __init__(self, service: CopilotService, settings: BotSettings, sign_in: SignInFlow):
        self.service = service
        self.settings = settings
        self.sign_in = sign_in

    async def show_approvals(self, turn_context: TurnContext, rep: SignedInRep) -> None:
        """One card listing the rep's pending proposals across their own threads, newest first.

        The bot's card records name the candidates; each thread's checkpoint (read through
        the runner, which checks the thread is the rep's) says which of them still wait.
        """
        pool = self.service.pool
        copies = [(c, "") for c in await conversations.undecided_cards(pool, rep.identity)]
        # And those of colleagues whose approvals the rep holds (the runner re-checks each).
        for owner, name in (await delegations.delegated_owners(pool, rep, now=self.service.clock())).items():
            theirs = await conversations.undecided_cards(pool, rep.identity, owner_aad_id=owner)
            copies += [(c, name or "a colleague") for c in theirs]
        by_thread: dict[str, list[tuple[conversations.CardCopy, str]]] = {}
        for copy, whose in copies:
            by_thread.setdefault(copy.thread_id, []).append((copy, whose))
        waiting: list[cards.WaitingProposal] = []
        for thread_id, rows in by_thread.items():
            try:
                pending = {
                    p.tool_call_id: p for p in (await self.service.pending(rep.identity, thread_id)).proposals
                }
            except (ThreadAccessDenied, ThreadNotFound):
                continue
            waiting += [
                cards.WaitingProposal(thread_id, pending[row.tool_call_id], row.created_at, whose)
                for row, whose in rows
                if row.tool_call_id in pending
            ]
        card = cards.approvals_card(
            waiting,
            now=self.service.clock(),
            locale=turn_context.activity.locale,
            zone=rep_zone(turn_context.activity),
        )
        await send_card(turn_context, card)

    async def show_delegations(self, turn_context: TurnContext, rep: SignedInRep) -> None:
        """The delegations card: who may decide the rep's proposals, and whose the rep may decide."""
        locale = turn_context.activity.locale
        await send_reply(
            turn_context,
            await delegations.show(self.service.pool, rep, locale=locale, now=self.service.clock()),
        )

    async def on_revoke_delegation(self, turn_context: TurnContext, value: dict[str, Any]) -> None:
        """A delegations card's Revoke, for the rep who pressed it."""
        if (rep := await self.sign_in.rep(turn_context)) is None:
            return
        locale = turn_context.activity.locale
        await send_reply(
            turn_context,
            await delegations.revoke_from_card(
                self.service.pool, rep, value, locale=locale, now=self.service.clock()
            ),
        )
