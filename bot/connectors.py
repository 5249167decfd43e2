"""Bot Connector clients reused across turns, and the user-token client made only when used.

botbuilder's ``CloudAdapter`` builds, for every activity, a new ``ConnectorClient`` (for
the replies) and a new ``TokenApiClient`` (for the sign-in APIs, which a queued question
never calls). Each is a msrest client whose retry policy alone costs a few milliseconds
of CPU to construct (it builds its status-code list by scanning a 500-item list), and each
``ConnectorClient`` opens its own HTTP session, so every turn also paid a new connection
(a TLS handshake with the real Bot Connector) for its replies.

:class:`ReusingBotFrameworkAuthentication` is botbuilder's configuration-driven
authentication with two changes, and nothing else:

* its connector factories hand out one ``ConnectorClient`` per app id, service URL and
  audience for the process (what botbuilder's older ``BotFrameworkAdapter`` did with its
  connector client cache); the app-only credentials are the factory's own, refreshed
  (off the event loop) before every hand-out exactly as for a new client;
* its user-token client is built on first use, not on every activity.

Each reused connector client sends over the process's one aiohttp session, on the event
loop (``bot.connector_http``: msrest's pipeline, policies and retry rules kept, only the
sender changed), instead of msrest's default ``requests`` sender run in a thread per
request. The session is made on the running loop with the first client and closed by
:meth:`ReusingBotFrameworkAuthentication.close` (``bot.runtime.open_runtime`` calls it
when the runtime stops); a turn after that opens a new one.

The clients carry the bot's own app-only credentials, the same for every rep: nothing of
a rep is cached here.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from botbuilder.integration.aiohttp import ConfigurationBotFrameworkAuthentication
from botframework.connector.auth import (
    AuthenticateRequestResult,
    AuthenticationConstants,
    ClaimsIdentity,
    ConnectorFactory,
    UserTokenClient,
)

from bot.connector_http import ConnectorHttp, aiohttp_pipeline

if TYPE_CHECKING:
    from botframework.connector.aio import ConnectorClient

logger = logging.getLogger(__name__)

CONNECTORS_KEPT = 64
"""Connector clients a process keeps (one per service URL and audience; Teams has a few)."""


class _Connectors:
    """The process's connector clients, least recently used dropped beyond ``CONNECTORS_KEPT``,
    and the HTTP transport (one aiohttp session) they all send with."""

    def __init__(self) -> None:
        self._clients: OrderedDict[tuple[str, str, str | None], ConnectorClient] = OrderedDict()
        self._http = ConnectorHttp()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _on_this_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # Only tests run a process on several loops; a session is bound to the loop it
            # was made on, so clients sending with another loop's session start over.
            if self._loop is not None:
                logger.warning("connector clients were made on another event loop; making new ones")
            self._clients.clear()
            self._http = ConnectorHttp()
            self._loop = loop

    def get(self, key: tuple[str, str, str | None]) -> ConnectorClient | None:
        self._on_this_loop()
        client = self._clients.get(key)
        if client is not None:
            self._clients.move_to_end(key)
        return client

    def put(self, key: tuple[str, str, str | None], client: ConnectorClient) -> None:
        self._on_this_loop()
        client.config.pipeline = aiohttp_pipeline(client.config, self._http)
        self._clients[key] = client
        while len(self._clients) > CONNECTORS_KEPT:
            self._clients.popitem(last=False)

    async def close(self) -> None:
        """Forget the clients and close their session (the runtime is stopping)."""
        self._clients.clear()
        await self._http.close()


class _ReusingConnectorFactory(ConnectorFactory):
    def __init__(self, inner: ConnectorFactory, app_id: str, connectors: _Connectors):
        self._inner = inner
        self._app_id = app_id
        self._connectors = connectors

    async def create(self, service_url: str, audience: str | None = None) -> ConnectorClient:
        key = (self._app_id, service_url, audience)
        client = self._connectors.get(key)
        if client is None:
            client = await self._inner.create(service_url, audience)
            self._connectors.put(key, client)
            return client
        refresh = getattr(client.config.credentials, "refresh", None)
        if callable(refresh):
            # bot.credentials: a token close to expiry is fetched again, off the loop.
            await refresh()
        return client


class _LazyUserTokenClient(UserTokenClient):
    """botbuilder's user-token client for one activity, built when first called."""

    def __init__(self, auth: ConfigurationBotFrameworkAuthentication, identity: ClaimsIdentity):
        super().__init__()
        self._auth = auth
        self._identity = identity
        self._client: UserTokenClient | None = None

    async def _real(self) -> UserTokenClient:
        if self._client is None:
            self._client = await ConfigurationBotFrameworkAuthentication.create_user_token_client(
                self._auth, self._identity
            )
        return self._client

    async def get_user_token(
        self, user_id: str, connection_name: str, channel_id: str, magic_code: str
    ) -> Any:
        return await (await self._real()).get_user_token(user_id, connection_name, channel_id, magic_code)

    async def get_sign_in_resource(self, connection_name: str, activity: Any, final_redirect: str) -> Any:
        return await (await self._real()).get_sign_in_resource(connection_name, activity, final_redirect)

    async def sign_out_user(self, user_id: str, connection_name: str, channel_id: str) -> Any:
        return await (await self._real()).sign_out_user(user_id, connection_name, channel_id)

    async def get_token_status(self, user_id: str, channel_id: str, include_filter: str) -> Any:
        return await (await self._real()).get_token_status(user_id, channel_id, include_filter)

    async def get_aad_tokens(
        self, user_id: str, connection_name: str, resource_urls: list[str], channel_id: str
    ) -> Any:
        return await (await self._real()).get_aad_tokens(user_id, connection_name, resource_urls, channel_id)

    async def exchange_token(
        self, user_id: str, connection_name: str, channel_id: str, exchange_request: Any
    ) -> Any:
        return await (await self._real()).exchange_token(
            user_id, connection_name, channel_id, exchange_request
        )


class ReusingBotFrameworkAuthentication(ConfigurationBotFrameworkAuthentication):
    """botbuilder's configuration authentication, reusing connector clients (module docstring)."""

    def __init__(self, configuration: Any, **kwargs: Any):
        super().__init__(configuration, **kwargs)
        self._connectors = _Connectors()

    def _reusing(self, factory: ConnectorFactory, identity: ClaimsIdentity | None) -> ConnectorFactory:
        # The app id botbuilder's own factory sends as (its _BuiltinBotFrameworkAuthentication.get_app_id).
        claims = (identity.claims if identity is not None else None) or {}
        app_id = claims.get(AuthenticationConstants.AUDIENCE_CLAIM) or claims.get(
            AuthenticationConstants.APP_ID_CLAIM
        )
        return _ReusingConnectorFactory(factory, str(app_id or ""), self._connectors)

    async def authenticate_request(self, activity: Any, auth_header: str) -> AuthenticateRequestResult:
        result = await super().authenticate_request(activity, auth_header)
        if result.connector_factory is not None:
            result.connector_factory = self._reusing(result.connector_factory, result.claims_identity)
        return result

    def create_connector_factory(self, claims_identity: ClaimsIdentity) -> ConnectorFactory:
        return self._reusing(super().create_connector_factory(claims_identity), claims_identity)

    async def create_user_token_client(self, claims_identity: ClaimsIdentity) -> UserTokenClient:
        return _LazyUserTokenClient(self, claims_identity)

    async def close(self) -> None:
        """Close the connector clients' HTTP session; a later turn would open a new one."""
        await self._connectors.close()
