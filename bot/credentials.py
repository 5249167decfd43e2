"""The bot's own identity towards the Bot Connector (app-only), via azure-identity.

botbuilder's default credentials use MSAL with authority validation, which only works
against Microsoft's cloud. This factory plugs azure-identity's ``ClientSecretCredential``
into botbuilder's extension point instead, so the same code talks to Entra ID in
production and to the sandbox identity provider locally. With no app id configured
(local development) replies go out unauthenticated, as the Agents Playground expects.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from botframework.connector.auth import (
    AppCredentials,
    MicrosoftAppCredentials,
    ServiceClientCredentialsFactory,
)

from bot.settings import BotSettings

REFRESH_MARGIN_SECONDS = 300
"""A token this close to its expiry is fetched again (off the event loop) before it is used."""


class AzureIdentityAppCredentials(AppCredentials):
    """Bot Connector credentials whose tokens come from ``ClientSecretCredential``.

    botbuilder asks for the token synchronously (``get_access_token``, from msrest's
    request signing) on the event loop: a network fetch there would stall every turn of
    the process. So the token is fetched in a worker thread by :meth:`refresh`, which the
    factory awaits before handing the credentials out, and ``get_access_token`` returns it
    from memory; it fetches synchronously only if nothing was refreshed (not expected).
    """

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
        self._token: tuple[str, int] | None = None
        self._lock = asyncio.Lock()

    @property
    def _scope(self) -> str:
        return self.oauth_scope if self.oauth_scope.endswith("/.default") else f"{self.oauth_scope}/.default"

    def _fresh(self) -> str | None:
        if self._token is not None and self._token[1] - REFRESH_MARGIN_SECONDS > time.time():
            return self._token[0]
        return None

    async def refresh(self) -> None:
        """Have a token that stays valid for a while, fetched off the event loop if needed."""
        async with self._lock:
            if self._fresh() is None:
                access = await asyncio.to_thread(self._credential.get_token, self._scope)
                self._token = (access.token, int(access.expires_on))

    @property
    def expires_on(self) -> int:
        """When the token :meth:`refresh` fetched expires (epoch seconds; 0 before any)."""
        return self._token[1] if self._token is not None else 0

    def get_access_token(self, force_refresh: bool = False) -> str:
        token = None if force_refresh else self._fresh()
        if token is not None:
            return token
        access = self._credential.get_token(self._scope)
        self._token = (access.token, int(access.expires_on))
        return str(access.token)


class AzureIdentityCredentialsFactory(ServiceClientCredentialsFactory):
    """botbuilder's credential factory, backed by azure-identity (one credential per scope)."""

    def __init__(self, settings: BotSettings):
        self._settings = settings
        self._by_scope: dict[str, AzureIdentityAppCredentials] = {}

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
        # Kept per scope, so its token is reused across turns instead of fetched per turn.
        credentials = self._by_scope.get(oauth_scope)
        if credentials is None:
            credentials = self._by_scope[oauth_scope] = AzureIdentityAppCredentials(
                self._settings, oauth_scope
            )
        await credentials.refresh()
        return credentials
