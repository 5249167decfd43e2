"""The Function App's process-wide hosts, opened once: the HTTP edge, and the turn runtime on it.

Azure Functions runs every ``async def`` function of a worker process on one event
loop, so what they share is created lazily on the first invocation and kept for the
life of the process. Tests call :func:`reset_host` between cases (after changing the
environment).

Two layers, because they weigh very differently:

* :class:`FunctionsEdge` (:func:`get_edge`) is what ``POST /api/messages`` needs to
  accept and enqueue an activity: the settings, channel-token validation
  (botbuilder), a database pool for de-duplication (schema checked), the turn queue.
  Nothing of the agent (LangChain, LangGraph, MCP) is imported for it.
* :class:`FunctionsHost` (:func:`get_host`) adds the bot runtime (copilot service,
  rep tokens, adapter, bot) on top of the same edge: the queue triggers, invokes
  answered inline and the retention timer need it. ``bot.runtime.open_runtime`` imports
  the agent stack on that first use.

A worker that serves both therefore holds two pools: the edge's (de-duplication only) and
the copilot service's.

Queue messages are base64 text (``TextBase64EncodePolicy``): the Functions queue
trigger expects base64 by default, and ``host.json`` says so (``messageEncoding``).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from azure.core.exceptions import ResourceExistsError
from azure.identity.aio import ManagedIdentityCredential
from azure.storage.queue import TextBase64DecodePolicy, TextBase64EncodePolicy
from azure.storage.queue.aio import QueueClient

from bot.runtime import BotRuntime, build_authentication, open_runtime, sso_token_key
from bot.settings import BotSettings
from copilot.errors import ConfigurationError
from copilot.persistence.embedded import resolve_database_url
from copilot.persistence.migrations import assert_schema_current
from copilot.persistence.pool import open_pool
from copilot.settings import Settings

if TYPE_CHECKING:  # types only (botbuilder's objects are built in bot/)
    from botframework.connector.auth import BotFrameworkAuthentication

    from bot.conversations import Pool

logger = logging.getLogger(__name__)


@dataclass
class FunctionsEdge:
    """What the HTTP trigger needs to accept and enqueue an activity (no agent)."""

    settings: Settings
    bot_settings: BotSettings
    auth: BotFrameworkAuthentication
    """Channel → bot token validation, and the bot's Bot Connector credentials."""
    pool: Pool
    """For de-duplicating webhook deliveries (``functions.dedupe``)."""
    queue: QueueClient
    """The turn queue (``COPILOT_TURN_QUEUE`` in ``AzureWebJobsStorage``)."""
    stack: AsyncExitStack
    loop: asyncio.AbstractEventLoop


@dataclass
class FunctionsHost:
    """What the turn-running functions of this app share: the edge, plus the bot runtime."""

    edge: FunctionsEdge
    runtime: BotRuntime
    stack: AsyncExitStack
    loop: asyncio.AbstractEventLoop

    @property
    def queue(self) -> QueueClient:
        """The turn queue (the edge's)."""
        return self.edge.queue


_edge: FunctionsEdge | None = None
_host: FunctionsHost | None = None
_lock: asyncio.Lock | None = None

EDGE_POOL_NAME = "edge"


def turn_queue_client(bot_settings: BotSettings) -> QueueClient:
    """An async client for the turn queue, speaking the trigger's base64 encoding."""
    return queue_client(
        bot_settings,
        bot_settings.queue_name,
        message_encode_policy=TextBase64EncodePolicy(),
        message_decode_policy=TextBase64DecodePolicy(),
    )


def queue_client(bot_settings: BotSettings, name: str, **options: Any) -> QueueClient:
    """An async client for queue ``name`` of the app's storage.

    With identity-based storage (``AzureWebJobsStorage__queueServiceUri``, shared keys off)
    it signs in with the managed identity, like the host's own queue trigger; otherwise it
    uses the connection string (Azurite locally). ``ValueError`` for a malformed one.
    """
    if bot_settings.queue_service_uri:
        credential = ManagedIdentityCredential(client_id=bot_settings.storage_client_id)
        return QueueClient(bot_settings.queue_service_uri, name, credential=credential, **options)
    return QueueClient.from_connection_string(bot_settings.queue_connection, name, **options)


async def _open_edge() -> FunctionsEdge:
    settings, bot_settings = Settings(), BotSettings()
    if bot_settings.dev_mode:
        # Local development mode accepts unauthenticated activities: never on Azure.
        raise ConfigurationError(
            "MicrosoftAppId is not set: the Function App refuses to run without bot credentials"
        )
    # The runtime needs it too: checked here so that, as before, a deployment without it
    # fails on its first webhook rather than only in the turn.
    sso_token_key(bot_settings)
    auth = build_authentication(bot_settings)
    stack = AsyncExitStack()
    try:
        pool = await open_pool(resolve_database_url(settings), settings, name=EDGE_POOL_NAME)
        stack.push_async_callback(pool.close)
        async with pool.connection() as conn:
            await assert_schema_current(conn)
        queue = await stack.enter_async_context(turn_queue_client(bot_settings))
        with suppress(ResourceExistsError):
            await queue.create_queue()
    except BaseException:
        await stack.aclose()
        raise
    logger.info("function edge ready (turn queue %s)", bot_settings.queue_name)
    return FunctionsEdge(settings, bot_settings, auth, pool, queue, stack, asyncio.get_running_loop())


async def _open_host(edge: FunctionsEdge) -> FunctionsHost:
    stack = AsyncExitStack()
    try:
        runtime = await stack.enter_async_context(
            open_runtime(edge.settings, edge.bot_settings, authentication=edge.auth)
        )
    except BaseException:
        await stack.aclose()
        raise
    logger.info("function host ready (bot runtime on the edge)")
    return FunctionsHost(edge, runtime, stack, asyncio.get_running_loop())


def _lock_for_this_loop() -> asyncio.Lock:
    global _edge, _host, _lock
    loop = asyncio.get_running_loop()
    if _edge is not None and _edge.loop is not loop:
        # Only tests switch event loops; a pool or client bound to another loop is unusable.
        logger.warning("function host was opened on another event loop; reopening")
        _edge = _host = _lock = None
    if _lock is None:
        _lock = asyncio.Lock()
    return _lock


async def _edge_locked() -> FunctionsEdge:
    global _edge
    if _edge is None:
        _edge = await _open_edge()
    return _edge


async def get_edge() -> FunctionsEdge:
    """The process's HTTP edge, opened on first use (imports nothing of the agent)."""
    loop = asyncio.get_running_loop()
    if _edge is not None and _edge.loop is loop:
        return _edge
    async with _lock_for_this_loop():
        return await _edge_locked()


async def get_host() -> FunctionsHost:
    """The process's host (the edge and the bot runtime), opened on first use."""
    global _host
    loop = asyncio.get_running_loop()
    if _host is not None and _host.loop is loop:
        return _host
    async with _lock_for_this_loop():
        if _host is None:
            _host = await _open_host(await _edge_locked())
        return _host


async def reset_host() -> None:
    """Close the host and the edge (runtime, pools, queue client) so the next call opens fresh ones (tests)."""
    global _edge, _host, _lock
    edge, host = _edge, _host
    _edge, _host, _lock = None, None, None
    loop = asyncio.get_running_loop()
    if host is not None and host.loop is loop:
        await host.stack.aclose()
    if edge is not None and edge.loop is loop:
        await edge.stack.aclose()
