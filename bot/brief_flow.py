"""Briefs and the daily digest in chat: ``brief …`` / ``digest …`` settings, ``brief me`` /
``digest me`` now, a digest card's feedback, and a suggestion's "Not now"."""

from __future__ import annotations

from typing import Any, assert_never

from botbuilder.core import TurnContext

from bot import brief_store, cards, digest_store
from bot.audience import in_group
from bot.brief_commands import BriefCommand, BriefLead, BriefMe, BriefToggle, DigestAt, DigestMe, DigestToggle
from bot.card_submit import InvalidSubmission, declined_suggestion, parse_digest_feedback
from bot.digests import rep_digest
from bot.rep_tokens import SignedInRep
from bot.replies import send_card
from bot.settings import BotSettings
from bot.sign_in_flow import SignInFlow
from copilot.briefs import ledger
from copilot.briefs.mailbox_settings import rep_schedule
from copilot.briefs.service import briefs_at
from copilot.errors import AuthError, CalendarUnavailable, CrmUnavailable
from copilot.runner import CopilotService

BRIEFS_ON = (
    "Meeting prep briefs are on: before each meeting with a CRM contact you can see, I post a brief "
    'here. Say "brief off" to stop them.'
)
BRIEFS_OFF = 'Meeting prep briefs are off. Say "brief on" to get them again.'
BRIEFS_PRIVATE_ONLY = 'Briefs come only to your 1:1 chat with me: say "brief on" there.'
SUGGESTION_DECLINED = "Noted: I won't suggest that again until the record changes."
SUGGESTION_UNREADABLE = "That suggestion's button could not be read, so nothing was recorded."
DIGEST_OFF = 'The daily digest is off. Say "digest on" to get it again.'
NO_UPCOMING_MEETING = "You have no upcoming customer meeting in the next 7 days."
BRIEF_ME_DAYS = 7
"""How far ahead ``brief me`` looks for the rep's next customer meeting."""


def briefs_lead_reply(minutes: int) -> str:
    """What ``brief <N>`` answers."""
    return (
        f"Meeting prep briefs are on, {minutes} minutes before each meeting with a CRM contact "
        'you can see (in your working hours). Say "brief off" to stop them.'
    )


def digest_on_reply(prefs: brief_store.Preferences) -> str:
    """What ``digest on`` / ``digest at …`` answer."""
    zone = prefs.time_zone or "your time zone"
    return (
        f"The daily digest is on: every working day at {prefs.digest_time:%H:%M} ({zone}) I post your "
        'day here. Say "digest at 8:00" to change the time, "digest off" to stop it.'
    )


class BriefFlow:
    """Meeting prep briefs and the daily digest, asked for or set up in the rep's 1:1 chat."""

    def __init__(self, service: CopilotService, settings: BotSettings, sign_in: SignInFlow):
        self.service = service
        self.settings = settings
        self.sign_in = sign_in

    async def command(
        self, turn_context: TurnContext, rep: SignedInRep, command: BriefCommand, zone: str | None
    ) -> None:
        """``brief …`` / ``digest …``: settings are kept with this 1:1 chat as where posts go;
        ``brief me`` / ``digest me`` answer here and now. Refused in a group chat."""
        if in_group(turn_context.activity):
            await turn_context.send_activity(BRIEFS_PRIVATE_ONLY)
            return
        pool = self.service.pool
        reference = TurnContext.get_conversation_reference(turn_context.activity).serialize()
        match command:
            case BriefToggle(enabled=enabled):
                await brief_store.set_preferences(
                    pool, rep.identity, reference=reference, time_zone=zone, enabled=enabled
                )
                await turn_context.send_activity(BRIEFS_ON if enabled else BRIEFS_OFF)
            case BriefLead(minutes=minutes):
                await brief_store.set_preferences(
                    pool,
                    rep.identity,
                    reference=reference,
                    time_zone=zone,
                    enabled=True,
                    lead_minutes=minutes,
                )
                await turn_context.send_activity(briefs_lead_reply(minutes))
            case DigestToggle(enabled=enabled):
                prefs = await brief_store.set_preferences(
                    pool, rep.identity, reference=reference, time_zone=zone, digest_enabled=enabled
                )
                await turn_context.send_activity(digest_on_reply(prefs) if enabled else DIGEST_OFF)
            case DigestAt(at=at):
                prefs = await brief_store.set_preferences(
                    pool,
                    rep.identity,
                    reference=reference,
                    time_zone=zone,
                    digest_enabled=True,
                    digest_time=at,
                )
                await turn_context.send_activity(digest_on_reply(prefs))
            case BriefMe():
                await self._brief_me(turn_context, rep, zone)
            case DigestMe():
                await self._digest_me(turn_context, rep, zone)
            case _:
                assert_never(command)

    async def _brief_me(self, turn_context: TurnContext, rep: SignedInRep, zone: str | None) -> None:
        """The brief of the rep's next customer meeting (within :data:`BRIEF_ME_DAYS`), now, its
        times in the rep's zone (mailbox settings, else Teams')."""
        now = self.service.clock()
        prefs = await brief_store.preferences(self.service.pool, rep.identity)
        schedule = await rep_schedule(self.service.settings, rep.broker, zone or prefs.time_zone)
        try:
            async with self.service.pool.connection() as conn:
                run = await briefs_at(
                    self.service.settings,
                    rep.identity,
                    rep.broker,
                    conn,
                    at=now,
                    lead_minutes=BRIEF_ME_DAYS * 24 * 60,
                    zone=schedule.tz,
                )
        except (AuthError, CalendarUnavailable, CrmUnavailable) as exc:
            await turn_context.send_activity(f"I couldn't prepare a brief: {exc.message}")
            return
        if not run.briefs:
            await turn_context.send_activity(NO_UPCOMING_MEETING)
            return
        card = cards.brief_card(run.briefs[0], now=now, record_url_template=self.settings.record_url_template)
        await send_card(turn_context, card)

    async def _digest_me(self, turn_context: TurnContext, rep: SignedInRep, zone: str | None) -> None:
        """Today's digest (the rep's day, in their zone), now, as the reply."""
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
