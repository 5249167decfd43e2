"""The bot layer's preflight checks (``python -m copilot doctor``): its settings, as deployed."""

from __future__ import annotations

from cryptography.fernet import Fernet
from pydantic import ValidationError

from bot.doctor_credentials import bot_credentials
from bot.doctor_package import teams_package
from bot.doctor_sso import sso_connection
from bot.settings import BotSettings
from copilot.doctor.framework import Check, CheckFailed, DoctorContext
from copilot.doctor.settings_checks import validation_failure
from copilot.settings import Settings


async def bot_settings(ctx: DoctorContext) -> str:
    """The bot's settings build, with what a deployment needs: app credentials, a token key and the
    OAuth connection (Teams SSO, and the token service the brief timer asks for reps' tokens)."""
    try:
        settings = BotSettings()
    except ValidationError as exc:
        raise validation_failure(exc, "the bot's settings") from exc
    copilot = ctx.need(Settings, "the copilot's settings (settings.copilot)")
    ctx.provide(settings)
    if settings.dev_mode and not copilot.local:
        raise CheckFailed(
            "MicrosoftAppId is not set: the bot would accept unauthenticated requests",
            setting="MicrosoftAppId",
            fix="set MicrosoftAppId (and MicrosoftAppPassword) to the bot's Entra app",
        )
    key = settings.token_encryption_key
    fix = (
        "set COPILOT_TOKEN_ENCRYPTION_KEY to a Fernet key (python -c 'from cryptography.fernet import "
        "Fernet; print(Fernet.generate_key().decode())'), as a Key Vault reference"
    )
    if key is None or not key.get_secret_value().strip():
        if settings.dev_mode:
            return "local development mode (no app credentials)"
        raise CheckFailed(
            "COPILOT_TOKEN_ENCRYPTION_KEY is not set: the reps' SSO tokens cannot be stored",
            setting="COPILOT_TOKEN_ENCRYPTION_KEY",
            fix=fix,
        )
    try:
        Fernet(key.get_secret_value())
    except ValueError as exc:
        raise CheckFailed(
            "COPILOT_TOKEN_ENCRYPTION_KEY is not a Fernet key (32 url-safe base64-encoded bytes)",
            setting="COPILOT_TOKEN_ENCRYPTION_KEY",
            fix=fix,
        ) from exc
    if not settings.sso_connection_name.strip():
        raise CheckFailed(
            "COPILOT_SSO_CONNECTION is not set: reps cannot sign in, and the brief timer gets no "
            "rep's token from the Bot Framework token service",
            setting="COPILOT_SSO_CONNECTION",
            fix="set COPILOT_SSO_CONNECTION to the Azure Bot resource's OAuth connection (infra: ssoConnectionName)",
        )
    return (
        f"bot app {settings.microsoft_app_id}, turn queue {settings.queue_name!r}, token key valid, "
        f"OAuth connection {settings.sso_connection_name!r} at {settings.oauth_url}"
    )


BOT_CHECKS: tuple[Check, ...] = (
    Check("settings.bot", bot_settings),
    Check("bot.credentials", bot_credentials),
    Check("sso.connection", sso_connection),
    Check("teams.package", teams_package),
)
