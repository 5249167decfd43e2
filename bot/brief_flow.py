"""Briefs and the daily digest in chat: ``brief me`` / ``digest me`` now, a digest card's
feedback, and a suggestion's "Not now". (Turning them on or off, or moving them, is a change the
rep asks for in their own words: ``change_briefs_and_digest``, on its approval card.)"""

from __future__ import annotations

from typing import Any

from botbuilder.core import TurnContext

from bot import brief_store, cards, digest_store
from bot.ai_entities import client_time_zone
from bot.audience import BRIEFS_PRIVATE_ONLY, in_group
from bot.card_submit import InvalidSubmission, declined_suggestion, parse_digest_feedback
from bot.digests import rep_digest
from bot.rep_tokens import SignedInRep
from bot.replies import send_card
from bot.settings import BotSettings
from bot.sign_in_flow import SignInFlow
from copilot.briefs import ledger
from copilot.briefs.mailbox_settings import rep_schedule
from copilot.errors import AuthError, CalendarUnavailable, CrmUnavailable
from copilot.runner import CopilotService

SUGGESTION_DECLINED = "Noted: I won't suggest that again until the record changes."
SUGGESTION_UNREADABLE = "That suggestion's button could not be read, so nothing was recorded."


class BriefFlow:
    """Meeting prep briefs and the daily digest, asked for or set up in the rep's 1:1 chat."""

    def __init__(self, service: CopilotService, settings: BotSettings, sign_in: SignInFlow):
        self.service = service
        self.settings = settings
        self.sign_in = sign_in

    async def digest_me(self, turn_context: TurnContext, rep: SignedInRep) -> None:
        """Today's digest card (the rep's day, in their zone), now: the answer to a turn whose
        read was the digest (``todays_digest``). Refused in a group chat."""
        if in_group(turn_context.activity):
            await turn_context.send_activity(BRIEFS_PRIVATE_ONLY)
            return
        zone = client_time_zone(turn_context.activity.entities, turn_context.activity.local_timezone)
        pool = self.service.pool
        prefs = await brief_store.preferences(pool, rep.identity)
        schedule = await rep_schedule(self.service.settings, rep.broker, zone or prefs.time_zone)
        try:
            digest = await rep_digest(
                self.service.settings, pool, self.service, rep, schedule, at=self.service.clock()
            )
        except (AuthError, CalendarUnavailable, CrmUnavailable) as exc:
            await turn_context.send_activity(f"I couldn't put your digest together: {exc.message}")
            return
        await send_card(
            turn_context, cards.digest_card(digest, record_url_template=self.settings.record_url_template)
        )

    async def on_digest_feedback(self, turn_context: TurnContext, value: dict[str, Any]) -> None:
        """A digest card's "Not useful" or "Snooze": stored for the rep who pressed it, confirmed."""
        try:
            submitted = parse_digest_feedback(value)
        except InvalidSubmission as exc:
            await turn_context.send_activity(exc.message)
            return
        rep = await self.sign_in.rep(turn_context)
        if rep is None:
            return
        until = await digest_store.record_feedback(
            self.service.pool, rep.identity, submitted.day, submitted.kind, submitted.records
        )
        await send_card(turn_context, cards.digest_feedback_card(submitted.kind, submitted.records, until))

    async def on_not_now(self, turn_context: TurnContext, value: dict[str, Any]) -> None:
        """A suggestion's "Not now": declined, for the rep who pressed it, at the record version
        it was made at, so it is not suggested again until the record changes."""
        declined = declined_suggestion(value)
        if declined is None:
            await turn_context.send_activity(SUGGESTION_UNREADABLE)
            return
        if (rep := await self.sign_in.rep(turn_context)) is None:
            return
        async with self.service.pool.connection() as conn:
            await ledger.record_decision(
                conn,
                rep.identity,
                kind=declined.kind,
                record_id=declined.record_id,
                record_version=declined.record_version,
                decision="declined",
            )
        await turn_context.send_activity(SUGGESTION_DECLINED)
