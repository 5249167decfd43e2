"""Wiring: the copilot service, rep tokens, the adapter and the bot, for any host.

Two halves with different weights:

* the **HTTP edge** (``channel_token_header``, ``authenticate_activity``,
  ``accept_activity``, ``activity_from_json``, ``refusal``, ...) needs botbuilder's
  token validation and activity model, nothing of the copilot;
* the **turn** (``open_runtime``, ``run_inline``) needs the bot handler and the copilot
  service, i.e. the agent stack (LangChain, LangGraph, MCP).

The Functions HTTP trigger uses only the first half for everything it enqueues, so this
module imports the second half (``bot.handler``, ``bot.rep_tokens``, ``copilot.runner``)
inside ``open_runtime``, on first use, not at import time: importing them costs seconds
(see ``tests/unit/test_light_http_trigger.py``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jwt
from botbuilder.integration.aiohttp import CloudAdapter, ConfigurationBotFrameworkAuthentication
from botbuilder.schema import Activity, AdaptiveCardInvokeResponse, ChannelAccount
from botbuilder.schema.teams import TeamsChannelData
from botframework.connector import Channels
from botframework.connector.auth import (
    AuthenticateRequestResult,
    AuthenticationConstants,
    BotFrameworkAuthentication,
    ClaimsIdentity,
    SkillValidation,
)

from bot.activity_input import (
    MAX_ACTIVITY_BYTES,
    ActivityInput,
    ActivityTooLarge,
    InvalidActivity,
    RoutingHints,
    read_json,
    routing_hints,
    validate_activity,
)
from bot.connectors import ReusingBotFrameworkAuthentication
from bot.credentials import AzureIdentityCredentialsFactory
from bot.settings import BotSettings
from copilot.errors import ConfigurationError
from copilot.settings import Settings

if TYPE_CHECKING:  # the turn's half: imported by open_runtime on first use (see the docstring)
    from bot.handler import CopilotBot
    from bot.rep_tokens import RepTokens
    from copilot.runner import CopilotService

logger = logging.getLogger(__name__)

DEV_MODE_WARNING = (
    "\n*** LOCAL DEVELOPMENT MODE: no MicrosoftAppId is configured, so incoming requests are NOT "
    "authenticated and reps are signed in through the development identity provider. Never "
    "deploy like this: set MicrosoftAppId / MicrosoftAppPassword. ***\n"
)


@dataclass
class BotRuntime:
    settings: Settings
    bot_settings: BotSettings
    service: CopilotService
    adapter: CloudAdapter
    bot: CopilotBot
    reps: RepTokens


def build_authentication(bot_settings: BotSettings) -> ConfigurationBotFrameworkAuthentication:
    """Channel → bot token validation (OpenID metadata configurable) and bot → channel credentials
    (connector clients reused across turns: ``bot.connectors``)."""
    return ReusingBotFrameworkAuthentication(
        bot_settings.botbuilder_configuration(),
        credentials_factory=AzureIdentityCredentialsFactory(bot_settings),
    )


def sso_token_key(bot_settings: BotSettings) -> str:
    """The Fernet key for cached delegated tokens; :class:`ConfigurationError` if a deployment lacks it."""
    key = bot_settings.token_encryption_key
    if key is None:
        raise ConfigurationError("COPILOT_TOKEN_ENCRYPTION_KEY is required when MicrosoftAppId is set")
    return key.get_secret_value()


@asynccontextmanager
async def open_runtime(
    settings: Settings,
    bot_settings: BotSettings,
    *,
    authentication: BotFrameworkAuthentication | None = None,
) -> AsyncIterator[BotRuntime]:
    """Everything a host (dev server, Azure Functions) needs to run turns.

    ``authentication`` is the host's channel-token validation and Bot Connector
    credentials if it built them already (``build_authentication``); else built here.
    """
    # The agent stack, loaded only by hosts that run turns (see the module docstring).
    from bot.handler import CopilotBot, on_turn_error
    from bot.rep_tokens import DevRepTokens, SsoRepTokens
    from copilot.runner import open_service

    if bot_settings.dev_mode:
        logger.warning(DEV_MODE_WARNING)
    async with open_service(settings) as service:
        reps: RepTokens
        if bot_settings.dev_mode:
            reps = DevRepTokens(settings)
        else:
            reps = SsoRepTokens(settings, service.pool, sso_token_key(bot_settings))
        auth = authentication or build_authentication(bot_settings)
        adapter = CloudAdapter(auth)
        adapter.on_turn_error = on_turn_error
        bot = CopilotBot(service, reps, bot_settings)
        try:
            yield BotRuntime(settings, bot_settings, service, adapter, bot, reps)
        finally:
            if isinstance(auth, ReusingBotFrameworkAuthentication):
                # The connector clients' aiohttp session: only the turns reply through it.
                await auth.close()


class Unauthenticated(Exception):
    """The request's Bot Framework token is missing or not valid for this bot and activity."""


