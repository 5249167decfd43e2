"""The rep's token when the copilot speaks first: from the Bot Framework token service.

A timer (the brief timer) has no incoming activity, so no Teams SSO token arrives with it. A
proactive bot asks the token service for the token the rep left at the bot's OAuth connection
(``COPILOT_SSO_CONNECTION``) when they signed in, with botbuilder's public user-token API:
``bot_framework_authentication.create_user_token_client(claims_identity)`` →
``UserTokenClient.get_user_token(user_id, connection_name, channel_id, magic_code)``, which
calls the token service at ``OAUTH_URL`` with the bot's own app token. The token is the rep's
SSO token for this app, so it takes the same on-behalf-of path as a Teams SSO token
(``OboTokenBroker``).

No token: the rep gets a sign-in card (``bot.cards.sign_in_card``) in their 1:1 chat, at most
once a day across instances (a ``sign_in_prompts`` claim, as briefs are claimed), and nothing
is read for them. Local development (no app credentials, e.g. the Agents Playground, which has
neither SSO nor a token service) keeps the development sign-in (``runtime.reps``).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from botbuilder.core import MessageFactory, TurnContext
from botbuilder.schema import Attachment, ConversationReference
from botframework.connector.token_api.models import ErrorResponseException

from bot import cards
from bot.audience import GROUP_CONVERSATION_TYPES
from bot.conversations import Pool
from bot.rep_tokens import SignedInRep
from copilot.auth.tokens import OboTokenBroker, identity_from_assertion
from copilot.errors import AuthError, ConfigurationError

if TYPE_CHECKING:
    from bot.runtime import BotRuntime

logger = logging.getLogger(__name__)

KEPT = 1024
"""Reps whose broker a process keeps between runs while the token service returns the same token
(its on-behalf-of tokens stay cached, as ``SsoRepTokens`` keeps them between turns)."""
_kept: OrderedDict[tuple[str, str], tuple[str, SignedInRep]] = OrderedDict()


async def proactive_rep(
    runtime: BotRuntime,
    tenant_id: str,
    aad_object_id: str,
    reference: dict[str, Any],
    *,
    on: dt.date | None = None,
) -> SignedInRep | None:
    """The rep as the token service signs them in, or None (then nothing may be read for them).

    ``reference`` is the stored conversation reference of the rep's 1:1 chat: its ``user.id``
    and ``channelId`` are who the token service knows, and where a sign-in card goes when it
    has no token (once per rep per day ``on``, default today in UTC). A token of another user
    than the subscriber is refused (:class:`AuthError`), as the Teams SSO exchange refuses one.
    """
    settings = runtime.bot_settings
    if settings.dev_mode:
        return await runtime.reps.rep_for(tenant_id, aad_object_id)
    connection = settings.sso_connection_name
    if not connection:
        raise ConfigurationError("COPILOT_SSO_CONNECTION is required when MicrosoftAppId is set")
    user = reference.get("user")
    user_id = user.get("id") if isinstance(user, dict) else None
    channel_id = reference.get("channelId")
    if not isinstance(user_id, str) or not user_id or not isinstance(channel_id, str) or not channel_id:
        logger.warning(
            "briefs: the stored reference names no user or channel; the rep must say 'brief on' again"
        )
        return None
    adapter = runtime.adapter
    client = await adapter.bot_framework_authentication.create_user_token_client(
        adapter.create_claims_identity(settings.microsoft_app_id)
    )
    try:
        response = await client.get_user_token(user_id, connection, channel_id, None)
    except ErrorResponseException as exc:
        raise AuthError(f"the Bot Framework token service refused the token request: {exc.message}") from exc
    token = getattr(response, "token", None) if response is not None else None
    if not token:
        await _ask_to_sign_in(
            runtime, tenant_id, aad_object_id, reference, on or dt.datetime.now(dt.UTC).date()
        )
        return None
    return _signed_in(runtime, tenant_id, aad_object_id, token)


def _signed_in(runtime: BotRuntime, tenant_id: str, aad_object_id: str, token: str) -> SignedInRep:
    key = (tenant_id, aad_object_id)
    kept = _kept.get(key)
    if kept is not None and kept[0] == token:
        _kept.move_to_end(key)
        return kept[1]
    identity = identity_from_assertion(token)
    if (identity.tenant_id, identity.aad_object_id) != key:
        raise AuthError("the token service's token belongs to another user")
    rep = SignedInRep(identity, OboTokenBroker(runtime.settings, identity, token))
    _kept[key] = (token, rep)
    while len(_kept) > KEPT:
        _kept.popitem(last=False)
    return rep


async def _ask_to_sign_in(
    runtime: BotRuntime, tenant_id: str, aad_object_id: str, reference: dict[str, Any], day: dt.date
) -> None:
    """Post one sign-in card to the rep's 1:1 chat for ``day`` (claimed first; a failed post gives
    its claim back, so the next run posts it)."""
    _kept.pop((tenant_id, aad_object_id), None)
    conversation = reference.get("conversation")
    kind = conversation.get("conversationType") if isinstance(conversation, dict) else None
    if kind in GROUP_CONVERSATION_TYPES:
        return  # only the rep's own chat is asked
    pool = runtime.service.pool
    if not await _claim(pool, tenant_id, aad_object_id, day):
        return
    settings = runtime.bot_settings
    card = cards.sign_in_card(
        connection_name=settings.sso_connection_name,
        exchange_uri=f"api://{settings.bot_domain}/{settings.microsoft_app_id}",
        exchange_id=uuid.uuid4().hex,
    )
    sent: list[str | None] = []

    async def send(turn_context: TurnContext) -> None:
        attachment = Attachment(content_type=cards.OAUTH_CARD_CONTENT_TYPE, content=card)
        response = await turn_context.send_activity(MessageFactory.attachment(attachment))
        sent.append(response.id if response else None)

    try:
        await runtime.adapter.continue_conversation(
            ConversationReference().deserialize(reference), send, settings.microsoft_app_id
        )
    finally:
        if not sent:
            # Not posted (the adapter's turn-error handler logged why): the next run posts it.
            await _release(pool, tenant_id, aad_object_id, day)
    if not sent:
        return
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE sign_in_prompts SET activity_id = %s WHERE tenant_id = %s AND aad_object_id = %s AND day = %s",
            (sent[0] if sent else None, tenant_id, aad_object_id, day),
        )
    logger.info("briefs: asked a rep to sign in (no token at the token service)")


async def _claim(pool: Pool, tenant_id: str, aad_object_id: str, day: dt.date) -> bool:
    async with pool.connection() as conn:
        cur = await conn.execute(
            """
            INSERT INTO sign_in_prompts (tenant_id, aad_object_id, day, expires_at)
            VALUES (%s, %s, %s, %s)
            ON CONFLICT (tenant_id, aad_object_id, day) DO NOTHING
            """,
            (
                tenant_id,
                aad_object_id,
                day,
                dt.datetime.combine(day + dt.timedelta(days=2), dt.time(), dt.UTC),
            ),
        )
        return bool(cur.rowcount)


async def _release(pool: Pool, tenant_id: str, aad_object_id: str, day: dt.date) -> None:
    async with pool.connection() as conn:
        await conn.execute(
            "DELETE FROM sign_in_prompts WHERE tenant_id = %s AND aad_object_id = %s AND day = %s",
            (tenant_id, aad_object_id, day),
        )
