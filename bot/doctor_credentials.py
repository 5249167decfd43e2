"""The preflight's ``bot.credentials`` check: the bot's app id, tenant and secret get a Bot
Connector token from the authority, exactly as the bot gets one to reply (``bot.credentials``).

Without it every other check passes while Teams shows no reply: a wrong or expired
``MicrosoftAppPassword``, an app id pasted with a newline, or a tenant that is not one are the
commonest real outages, and only the token endpoint tells. The format checks come first, so a
malformed value is named as such rather than as whatever the endpoint makes of it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from azure.core.exceptions import ClientAuthenticationError

from bot.credentials import AzureIdentityAppCredentials
from bot.settings import BotSettings
from copilot.doctor.framework import CheckFailed, CheckSkipped, DoctorContext


@dataclass(frozen=True)
class BotConnectorToken:
    """The bot's own token, which the authority gave (for the checks after ``bot.credentials``)."""

    token: str = field(repr=False)


GUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
TENANT_DOMAIN = re.compile(
    r"^(?=.{4,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$", re.IGNORECASE
)
"""A verified domain standing for the tenant (``contoso.onmicrosoft.com``)."""

APP = "the Entra app registration of the bot (Azure Bot resource → Configuration → Microsoft App ID)"
SECRET_FIX = (
    "create a client secret on {app} (Certificates & secrets), copy its Value (not its Secret ID) into "
    "the vault's microsoft-app-password secret (the template's botClientSecret), then restart the app"
)

# Entra's AADSTS codes on a client-credentials request → (what is wrong, the setting, the fix).
AADSTS: dict[str, tuple[str, str, str]] = {
    "7000215": ("MicrosoftAppPassword is not a client secret of the app", "MicrosoftAppPassword", SECRET_FIX),
    "7000222": ("MicrosoftAppPassword has expired", "MicrosoftAppPassword", SECRET_FIX),
    "700016": (
        "MicrosoftAppId is not an app of the tenant",
        "MicrosoftAppId, MicrosoftAppTenantId",
        "set MicrosoftAppId to {app}, and MicrosoftAppTenantId to the tenant it is registered in",
    ),
    "90002": (
        "MicrosoftAppTenantId names no tenant",
        "MicrosoftAppTenantId",
        "set MicrosoftAppTenantId to the Directory (tenant) ID of the app's tenant",
    ),
    "900023": (
        "MicrosoftAppTenantId is neither a tenant id nor a domain",
        "MicrosoftAppTenantId",
        "set MicrosoftAppTenantId to the Directory (tenant) ID of the app's tenant",
    ),
}


def _format_failure(settings: BotSettings) -> CheckFailed | None:
    """What is malformed in the app id, tenant or secret, before asking the authority."""
    app_id, tenant = settings.microsoft_app_id, settings.microsoft_app_tenant_id
    secret = settings.microsoft_app_password.get_secret_value()
    if app_id != app_id.strip():
        return CheckFailed(
            f"MicrosoftAppId {app_id!r} has whitespace around it (pasted with a newline?)",
            setting="MicrosoftAppId",
            fix=f"set MicrosoftAppId to the GUID alone, as shown on {APP}",
        )
    if not GUID.match(app_id):
        return CheckFailed(
            f"MicrosoftAppId {app_id!r} is not a GUID (an app's client id is)",
            setting="MicrosoftAppId",
            fix=f"set MicrosoftAppId to the Application (client) ID of {APP}, not its name or object id",
        )
    if settings.microsoft_app_type.lower() == "singletenant" and not tenant:
        return CheckFailed(
            "MicrosoftAppTenantId is not set, and a single-tenant bot gets its tokens from its own tenant",
            setting="MicrosoftAppTenantId",
            fix="set MicrosoftAppTenantId to the Directory (tenant) ID of the app's tenant",
        )
    if tenant and (tenant != tenant.strip() or not (GUID.match(tenant) or TENANT_DOMAIN.match(tenant))):
        return CheckFailed(
            f"MicrosoftAppTenantId {tenant!r} is neither a tenant id (GUID) nor a domain",
            setting="MicrosoftAppTenantId",
            fix="set MicrosoftAppTenantId to the Directory (tenant) ID of the app's tenant",
        )
    if not secret:
        return CheckFailed(
            "MicrosoftAppPassword is empty", setting="MicrosoftAppPassword", fix=SECRET_FIX.format(app=APP)
        )
    if secret != secret.strip():
        return CheckFailed(
            "MicrosoftAppPassword has whitespace around it (pasted with a newline?)",
            setting="MicrosoftAppPassword",
            fix=SECRET_FIX.format(app=APP),
        )
    return None


def authority_failure(message: str) -> CheckFailed:
    """The failure for the authority's refusal ``message`` (its ``AADSTS`` code picks the fix)."""
    found = re.search(r"AADSTS(\d+)", message)
    code = found.group(1) if found else None
    if code is None and "authority configuration" in message:
        # MSAL reads the tenant's OpenID metadata before the token endpoint; for a tenant that
        # does not exist that read fails first (Entra answers it with AADSTS90002).
        code = "90002"
    detail = " ".join(message.split())[:240]
    if code in AADSTS:
        what, setting, fix = AADSTS[code]
        return CheckFailed(f"{what}: {detail}", setting=setting, fix=fix.format(app=APP))
    return CheckFailed(
        f"the authority refused the bot's credentials: {detail}",
        setting="MicrosoftAppId, MicrosoftAppPassword, MicrosoftAppTenantId",
        fix=f"compare the three settings with {APP}; BOT_CONNECTOR_AUTHORITY if it is not Entra ID",
    )


async def bot_credentials(ctx: DoctorContext) -> str:
    """The app id, tenant and secret get a Bot Connector token from the authority."""
    settings = ctx.need(BotSettings, "the bot's settings (settings.bot)")
    if settings.dev_mode:
        raise CheckSkipped("local development mode: no app credentials to try")
    malformed = _format_failure(settings)
    if malformed is not None:
        raise malformed
    credentials = AzureIdentityAppCredentials(settings, None)
    try:
        await credentials.refresh()
    except ClientAuthenticationError as exc:
        raise authority_failure(str(exc)) from exc
    ctx.provide(BotConnectorToken(credentials.get_access_token()))
    expires_in = max(0, credentials.expires_on - int(time.time())) // 60
    tenant = settings.microsoft_app_tenant_id or settings.connector_tenant
    return (
        f"app {settings.microsoft_app_id} got a Bot Connector token ({settings.connector_scope}) from "
        f"{settings.connector_authority}/{tenant}, valid {expires_in} min"
    )
