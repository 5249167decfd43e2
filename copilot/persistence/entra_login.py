"""Entra ID sign-in to Azure Database for PostgreSQL: an access token as the password.

With ``COPILOT_DATABASE_ENTRA_AUTH=true`` the connection string names the managed
identity's database role and carries no password; every new connection asks azure-identity
for a token of the ``ossrdbms-aad`` resource (the managed identity in ``AZURE_CLIENT_ID``,
through ``DefaultAzureCredential``) and logs in with it. Tokens live about an hour and a
connection only needs one to log in, so a token is reused until shortly before it expires.
The pool's own ``max_lifetime`` recycles connections long before the server would care.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from azure.core.credentials_async import AsyncTokenCredential
from azure.core.exceptions import ClientAuthenticationError
from psycopg import AsyncConnection
from psycopg.rows import DictRow

from copilot.errors import DatabaseError
from copilot.settings import Settings

DATABASE_SCOPE = "https://ossrdbms-aad.database.windows.net/.default"
"""The resource every Azure Database for PostgreSQL server accepts tokens for."""
REFRESH_MARGIN_SECONDS = 300


class EntraPassword:
    """The current access token, fetched when missing or about to expire."""

    def __init__(self, credential: AsyncTokenCredential, clock: Any = time.time) -> None:
        self._credential = credential
        self._clock = clock
        self._token: str | None = None
        self._expires_on = 0.0
        self._lock = asyncio.Lock()

    async def get(self) -> str:
        async with self._lock:
            if self._token is None or self._clock() > self._expires_on - REFRESH_MARGIN_SECONDS:
                try:
                    token = await self._credential.get_token(DATABASE_SCOPE)
                except ClientAuthenticationError as exc:  # CredentialUnavailableError is one too
                    raise DatabaseError(
                        f"could not get an Entra token for PostgreSQL (COPILOT_DATABASE_ENTRA_AUTH): {exc}"
                    ) from exc
                self._token, self._expires_on = token.token, float(token.expires_on)
            return self._token


def connection_class(
    settings: Settings, credential: AsyncTokenCredential | None = None
) -> type[AsyncConnection[DictRow]]:
    """``AsyncConnection`` itself, or (Entra sign-in on) a subclass that logs in with a token.

    Its ``connect`` is what the pool and the one-shot connections call, so every path that
    opens a connection gets the same sign-in.
    """
    if not settings.database_entra_auth:
        return AsyncConnection
    if credential is None:
        from azure.identity.aio import DefaultAzureCredential  # only where Entra sign-in is on

        credential = DefaultAzureCredential()
    password = EntraPassword(credential)

    class EntraConnection(AsyncConnection[DictRow]):
        @classmethod
        async def connect(cls, conninfo: str = "", **kwargs: Any) -> EntraConnection:
            kwargs["password"] = await password.get()
            return await super().connect(conninfo, **kwargs)

    return EntraConnection
