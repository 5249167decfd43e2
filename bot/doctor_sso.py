"""The preflight's ``sso.connection`` check: the Bot Framework token service answers for the
bot's OAuth connection (``COPILOT_SSO_CONNECTION``).

Teams SSO, the fallback sign-in card and the brief timer all go through that connection at the
token service (``OAUTH_URL``). A connection missing on the Azure Bot resource, or named
differently from the setting, fails every rep's sign-in while the rest of the app is healthy.
The check asks the service for the token of a user id nobody has (``GetToken``, with the bot's
own token from ``bot.credentials``), as botbuilder's ``UserTokenClient`` asks: a connection the
service knows answers 404 (no token for that user); one it does not know is refused (400).
"""

from __future__ import annotations

from urllib.parse import urlencode

import httpx

from bot.doctor_credentials import BotConnectorToken
from bot.settings import BotSettings
from copilot.doctor.framework import CheckFailed, CheckSkipped, DoctorContext
from copilot.tls import ssl_context

PROBE_USER = "29:copilot-doctor-probe"
"""A Teams-shaped user id no rep has: the service can hold no token for it."""

TIMEOUT_SECONDS = 10.0


async def sso_connection(ctx: DoctorContext) -> str:
    """The token service knows the bot's OAuth connection (it answers "no token" for a stranger)."""
    settings = ctx.need(BotSettings, "the bot's settings (settings.bot)")
    if settings.dev_mode:
        raise CheckSkipped("local development mode: no OAuth connection")
    bot_token = ctx.need(BotConnectorToken, "the bot's own token (bot.credentials)")
    connection = settings.sso_connection_name
    if not connection.strip():
        raise CheckSkipped("no COPILOT_SSO_CONNECTION to ask about (settings.bot names it)")
    query = urlencode({"userId": PROBE_USER, "connectionName": connection, "channelId": "msteams"})
    url = f"{settings.oauth_url.rstrip('/')}/api/usertoken/GetToken?{query}"
    try:
        verify = ssl_context(settings.connector_ca_bundle or None)
        async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS, verify=verify) as client:
            response = await client.get(url, headers={"Authorization": f"Bearer {bot_token.token}"})
    except httpx.HTTPError as exc:
        raise CheckFailed(
            f"the token service at {settings.oauth_url} did not answer: {type(exc).__name__}: {exc}",
            setting="OAUTH_URL",
            fix="leave OAUTH_URL at https://token.botframework.com (a sovereign cloud has its own) and let "
            "the app reach it",
        ) from exc
    if response.status_code in (200, 404):
        return f"the token service at {settings.oauth_url} answers for the OAuth connection {connection!r}"
    detail = " ".join(response.text.split())[:200]
    if response.status_code in (401, 403):
        raise CheckFailed(
            f"the token service refused the bot's own token (HTTP {response.status_code}): {detail}",
            setting="MicrosoftAppId",
            fix="the Azure Bot resource must use this MicrosoftAppId (Configuration → Microsoft App ID)",
        )
    raise CheckFailed(
        f"the token service does not know the OAuth connection {connection!r} "
        f"(HTTP {response.status_code}): {detail}",
        setting="COPILOT_SSO_CONNECTION",
        fix="add the OAuth connection to the Azure Bot resource (Configuration → OAuth Connection Settings, "
        "Azure Active Directory v2) under exactly this name, or set COPILOT_SSO_CONNECTION to its name "
        "(infra: ssoConnectionName)",
    )
