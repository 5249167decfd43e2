"""The Teams bot: questions go to the runner, proposals come back as one card each.

Decisions arrive as ``Action.Submit`` (works on Teams mobile). The bot checks the
submission against the proposal that is actually pending, resumes the run, and
updates the same card in place to its outcome.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from http import HTTPStatus
from typing import Any, Literal, assert_never, get_args

from botbuilder.core import CardFactory, InvokeResponse, MessageFactory, TurnContext
from botbuilder.core.teams import TeamsActivityHandler
from botbuilder.schema import (
    ActionTypes,
    Activity,
    ActivityTypes,
    CardAction,
    ChannelAccount,
    ConversationAccount,
    OAuthCard,
    SignInConstants,
    TokenExchangeInvokeResponse,
)
from botframework.connector.models import ErrorResponseException
from botframework.connector.token_api.models import TokenExchangeResource

from bot import brief_store, cards, conversations, delegations, digest_store, feedback, insight_cards
from bot.ai_entities import (
    FEEDBACK_CHANNEL_DATA,
    answer_style,
    client_platform,
    client_time_zone,
    message_entity,
    number_citations,
)
from bot.brief_commands import (
    BadBriefCommand,
    BriefCommand,
    BriefLead,
    BriefMe,
    BriefToggle,
    DigestAt,
    DigestMe,
    DigestToggle,
    parse_brief_command,
)
from bot.card_submit import (
    CardSubmission,
    InvalidSubmission,
    declined_suggestion,
    parse_digest_feedback,
    parse_submission,
    to_decision,
    undo_audit_id,
)
from bot.digests import rep_digest
from bot.json_entity import JsonEntity
from bot.progress import Clock, Sleep, TurnProgress
from bot.rep_tokens import RepTokens, SignedInRep, SsoRepTokens
from bot.settings import BotSettings
from bot.stats_card import stats_card
from bot.token_service_sign_in import exchange_at_token_service
from copilot.analytics.team import StatsUnavailable, approval_stats
from copilot.auth.tokens import OboTokenBroker, identity_from_assertion
from copilot.briefs import ledger
from copilot.briefs.mailbox_settings import rep_schedule
from copilot.briefs.service import briefs_at
from copilot.crm import connector
from copilot.errors import (
    AuthError,
    CalendarUnavailable,
    CrmCallError,
    CrmUnavailable,
    InvalidDecision,
    ProposalNotPending,
    ThreadAccessDenied,
    ThreadNotFound,
)
from copilot.evidence import Evidence
from copilot.identity import RepIdentity
from copilot.insight.catchup import catch_up_at
from copilot.insight.risk import RiskSettings, deal_risks
from copilot.models.factory import build_model
from copilot.runner import CopilotService
from copilot.settings import is_offline_model
from copilot.turns import Proposal, TurnResult
from copilot.writes.undo import undoable

logger = logging.getLogger(__name__)

NOT_YOURS = (
    "This card belongs to another conversation or another person, so I can't act on it. Nothing was changed."
)
ALREADY_DECIDED = "That proposal was already decided, so nothing was changed."
Card = dict[str, Any]
PRIVATE_ONLY = (
    "I answer CRM questions only in a 1:1 chat with you: I read the CRM with the permissions "
    "of whoever asks, and everyone here would see the answer. Message me privately and ask there."
)
GROUP_CONVERSATION_TYPES = frozenset({"groupChat", "channel"})
"""Teams ``conversationType``s with more people than the rep (1:1 chats are ``personal``)."""
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
TURN_DONE = "Done."
"""Closes a progress stream that nothing else closed (a path that posted no answer)."""


def approvals_lead(new_cards: int) -> str:
    """The message that closes a turn's stream when the turn ends in approval cards, not an answer."""
    if new_cards == 0:
        return "Your proposed changes still wait for your decision on their cards above."
    if new_cards == 1:
        return "Here is the change for your approval:"
    return f"Here are the {new_cards} changes for your approval:"


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


