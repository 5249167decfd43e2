"""The Function App's process-wide host: the bot runtime and the turn queue, opened once.

Azure Functions runs every ``async def`` function of a worker process on one event
loop, so the runtime (database pool, checkpointer, adapter) is created lazily on the
first invocation and kept for the life of the process. Tests call :func:`reset_host`
between cases (after changing the environment).

Queue messages are base64 text (``TextBase64EncodePolicy``): the Functions queue
trigger expects base64 by default, and ``host.json`` says so (``messageEncoding``).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass

from azure.core.exceptions import ResourceExistsError
from azure.storage.queue import TextBase64DecodePolicy, TextBase64EncodePolicy
from azure.storage.queue.aio import QueueClient

from bot.runtime import BotRuntime, open_runtime
from bot.settings import BotSettings
from copilot.errors import ConfigurationError
from copilot.settings import Settings

logger = logging.getLogger(__name__)


@dataclass
class FunctionsHost:
    """What every function of this app shares."""

    runtime: BotRuntime
    queue: QueueClient
    """The turn queue (``COPILOT_TURN_QUEUE`` in ``AzureWebJobsStorage``)."""
    stack: AsyncExitStack
    loop: asyncio.AbstractEventLoop


_host: FunctionsHost | None = None
_lock: asyncio.Lock | None = None


def turn_queue_client(bot_settings: BotSettings) -> QueueClient:
    """An async client for the turn queue, speaking the trigger's base64 encoding."""
    return QueueClient.from_connection_string(
        bot_settings.queue_connection,
        bot_settings.queue_name,
        message_encode_policy=TextBase64EncodePolicy(),
        message_decode_policy=TextBase64DecodePolicy(),
    )


async def _open_host() -> FunctionsHost:
    settings, bot_settings = Settings(), BotSettings()
    if bot_settings.dev_mode:
        # Local development mode accepts unauthenticated activities: never on Azure.
        raise ConfigurationError(
            "MicrosoftAppId is not set: the Function App refuses to run without bot credentials"
        )
    stack = AsyncExitStack()
    try:
        runtime = await stack.enter_async_context(open_runtime(settings, bot_settings))
        queue = await stack.enter_async_context(turn_queue_client(bot_settings))
        with suppress(ResourceExistsError):
            await queue.create_queue()
    except BaseException:
        await stack.aclose()
        raise
    logger.info("function host ready (turn queue %s)", bot_settings.queue_name)
    return FunctionsHost(runtime, queue, stack, asyncio.get_running_loop())


async def get_host() -> FunctionsHost:
    """The process's host, opened on first use."""
    global _host, _lock
    loop = asyncio.get_running_loop()
    if _host is not None and _host.loop is loop:
        return _host
    if _lock is None:
        _lock = asyncio.Lock()
    async with _lock:
        if _host is not None and _host.loop is not loop:
            # Only tests switch event loops; a runtime bound to another loop is unusable.
            logger.warning("function host was opened on another event loop; reopening")
            _host = None
        if _host is None:
            _host = await _open_host()
        return _host


async def reset_host() -> None:
    """Close the host (pool, queue client) so the next call opens a fresh one (tests)."""
    global _host, _lock
    host, _host, _lock = _host, None, None
    if host is not None and host.loop is asyncio.get_running_loop():
        await host.stack.aclose()