MAX_AUTHORIZATION_LENGTH = 16 * 1024
_BEARER_JWT = re.compile(r"Bearer ([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)")
CHANNEL_TOKEN_ALGORITHM = "RS256"
"""What botbuilder finally verifies channel tokens with (``jwt.decode(algorithms=["RS256"])``)."""


def channel_token_header(authorization: Sequence[str], bot_settings: BotSettings) -> str | None:
    """The one ``Authorization`` header to give botbuilder, or None (local development only).

    A cheap structural check before botbuilder's: exactly one ``Bearer <JWT>`` header whose
    unverified header and claims could belong to a channel → bot token (RS256 with a key
    id, issued by the configured channel issuer, not a skill token). That keeps botbuilder
    on its channel-token path: its emulator and skill paths accept other issuers and fetch
    signing keys from Microsoft's public endpoints, which this bot never needs (and an
    attacker must not be able to make it contact). Nothing here trusts the token: the
    signature, audience, expiry, endorsement and ``serviceurl`` are botbuilder's to check.
    """
    values = [value for value in authorization if value.strip()]
    if bot_settings.dev_mode:
        if values:
            # botbuilder would validate it against no app id, and refuse it, after
            # fetching the public Bot Framework signing keys.
            raise Unauthenticated("local development mode takes no Authorization header")
        return None
    if not values:
        raise Unauthenticated("no Authorization header")
    if len(values) > 1:
        raise Unauthenticated("more than one Authorization header")
    header = values[0]
    match = _BEARER_JWT.fullmatch(header) if len(header) <= MAX_AUTHORIZATION_LENGTH else None
    if match is None:
        raise Unauthenticated("the Authorization header is not 'Bearer <JWT>'")
    token = match.group(1)
    try:
        head = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise Unauthenticated(f"malformed token: {type(exc).__name__}") from exc
    if head.get("alg") != CHANNEL_TOKEN_ALGORITHM:
        raise Unauthenticated("the token is not signed with RS256")
    if not isinstance(head.get("kid"), str) or not head["kid"]:
        raise Unauthenticated("the token names no signing key")
    issuer = bot_settings.channel_token_issuer
    if not issuer or claims.get("iss") != issuer:
        raise Unauthenticated("the token was not issued by the Bot Framework channel")
    if SkillValidation.is_skill_claim(claims):
        raise Unauthenticated("skill tokens are not accepted")
    return header