class CopilotBot(TeamsActivityHandler):
    """Routes Teams activities to the copilot runner and renders the results."""

    def __init__(self, service: CopilotService, reps: RepTokens, settings: BotSettings):
        super().__init__()
        self.service = service
        self.reps = reps
        self.settings = settings
        # Progress streams' time (tests pin it to show a long turn without waiting for it).
        self.progress_clock: Clock = time.monotonic
        self.progress_sleep: Sleep = asyncio.sleep

    def _progress(self, turn_context: TurnContext) -> TurnProgress:
        """The turn's one progress stream (the same one for every caller in the turn)."""
        return TurnProgress.for_turn(turn_context, clock=self.progress_clock, sleep=self.progress_sleep)

    # --- Teams events -------------------------------------------------------------------------

    async def on_members_added_activity(
        self, members_added: list[ChannelAccount], turn_context: TurnContext
    ) -> None:
        bot_id = turn_context.activity.recipient.id if turn_context.activity.recipient else None
        if any(member.id == bot_id for member in members_added):
            await turn_context.send_activity(
                MessageFactory.attachment(CardFactory.adaptive_card(cards.welcome_card()))
            )

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
        if isinstance(value, dict) and value.get("copilot") == "decision":
            if not self._answers_here(turn_context.activity):
                # No approval card is posted where the copilot does not answer; an old or
                # forwarded one is not decided here either (that would read the CRM).
                await turn_context.send_activity(PRIVATE_ONLY)
                return
            await self._on_decision(turn_context, value)
            return
        if isinstance(value, dict) and value.get("copilot") == cards.VIEW_KIND:
            await self._on_view(turn_context, value)
            return
        if isinstance(value, dict) and value.get("copilot") == cards.OPEN_KIND:
            await self._on_open(turn_context, value)
            return
        if isinstance(value, dict) and value.get("copilot") == cards.DIGEST_FEEDBACK_KIND:
            await self._on_digest_feedback(turn_context, value)
            return
        if isinstance(value, dict) and value.get("copilot") == cards.REVOKE_DELEGATION_KIND:
            if (rep := await self._rep(turn_context)) is not None:
                locale = turn_context.activity.locale
                await _reply(
                    turn_context,
                    await delegations.revoke_from_card(
                        self.service.pool, rep, value, locale=locale, now=self.service.clock()
                    ),
                )
            return
        if isinstance(value, dict) and value.get("copilot") == cards.DECLINE_SUGGESTION_KIND:
            await self._on_not_now(turn_context, value)
            return
        if isinstance(value, dict) and value.get("copilot") == cards.UNDO_KIND:
            # An approved card's Undo button: a turn that proposes the undo (its approval
            # card follows); who may undo is checked by the undo itself, not by the card.
            audit_id = undo_audit_id(value)
            text = cards.undo_request(audit_id) if audit_id is not None else ""
        elif isinstance(value, dict) and value.get("copilot") == "command":
            text = str(value.get("text", ""))
        else:
            text = TurnContext.remove_recipient_mention(turn_context.activity) or ""
        await self._on_question(turn_context, text.strip())

    async def on_invoke_activity(self, turn_context: TurnContext) -> InvokeResponse:
        if turn_context.activity.name == SignInConstants.token_exchange_operation_name:
            return await self._token_exchange(turn_context)
        if turn_context.activity.name == feedback.FEEDBACK_INVOKE:
            return await self._on_feedback(turn_context)
        return await super().on_invoke_activity(turn_context)

    def _answers_here(self, activity: Activity) -> bool:
        """Whether CRM questions are answered in this conversation (1:1, or groups if allowed).

        A conversation without a type (not Teams, e.g. a Bot Framework test client) is a 1:1.
        """
        kind = getattr(activity.conversation, "conversation_type", None)
        return kind not in GROUP_CONVERSATION_TYPES or self.settings.group_answers

    # --- feedback on answers ------------------------------------------------------------------

    async def _on_feedback(self, turn_context: TurnContext) -> InvokeResponse:
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
        aad = getattr(activity.from_property, "aad_object_id", None) if activity.from_property else None
        if not aad or activity.conversation is None:
            return refused("Feedback is taken only from a signed-in Microsoft 365 user in a conversation.")
        stored = await feedback.record_feedback(
            self.service.pool,
            conversation_id=activity.conversation.id,
            activity_id=activity.reply_to_id,
            rater=await self._identity_of(_tenant_id(activity) or "", aad),
            feedback=given,
        )
        logger.info("feedback %s (%s) on answer %s", stored.id, stored.rating, stored.activity_id)
        if stored.run_id is not None:
            # Also LangSmith feedback on the answer's run (sent off the turn; False when off).
            await self.service.tracing.record_feedback(stored.run_id, stored.rating, stored.comment)
        return InvokeResponse(status=HTTPStatus.OK, body={})

    async def _identity_of(self, tenant: str, aad: str) -> RepIdentity:
        """Whose answer or feedback this is: the signed-in rep's identity (its tenant is the token's,
        as on their threads and decisions; a client may name another, as the Agents Playground
        does), else, not signed in, the Teams user as the activity names them (no sign-in asked)."""
        try:
            rep = await self.reps.rep_for(tenant, aad)
        except AuthError:
            rep = None
        return rep.identity if rep is not None else RepIdentity(tenant, aad)

    # --- Teams SSO ------------------------------------------------------------------------------

    async def _token_exchange(self, turn_context: TurnContext) -> InvokeResponse:
        """``signin/tokenExchange``: keep the rep's SSO token if on-behalf-of works with it.

        Answers 412 when it does not, so Teams falls back to its sign-in prompt. The token is
        stored (encrypted) only after Entra ID accepted it in an on-behalf-of exchange, and
        only for the Teams user who sent it. Deployed, it is also exchanged into the Bot
        Framework token service at the bot's OAuth connection, where the timers look for it
        (``bot.token_service_sign_in``); if the service does not take it, the answer is 412
        and nothing is kept, so no part of the bot counts the rep as signed in.
        """
        value = turn_context.activity.value if isinstance(turn_context.activity.value, dict) else {}
        request_id, connection = value.get("id"), value.get("connectionName")
        token = value.get("token")

        def failed(detail: str) -> InvokeResponse:
            body = TokenExchangeInvokeResponse(
                id=request_id, connection_name=connection, failure_detail=detail
            )
            return InvokeResponse(status=HTTPStatus.PRECONDITION_FAILED, body=body)

        if not isinstance(self.reps, SsoRepTokens):
            return failed("single sign-on is not configured for this bot")
        if not isinstance(token, str) or not token:
            return failed("no token to exchange")
        try:
            identity = identity_from_assertion(token)
        except AuthError:
            return failed("the token is malformed")
        sender = getattr(turn_context.activity.from_property, "aad_object_id", None)
        if identity.aad_object_id != sender:
            return failed("the token belongs to another user")
        broker = OboTokenBroker(self.service.settings, identity, token)
        no_access: str | None = None
        try:
            await broker.crm_token(write=False)
        except AuthError as exc:
            if not exc.no_access:
                return failed("the on-behalf-of exchange failed")
            no_access = exc.message  # told once the sign-in is kept, not before a 412
        if not self.settings.dev_mode and not await self._left_at_token_service(turn_context, token):
            return failed("the sign-in could not be kept for the bot; please sign in again")
        if no_access is not None:
            await turn_context.send_activity(no_access)
        await self.reps.save(token)
        await self._answer_kept(turn_context, identity)
        return InvokeResponse(
            status=HTTPStatus.OK, body=TokenExchangeInvokeResponse(id=request_id, connection_name=connection)
        )

    async def _left_at_token_service(self, turn_context: TurnContext, token: str) -> bool:
        """Whether the token service now holds the rep's sign-in (False: logged why)."""
        connection = self.settings.sso_connection_name
        if not connection:
            logger.error(
                "sign-in: COPILOT_SSO_CONNECTION is not set, so the timers could never read for the rep"
            )
            return False
        return await exchange_at_token_service(turn_context, connection, token)

    async def _answer_kept(self, turn_context: TurnContext, identity: RepIdentity) -> None:
        """Answer the message that waited for this sign-in, in this same turn.

        As Bot Framework's own OAuth prompt continues its dialog inside the token
        exchange's turn: the rep gets the answer without asking again.
        """
        activity = turn_context.activity
        tenant = _tenant_id(activity) or ""
        if activity.conversation is None or (tenant and identity.tenant_id != tenant):
            return
        kept = await conversations.take_pending(
            self.service.pool, tenant, identity.aad_object_id, activity.conversation.id
        )
        if kept is not None:
            await self._on_question(turn_context, kept.text, activity_id=kept.activity_id)

    async def _ask_to_sign_in(self, turn_context: TurnContext) -> None:
        """An OAuthCard whose token exchange resource lets Teams sign the rep in silently (SSO)."""
        card = OAuthCard(
            text="Sign in so I can read the CRM with your own permissions.",
            connection_name=self.settings.sso_connection_name or "copilot-sso",
            buttons=[CardAction(type=ActionTypes.signin, title="Sign in", value="")],
            token_exchange_resource=TokenExchangeResource(
                id=uuid.uuid4().hex,
                uri=f"api://{self.settings.bot_domain}/{self.settings.microsoft_app_id}",
            ),
        )
        await turn_context.send_activity(MessageFactory.attachment(CardFactory.oauth_card(card)))

    # --- questions ------------------------------------------------------------------------------

    async def _rep(self, turn_context: TurnContext, *, keeping: str | None = None) -> SignedInRep | None:
        """The signed-in rep; else they are told why, or asked to sign in (``keeping``: the
        message to answer once they have, see :meth:`_token_exchange`)."""
        activity = turn_context.activity
        tenant = _tenant_id(activity)
        aad = getattr(activity.from_property, "aad_object_id", None) if activity.from_property else None
        if not aad:
            await turn_context.send_activity("I can only help signed-in Microsoft 365 users.")
            return None
        try:
            rep = await self.reps.rep_for(tenant or "", aad)
        except AuthError as exc:
            await turn_context.send_activity(f"I couldn't sign you in: {exc.message}")
            return None
        if rep is None:
            if keeping and activity.conversation is not None:
                await conversations.keep_pending(
                    self.service.pool, tenant or "", aad, activity.conversation.id, keeping, activity.id
                )
            await self._ask_to_sign_in(turn_context)
        return rep

    async def _on_question(
        self, turn_context: TurnContext, text: str, *, activity_id: str | None = None
    ) -> None:
        """Answer ``text`` (``activity_id``: the message it came in, if not this activity)."""
        if not text:
            # Only spaces, or only an attachment: say what to ask rather than nothing.
            await turn_context.send_activity(cards.EMPTY_MESSAGE_REPLY)
            return
        if text.lower() in cards.HELP_COMMANDS:
            await turn_context.send_activity(
                MessageFactory.attachment(CardFactory.adaptive_card(cards.help_card()))
            )
            return
        if not self._answers_here(turn_context.activity):
            # Before any sign-in or CRM call: nothing of the CRM is shown to the group.
            await turn_context.send_activity(PRIVATE_ONLY)
            return
        rep = await self._rep(turn_context, keeping=text)
        if rep is None:
            return
        zone = client_time_zone(turn_context.activity.entities, turn_context.activity.local_timezone)
        if zone is not None:
            # Kept for the timers (the rep's day, the fallback schedule); written only if it changed.
            await brief_store.record_time_zone(
                self.service.pool, rep.identity.tenant_id, rep.identity.aad_object_id, zone
            )
        conversation_id = turn_context.activity.conversation.id
        if text.lower() in cards.RESET_COMMANDS:
            await conversations.forget(self.service.pool, conversation_id, rep.identity)
            await turn_context.send_activity("Starting a new conversation.")
            return
        if text.lower() in cards.APPROVALS_COMMANDS:
            await self._show_approvals(turn_context, rep)
            return
        if text.lower() in cards.STATS_COMMANDS:
            await self._show_stats(turn_context, rep)
            return
        if text.lower() in insight_cards.RISK_COMMANDS + insight_cards.CATCH_UP_COMMANDS:
            await self._show_insight(turn_context, rep, risk=text.lower() in insight_cards.RISK_COMMANDS)
            return
        try:
            brief_command = parse_brief_command(text)
        except BadBriefCommand as exc:
            await turn_context.send_activity(exc.message)
            return
        if brief_command is not None:
            await self._brief_command(turn_context, rep, brief_command, zone)
            return
        if text.lower() in cards.DELEGATIONS_COMMANDS:
            locale = turn_context.activity.locale
            await _reply(
                turn_context,
                await delegations.show(self.service.pool, rep, locale=locale, now=self.service.clock()),
            )
            return
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
        await self._send_result(turn_context, result, progress)

    async def _brief_command(
        self, turn_context: TurnContext, rep: SignedInRep, command: BriefCommand, zone: str | None
    ) -> None:
        """``brief …`` / ``digest …``: settings are kept with this 1:1 chat as where posts go;
        ``brief me`` / ``digest me`` answer here and now. Refused in a group chat."""
        kind = getattr(turn_context.activity.conversation, "conversation_type", None)
        if kind in GROUP_CONVERSATION_TYPES:
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
        await turn_context.send_activity(MessageFactory.attachment(CardFactory.adaptive_card(card)))

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
        card = cards.digest_card(digest, record_url_template=self.settings.record_url_template)
        await turn_context.send_activity(MessageFactory.attachment(CardFactory.adaptive_card(card)))

    async def _on_digest_feedback(self, turn_context: TurnContext, value: dict[str, Any]) -> None:
        """A digest card's "Not useful" or "Snooze": stored for the rep who pressed it, confirmed."""
        try:
            submitted = parse_digest_feedback(value)
        except InvalidSubmission as exc:
            await turn_context.send_activity(exc.message)
            return
        rep = await self._rep(turn_context)
        if rep is None:
            return
        until = await digest_store.record_feedback(
            self.service.pool, rep.identity, submitted.day, submitted.kind, submitted.records
        )
        card = cards.digest_feedback_card(submitted.kind, submitted.records, until)
        await turn_context.send_activity(MessageFactory.attachment(CardFactory.adaptive_card(card)))

    async def _on_not_now(self, turn_context: TurnContext, value: dict[str, Any]) -> None:
        """A suggestion's "Not now": declined, for the rep who pressed it, at the record version
        it was made at, so it is not suggested again until the record changes."""
        declined = declined_suggestion(value)
        if declined is None:
            await turn_context.send_activity(SUGGESTION_UNREADABLE)
            return
        if (rep := await self._rep(turn_context)) is None:
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

    async def _send_result(
        self, turn_context: TurnContext, result: TurnResult, progress: TurnProgress | None
    ) -> None:
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
        if result.answer:
            await self._send_answer(turn_context, result, progress)
        elif progress is not None and progress.open:
            # No answer to close the stream with: close it before the first card, so no
            # "Working on it…" stays open above the cards (one stream per turn, ended first).
            await progress.end(approvals_lead(len(new)) if result.proposals else TURN_DONE)
        for proposal in new:
            # Each on its own thread's card: one made while others waited resumes its own.
            await self._send_card(turn_context, proposal.thread_id or result.thread_id, proposal)

    async def _send_answer(
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
            message = MessageFactory.attachment(CardFactory.adaptive_card(card))
            entity = message_entity()
        else:
            # Nothing to cite: the text alone (a card too would show it twice).
            message = MessageFactory.text(result.answer)
            entity = message_entity()
        message.entities = [JsonEntity(entity), *(progress.final_entities() if progress is not None else [])]
        message.channel_data = dict(FEEDBACK_CHANNEL_DATA)
        response = await turn_context.send_activity(message)
        aad = getattr(activity.from_property, "aad_object_id", None) if activity.from_property else None
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
                identity=await self._identity_of(_tenant_id(activity) or "", aad),
                run_id=result.run_id,
            )

    async def _send_card(self, turn_context: TurnContext, thread_id: str, proposal: Proposal) -> str | None:
        """Post a proposal's approval card and record where; the new activity's id."""
        card = cards.approval_card(proposal, thread_id=thread_id, locale=turn_context.activity.locale)
        response = await turn_context.send_activity(
            MessageFactory.attachment(CardFactory.adaptive_card(card))
        )
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

    # --- my approvals -----------------------------------------------------------------------------

    async def _show_approvals(self, turn_context: TurnContext, rep: SignedInRep) -> None:
        """One card listing the rep's pending proposals across their own threads, newest first.

        The bot's card records name the candidates; each thread's checkpoint (read through
        the runner, which checks the thread is the rep's) says which of them still wait.
        """
        copies = [(c, "") for c in await conversations.undecided_cards(self.service.pool, rep.identity)]
        # And those of colleagues whose approvals the rep holds (the runner re-checks each).
        for owner, name in (
            await delegations.delegated_owners(self.service.pool, rep, now=self.service.clock())
        ).items():
            theirs = await conversations.undecided_cards(self.service.pool, rep.identity, owner_aad_id=owner)
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
        card = cards.approvals_card(waiting, now=self.service.clock(), locale=turn_context.activity.locale)
        await turn_context.send_activity(MessageFactory.attachment(CardFactory.adaptive_card(card)))

    async def _show_stats(self, turn_context: TurnContext, rep: SignedInRep) -> None:
        """The approval stats card: the rep's direct reports' figures (as the CRM's manager
        hierarchy, read as the rep, names them), or the rep's own."""
        stats = await approval_stats(self.service.settings, self.service.pool, rep.identity, rep.broker)
        if isinstance(stats, StatsUnavailable):
            await turn_context.send_activity(stats.message)
            return
        card = stats_card(stats)
        await turn_context.send_activity(MessageFactory.attachment(CardFactory.adaptive_card(card)))

    async def _show_insight(self, turn_context: TurnContext, rep: SignedInRep, *, risk: bool) -> None:
        """The deals-at-risk card, or the what-changed card since the rep's last catch-up (which
        it then moves to now); both read the CRM as the rep, with no model."""
        settings, now = self.service.settings, self.service.clock()
        try:
            if risk:
                async with AsyncExitStack() as stack:
                    evidence = Evidence(connector.reads(stack, settings, rep.broker))
                    model = settings.copilot_model
                    notes = None if is_offline_model(model) else build_model(model)
                    report = await deal_risks(evidence, RiskSettings(), now, notes_model=notes)
                card = insight_cards.risk_card(report, record_url_template=self.settings.record_url_template)
            else:
                async with self.service.pool.connection() as conn:
                    changes = await catch_up_at(settings, rep.identity, rep.broker, conn, now=now)
                card = insight_cards.catch_up_card(
                    changes, record_url_template=self.settings.record_url_template
                )
        except (AuthError, CrmUnavailable, CrmCallError) as exc:
            await turn_context.send_activity(f"I couldn't read your deals: {exc.message}")
            return
        await turn_context.send_activity(MessageFactory.attachment(CardFactory.adaptive_card(card)))

    async def _on_open(self, turn_context: TurnContext, value: dict[str, Any]) -> None:
        """A "my approvals" row's Open: post that proposal's approval card again, here, and
        take the buttons off its previous copy (one live copy per proposal)."""
        rep = await self._rep(turn_context)
        if rep is None:
            return
        thread_id, tool_call_id = str(value.get("thread_id") or ""), str(value.get("tool_call_id") or "")
        # Whose it is (the owner, or an approval delegate) is the runner's check, below.
        previous = await conversations.card_copy(self.service.pool, thread_id, tool_call_id)
        if previous is None:
            await turn_context.send_activity(NOT_YOURS)
            return
        proposal = await self._still_pending(turn_context, rep, thread_id, tool_call_id)
        if proposal is None:
            return
        posted = await self._send_card(turn_context, thread_id, proposal)
        if posted is not None and posted != previous.activity_id:
            await self._replace_card(
                turn_context, previous.conversation_id, previous.activity_id, cards.moved_card(proposal)
            )

    async def _still_pending(
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

    async def _on_view(self, turn_context: TurnContext, value: dict[str, Any]) -> None:
        """Edit…, Reject… or Back on an approval card: the card, updated in place, with that
        panel open (kept by the bot, so a client's re-layout never collapses it)."""
        rep = await self._rep(turn_context)
        if rep is None:
            return
        thread_id, tool_call_id = str(value.get("thread_id") or ""), str(value.get("tool_call_id") or "")
        views: dict[str, cards.CardView] = {v: v for v in get_args(cards.CardView)}
        view = views.get(str(value.get("view")))
        copy = await conversations.card_copy(self.service.pool, thread_id, tool_call_id)
        if copy is None or view is None:
            await turn_context.send_activity(NOT_YOURS)
            return
        proposal = await self._still_pending(turn_context, rep, thread_id, tool_call_id)
        if proposal is None:
            return
        card = cards.approval_card(
            proposal, thread_id=thread_id, locale=turn_context.activity.locale, view=view
        )
        clicked = turn_context.activity.reply_to_id
        await self._replace_card(
            turn_context, None if clicked else copy.conversation_id, clicked or copy.activity_id, card
        )

    async def _replace_card(
        self, turn_context: TurnContext, conversation_id: str | None, activity_id: str, card: Card
    ) -> None:
        """Update a card the bot posted, in this conversation or (``conversation_id``) another one."""
        update = MessageFactory.attachment(CardFactory.adaptive_card(card))
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

    # --- decisions --------------------------------------------------------------------------------

    async def _on_decision(self, turn_context: TurnContext, value: dict[str, Any]) -> None:
        try:
            submission = parse_submission(value)
        except InvalidSubmission as exc:
            await turn_context.send_activity(exc.message)
            return
        rep = await self._rep(turn_context)
        if rep is None:
            return

        built: list[dict[str, Any]] = []

        progress = self._progress(turn_context)

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
            # Either way it is answered below, by _show_decided, which checks the thread
            # is the rep's before saying anything about it.
            if hold.granted:
                decided = await self._decide(turn_context, rep, submission, decision_for, progress)
                if decided is None:
                    return
                result = decided
            if isinstance(result, TurnResult):
                proposal = result.decided.get(submission.tool_call_id)
                if proposal is not None:
                    await self._update_card(turn_context, submission.thread_id, proposal, built[0], result)
                # Marked only once the card shows the outcome (both commit when the hold
                # ends): if the process dies before, the next click shows the outcome
                # instead of "already decided". Still pending (e.g. the CRM was
                # unavailable): the card stays open for another try.
                if proposal is not None and not any(
                    p.tool_call_id == submission.tool_call_id for p in result.proposals
                ):
                    await hold.mark_decided()
        if result == "not_pending":
            await self._show_decided(turn_context, rep, submission.thread_id, submission.tool_call_id)
            return
        await self._send_result(turn_context, result, progress)

    async def _decide(
        self,
        turn_context: TurnContext,
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

    async def _show_decided(
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
            await self._update_card(
                turn_context,
                thread_id,
                proposal,
                decision,
                TurnResult(thread_id, writes={tool_call_id: outcome}),
            )
            await hold.mark_decided()

    async def _update_card(
        self,
        turn_context: TurnContext,
        thread_id: str,
        proposal: Proposal,
        decision: dict[str, Any],
        result: TurnResult,
    ) -> None:
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
            # Just executed, so within the window whenever there is one.
            undo=undoable(proposal.tool) and self.service.settings.undo_window_hours > 0,
        )
        clicked = turn_context.activity.reply_to_id
        newest = await conversations.card_copy(self.service.pool, thread_id, proposal.tool_call_id)
        if not clicked and newest is None:
            await turn_context.send_activity(MessageFactory.attachment(CardFactory.adaptive_card(card)))
            return
        # The copy clicked, and the newest copy if that is another one: a decided
        # proposal leaves no live buttons anywhere.
        if clicked:
            await self._replace_card(turn_context, None, clicked, card)
        if newest is not None and newest.activity_id != clicked:
            await self._replace_card(turn_context, newest.conversation_id, newest.activity_id, card)


async def _reply(turn_context: TurnContext, reply: delegations.Reply) -> None:
    """Post a card, or a line of text."""
    if isinstance(reply, str):
        await turn_context.send_activity(reply)
    else:
        await turn_context.send_activity(MessageFactory.attachment(CardFactory.adaptive_card(reply)))


def _tenant_id(activity: Activity) -> str | None:
    conversation = activity.conversation
    if conversation is not None and getattr(conversation, "tenant_id", None):
        return str(conversation.tenant_id)
    channel_data = activity.channel_data or {}
    tenant = channel_data.get("tenant") if isinstance(channel_data, dict) else None
    return str(tenant.get("id")) if isinstance(tenant, dict) and tenant.get("id") else None


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
