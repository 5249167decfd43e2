"""Signing the rep in: who sent an activity, the sign-in card, and Teams SSO's token exchange.

Every feature asks :meth:`SignInFlow.rep` before it reads anything for the rep; a message that
arrives before the rep is signed in is kept and answered in the token exchange's own turn.
"""

from __future__ import annotations

import logging
import uuid
from http import HTTPStatus
from typing import Protocol

from botbuilder.core import CardFactory, InvokeResponse, MessageFactory, TurnContext
from botbuilder.schema import ActionTypes, CardAction, OAuthCard, TokenExchangeInvokeResponse
from botframework.connector.token_api.models import TokenExchangeResource

from bot import conversations
from bot.audience import sender_aad_id, tenant_id
from bot.rep_tokens import RepTokens, SignedInRep, SsoRepTokens
from bot.settings import BotSettings
from bot.token_service_sign_in import exchange_at_token_service
from copilot.auth.tokens import OboTokenBroker, identity_from_assertion
from copilot.errors import AuthError
from copilot.identity import RepIdentity
from copilot.runner import CopilotService

logger = logging.getLogger(__name__)


class AnswerQuestion(Protocol):
    """The bot's typed-question path, which answers a message kept while the rep signed in."""

    async def __call__(self, turn_context: TurnContext, text: str, *, activity_id: str | None = None) -> None:
        """Answer ``text`` (``activity_id``: the message it came in, if not this activity)."""


class SignInFlow:
    """The signed-in rep of an activity, the sign-in prompt and the SSO token exchange."""

    def __init__(self, service: CopilotService, reps: RepTokens, settings: BotSettings):
        self.service = service
        self.reps = reps
        self.settings = settings

    async def rep(self, turn_context: TurnContext, *, keeping: str | None = None) -> SignedInRep | None:
        """The signed-in rep; else they are told why, or asked to sign in (``keeping``: the
        message to answer once they have, see :meth:`token_exchange`)."""
        activity = turn_context.activity
        tenant = tenant_id(activity)
        aad = sender_aad_id(activity)
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
            await self.ask_to_sign_in(turn_context)
        return rep

    async def identity_of(self, tenant: str, aad: str) -> RepIdentity:
        """Whose answer or feedback this is: the signed-in rep's identity (its tenant is the token's,
        as on their threads and decisions; a client may name another, as the Agents Playground
        does), else, not signed in, the Teams user as the activity names them (no sign-in asked)."""
        try:
            rep = await self.reps.rep_for(tenant, aad)
        except AuthError:
            rep = None
        return rep.identity if rep is not None else RepIdentity(tenant, aad)

    async def ask_to_sign_in(self, turn_context: TurnContext) -> None:
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

    async def token_exchange(self, turn_context: TurnContext, answer_kept: AnswerQuestion) -> InvokeResponse:
        """``signin/tokenExchange``: keep the rep's SSO token if on-behalf-of works with it.

        Answers 412 when it does not, so Teams falls back to its sign-in prompt. The token is
        stored (encrypted) only after Entra ID accepted it in an on-behalf-of exchange, and
        only for the Teams user who sent it. Deployed, it is also exchanged into the Bot
        Framework token service at the bot's OAuth connection, where the timers look for it
        (``bot.token_service_sign_in``); if the service does not take it, the answer is 412
        and nothing is kept, so no part of the bot counts the rep as signed in. Once kept, the
        message that waited for the sign-in is answered by ``answer_kept``, in this same turn.
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
        if identity.aad_object_id != sender_aad_id(turn_context.activity):
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
        await self._answer_kept(turn_context, identity, answer_kept)
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

    async def _answer_kept(
        self, turn_context: TurnContext, identity: RepIdentity, answer: AnswerQuestion
    ) -> None:
        """Answer the message that waited for this sign-in, in this same turn.

        As Bot Framework's own OAuth prompt continues its dialog inside the token
        exchange's turn: the rep gets the answer without asking again.
        """
        activity = turn_context.activity
        tenant = tenant_id(activity) or ""
        if activity.conversation is None or (tenant and identity.tenant_id != tenant):
            return
        kept = await conversations.take_pending(
            self.service.pool, tenant, identity.aad_object_id, activity.conversation.id
        )
        if kept is not None:
            await answer(turn_context, kept.text, activity_id=kept.activity_id)