async def authenticate_activity(
    auth: BotFrameworkAuthentication,
    bot_settings: BotSettings,
    authorization: Sequence[str],
    hints: RoutingHints,
) -> AuthenticateRequestResult:
    """botbuilder's channel-token validation, with every token failure as :class:`Unauthenticated`.

    Runs before the body is read as an activity: botbuilder only needs the ``channelId``
    (the signing key must be endorsed for it) and the ``serviceUrl`` (the token's
    ``serviceurl`` claim must equal it), taken from the raw JSON when they are strings.
    Without a string ``serviceUrl`` botbuilder skips that comparison; such a body is then
    refused as malformed, so it never matters.

    botbuilder signals bad tokens in several ways: ``PermissionError`` (no token, wrong
    issuer/audience, serviceurl mismatch), PyJWT errors (expired, bad signature,
    malformed), ``IndexError``/``KeyError`` (key id not published) and a bare
    ``Exception`` (key not endorsed for the channel, algorithm not allowed). Anything
    else (e.g. the metadata endpoint unreachable) is our failure, not the caller's.
    """
    header = channel_token_header(authorization, bot_settings)
    # Only what botbuilder reads: a recipient without a role keeps it off the skill path.
    probe = Activity(channel_id=hints.channel_id, service_url=hints.service_url, recipient=ChannelAccount())
    try:
        return await auth.authenticate_request(probe, header)
    except (PermissionError, jwt.PyJWTError, LookupError) as exc:
        raise Unauthenticated(f"{type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        if type(exc) is Exception:
            raise Unauthenticated(f"{exc}") from exc
        raise


@dataclass(frozen=True)
class InboundActivity:
    """An authenticated, well-formed activity, ready for a turn."""

    body: dict[str, Any]
    """The JSON exactly as the channel posted it (what the turn queue carries)."""
    shape: ActivityInput
    activity: Activity
    auth: AuthenticateRequestResult


async def accept_activity(
    auth: BotFrameworkAuthentication, bot_settings: BotSettings, raw: bytes, authorization: Sequence[str]
) -> InboundActivity:
    """Size, then the token, then the activity: :class:`Unauthenticated` or :class:`InvalidActivity`.

    The order is the point: an unauthenticated caller learns nothing about what the bot
    would make of its body (401 whatever it sent), and nothing of the body reaches
    botbuilder's activity model before the token is valid. In deployed mode the
    activity's ``serviceUrl`` — where replies go, with the bot's own token — must be the
    one the channel signed (the token's ``serviceurl`` claim); in local development mode
    (no credentials) it must at least be an http(s) URL, so nothing else is contacted.
    """
    if len(raw) > MAX_ACTIVITY_BYTES:
        raise ActivityTooLarge(f"the body is larger than {MAX_ACTIVITY_BYTES // 1024} KiB")
    body: Any = None
    unreadable: InvalidActivity | None = None
    try:
        body = read_json(raw)
    except InvalidActivity as exc:
        unreadable = exc  # reported only once the caller is known
    result = await authenticate_activity(auth, bot_settings, authorization, routing_hints(body))
    if unreadable is not None:
        raise unreadable
    shape = validate_activity(body)
    if not bot_settings.dev_mode:
        claims = result.claims_identity.claims or {}
        if claims.get(AuthenticationConstants.SERVICE_URL_CLAIM) != shape.service_url:
            raise Unauthenticated("the token's serviceurl claim does not match the activity")
    return InboundActivity(body, shape, activity_from_json(body, shape), result)


def activity_from_json(body: dict[str, Any], shape: ActivityInput) -> Activity:
    """botbuilder's ``Activity`` for a validated body; :class:`InvalidActivity` if it still cannot be.

    Also reads Teams ``channelData`` as the Teams handler will (``TeamsChannelData``), so a
    malformed one is a 400 here rather than a failed turn.
    """
    try:
        activity = Activity().deserialize(body)
        if shape.channel_id == Channels.ms_teams and shape.channel_data is not None:
            TeamsChannelData().deserialize(shape.channel_data)
    except ValueError as exc:  # msrest's DeserializationError
        raise InvalidActivity(f"the activity is malformed: {_first_line(exc)}") from exc
    return activity


def claims_identity(
    claims: dict[str, Any], is_authenticated: bool, authentication_type: str | None
) -> ClaimsIdentity:
    """A validated identity, rebuilt from what was recorded of it (e.g. on the turn queue)."""
    return ClaimsIdentity(dict(claims), is_authenticated, authentication_type)


def authenticated_request(
    auth: BotFrameworkAuthentication, identity: ClaimsIdentity, audience: str | None, caller_id: str | None
) -> AuthenticateRequestResult:
    """botbuilder's result of authenticating a request, for a request authenticated earlier."""
    result = AuthenticateRequestResult()
    result.claims_identity = identity
    result.audience = audience
    result.caller_id = caller_id
    result.connector_factory = auth.create_connector_factory(identity)
    return result


def _first_line(exc: Exception) -> str:
    text = str(exc.args[0] if exc.args else exc)
    return text.splitlines()[0][:160] if text else type(exc).__name__


@dataclass(frozen=True)
class Answer:
    """An HTTP answer either host can send as it is."""

    status: int
    body: Any = None
    """JSON-serialisable, or None for an empty body."""
    headers: dict[str, str] = field(default_factory=dict)


def refusal(exc: Unauthenticated | InvalidActivity) -> Answer:
    """The answer to a refused request: 401, 413 or 400 with a short reason (never a trace)."""
    if isinstance(exc, Unauthenticated):
        return Answer(
            401,
            {"error": "unauthorized", "message": "missing or invalid Bot Framework token"},
            {"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )
    if isinstance(exc, ActivityTooLarge):
        return Answer(413, {"error": "too_large", "message": exc.reason})
    return Answer(400, {"error": "bad_request", "message": exc.reason})


async def run_inline(runtime: BotRuntime, inbound: InboundActivity) -> Answer:
    """Run the activity's turn now; the answer carries an invoke's response body.

    Serialises invoke responses itself: botbuilder's msrest serialiser rejects plain dict
    bodies, and botbuilder's own adaptive-card error responses carry an ``Exception`` as
    their value, which no serialiser can write.
    """
    invoke = await runtime.adapter.process_activity(inbound.auth, inbound.activity, runtime.bot.on_turn)
    if invoke is None:
        return Answer(200)
    payload = invoke.body
    if isinstance(payload, AdaptiveCardInvokeResponse) and isinstance(payload.value, Exception):
        code, message, *_ = [*map(str, payload.value.args), "", ""]
        payload = {
            "statusCode": int(payload.status_code or invoke.status or 500),
            "type": payload.type,
            "value": {"code": code, "message": message},
        }
    elif hasattr(payload, "serialize"):
        payload = payload.serialize()
    return Answer(int(invoke.status or 200), payload)


async def process_request(runtime: BotRuntime, raw: bytes, authorization: Sequence[str]) -> Answer:
    """The dev server's whole request: authenticate, validate, run the turn inline."""
    try:
        inbound = await accept_activity(
            runtime.adapter.bot_framework_authentication, runtime.bot_settings, raw, authorization
        )
    except (Unauthenticated, InvalidActivity) as exc:
        log_refusal(exc)
        return refusal(exc)
    return await run_inline(runtime, inbound)


def log_refusal(exc: Unauthenticated | InvalidActivity) -> None:
    """One line, no trace: refusals are the caller's problem, not ours."""
    kind = "unauthenticated" if isinstance(exc, Unauthenticated) else "malformed"
    # The reason may quote the caller's input (a claim, a key): one line, printable only.
    reason = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(exc)[:300])
    logger.warning("refused request (%s): %s", kind, reason)
