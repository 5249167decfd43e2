"""The bot's own identity towards the Bot Connector (app-only), via azure-identity.

botbuilder's default credentials use MSAL with authority validation, which only works
against Microsoft's cloud. This factory plugs azure-identity's ``ClientSecretCredential``
into botbuilder's extension point instead, so the same code talks to Entra ID in
production and to the sandbox identity provider locally. With no app id configured
(local development) replies go out unauthenticated, as the Agents Playground expects.
"""

from __future__ import annotations

from typing import Any

from botframework.connector.auth import (
    AppCredentials,
    MicrosoftAppCredentials,
    ServiceClientCredentialsFactory,
)

from bot.settings import BotSettings


class AzureIdentityAppCredentials(AppCredentials):
    """Bot Connector credentials whose tokens come from ``ClientSecretCredential``."""

    def __init__(self, settings: BotSettings, oauth_scope: str | None):
        # Imported when the bot first sends (a reply), not when the HTTP edge only validates
        # channel tokens: azure-identity adds a fifth of a second to the webhook's cold start.
        from azure.identity import ClientSecretCredential

        super().__init__(
            app_id=settings.microsoft_app_id, oauth_scope=oauth_scope or settings.connector_scope
        )
        kwargs: dict[str, Any] = {}
        if "login.microsoftonline.com" not in settings.connector_authority:
            kwargs["disable_instance_discovery"] = True
        if settings.connector_ca_bundle:
            kwargs["connection_verify"] = settings.connector_ca_bundle
        self._credential = ClientSecretCredential(
            tenant_id=settings.microsoft_app_tenant_id or settings.connector_tenant,
            client_id=settings.microsoft_app_id,
            client_secret=settings.microsoft_app_password.get_secret_value(),
            authority=settings.connector_authority,
            **kwargs,
        )

    def get_access_token(self, force_refresh: bool = False) -> str:
        scope = self.oauth_scope if self.oauth_scope.endswith("/.default") else f"{self.oauth_scope}/.default"
        return str(self._credential.get_token(scope).token)


class AzureIdentityCredentialsFactory(ServiceClientCredentialsFactory):
    """botbuilder's credential factory, backed by azure-identity."""

    def __init__(self, settings: BotSettings):
        self._settings = settings

    async def is_valid_app_id(self, app_id: str) -> bool:
        return bool(self._settings.microsoft_app_id) and app_id == self._settings.microsoft_app_id

    async def is_authentication_disabled(self) -> bool:
        return self._settings.dev_mode

    async def create_credentials(
        self, app_id: str, oauth_scope: str, login_endpoint: str, validate_authority: bool
    ) -> AppCredentials:
        if self._settings.dev_mode:
            return MicrosoftAppCredentials.empty()
        if app_id != self._settings.microsoft_app_id:
            raise PermissionError("invalid app id")
        return AzureIdentityAppCredentials(self._settings, oauth_scope)
