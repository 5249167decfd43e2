"""Wiring: the copilot service, rep tokens, the adapter and the bot, for any host."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import jwt
from botbuilder.integration.aiohttp import CloudAdapter, ConfigurationBotFrameworkAuthentication
from botbuilder.schema import Activity
from botframework.connector.auth import AuthenticateRequestResult

from bot.credentials import AzureIdentityCredentialsFactory
from bot.handler import CopilotBot, on_turn_error
from bot.rep_tokens import DevRepTokens, RepTokens, SsoRepTokens
from bot.settings import BotSettings
from copilot.errors import ConfigurationError
from copilot.runner import CopilotService, open_service
from copilot.settings import Settings

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
    """Channel → bot token validation (OpenID metadata configurable) and bot → channel credentials."""
    return ConfigurationBotFrameworkAuthentication(
        bot_settings.botbuilder_configuration(),
        credentials_factory=AzureIdentityCredentialsFactory(bot_settings),
    )


@asynccontextmanager
async def open_runtime(settings: Settings, bot_settings: BotSettings) -> AsyncIterator[BotRuntime]:
    """Everything a host (dev server, Azure Functions) needs to run turns."""
    if bot_settings.dev_mode:
        logger.warning(DEV_MODE_WARNING)
    async with open_service(settings) as service:
        reps: RepTokens
        if bot_settings.dev_mode:
            reps = DevRepTokens(settings)
        else:
            key = bot_settings.token_encryption_key
            if key is None:
                raise ConfigurationError(
                    "COPILOT_TOKEN_ENCRYPTION_KEY is required when MicrosoftAppId is set"
                )
            reps = SsoRepTokens(settings, service.pool, key.get_secret_value())
        adapter = CloudAdapter(build_authentication(bot_settings))
        adapter.on_turn_error = on_turn_error
        bot = CopilotBot(service, reps, bot_settings)
        yield BotRuntime(settings, bot_settings, service, adapter, bot, reps)


class Unauthenticated(Exception):
    """The request's Bot Framework token is missing or not valid for this bot and activity."""


async def authenticate_activity(
    adapter: CloudAdapter, activity: Activity, auth_header: str | None
) -> AuthenticateRequestResult:
    """botbuilder's channel-token validation, with every token failure as :class:`Unauthenticated`.

    botbuilder signals bad tokens in several ways: ``PermissionError`` (no token, wrong
    issuer/audience, serviceurl mismatch), PyJWT errors (expired, bad signature,
    malformed), ``IndexError``/``KeyError`` (key id not published) and a bare
    ``Exception`` (key not endorsed for the channel, algorithm not allowed). Anything
    else (e.g. the metadata endpoint unreachable) is our failure, not the caller's.
    """
    auth = adapter.bot_framework_authentication
    try:
        return await auth.authenticate_request(activity, auth_header or None)
    except (PermissionError, jwt.PyJWTError, LookupError) as exc:
        raise Unauthenticated(f"{type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        if type(exc) is Exception:
            raise Unauthenticated(f"{exc}") from exc
        raise


async def process_inline(
    runtime: BotRuntime, body: dict[str, Any], auth_header: str | None
) -> tuple[int, Any]:
    """Authenticate and run one activity now; returns (HTTP status, invoke response body).

    Reads the header as None when absent (botbuilder's aiohttp helper passes "" instead,
    which breaks its own no-credentials path) and serialises invoke responses itself
    (botbuilder's msrest serialiser rejects plain dict bodies).
    """
    activity = Activity().deserialize(body)
    try:
        authenticated = await authenticate_activity(runtime.adapter, activity, auth_header)
    except Unauthenticated:
        return 401, {"error": "unauthorized"}
    invoke = await runtime.adapter.process_activity(authenticated, activity, runtime.bot.on_turn)
    if invoke is None:
        return 200, None
    payload = invoke.body
    if hasattr(payload, "serialize"):
        payload = payload.serialize()
    return int(invoke.status), payload
