"""A stand-in for the Azure Functions host, for the bench's ack and queue-reply latency.

``python -m bench.function_host --port N`` imports ``function_app`` as the host
indexes it and serves ``POST /api/messages`` by calling the registered ``messages``
function with an ``azure.functions.HttpRequest``, as the Python worker does.
``--bare`` serves a bare HTTP trigger instead: it enqueues the body on the same queue
(``AzureWebJobsStorage`` / ``COPILOT_TURN_QUEUE``) and answers 202, nothing else.

``--worker`` is the host's queue side instead: it polls the turn queue (Azurite) and
calls the registered ``turns`` function with an ``azure.functions.QueueMessage`` per
message, with host.json's ``extensions.queues`` settings as the host applies them:
receive up to ``batchSize`` messages, fetch again once no more than
``newBatchThreshold`` are still running (so at most batchSize + newBatchThreshold at
once), poll from 100 ms doubling up to ``maxPollingInterval`` while the queue is empty;
delete a message its function finished, make a failed one visible again after
``visibilityTimeout`` and move it to ``<queue>-poison`` on its ``maxDequeueCount``-th
attempt. Messages are received invisible for 10 minutes, as the host does; unlike the
host it does not renew that (a bench turn takes seconds). ``GET /api/health`` answers
once the app is indexed. ``tests/support/queue_worker.py`` is the tests' fuller version
(leases renewed from a thread, events logged, killed and restarted workers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, cast

import azure.functions as func
from aiohttp import web

from bench.host_json import HOST_JSON, QueueOptions

Handler = Callable[[func.HttpRequest], Awaitable[func.HttpResponse]]
QueueHandler = Callable[[func.QueueMessage], Awaitable[None]]

RECEIVE_VISIBILITY_SECONDS = 600
"""What the Functions host receives queue messages with (10 minutes)."""
MIN_POLLING_INTERVAL = 0.1
"""The host's first poll delay after an empty receive (it doubles up to maxPollingInterval)."""

logger = logging.getLogger("bench.function_host")


def _registered(name: str) -> Any:
    import function_app

    for function in function_app.app.get_functions():
        if function.get_function_name() == name:
            return function
    raise LookupError(f"function_app registers no function {name!r}")


def _app_function(name: str) -> Handler:
    return cast(Handler, _registered(name).get_user_function())


def _bare_function() -> Handler:
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.queue import TextBase64EncodePolicy
    from azure.storage.queue.aio import QueueClient

    queue: QueueClient | None = None

    async def bare(req: func.HttpRequest) -> func.HttpResponse:
        nonlocal queue
        if queue is None:
            queue = QueueClient.from_connection_string(
                os.environ["AzureWebJobsStorage"],  # noqa: SIM112 - the Functions setting's own name
                os.environ["COPILOT_TURN_QUEUE"],
                message_encode_policy=TextBase64EncodePolicy(),
            )
            with suppress(ResourceExistsError):
                await queue.create_queue()
        await queue.send_message(req.get_body().decode())
        return func.HttpResponse(status_code=202)

    return bare


class QueueListener:
    """The host's listener for the ``turns`` queue trigger (see the module docstring)."""

    def __init__(self, function: QueueHandler, queue_name: str, connection: str, options: QueueOptions):
        from azure.storage.queue import TextBase64DecodePolicy, TextBase64EncodePolicy
        from azure.storage.queue.aio import QueueClient

        policies: dict[str, Any] = {
            "message_encode_policy": TextBase64EncodePolicy(),
            "message_decode_policy": TextBase64DecodePolicy(),
        }
        self.function = function
        self.options = options
        self.queue = QueueClient.from_connection_string(connection, queue_name, **policies)
        self.poison = QueueClient.from_connection_string(connection, f"{queue_name}-poison", **policies)
        self.running: set[asyncio.Task[None]] = set()
        self.most_running = 0

    async def run(self) -> None:
        from azure.core.exceptions import ResourceExistsError

        with suppress(ResourceExistsError):
            await self.queue.create_queue()
        delay = MIN_POLLING_INTERVAL
        while True:
            if len(self.running) > self.options.new_batch_threshold:
                await asyncio.wait(self.running, return_when=asyncio.FIRST_COMPLETED)
                continue
            received = [
                m
                async for m in self.queue.receive_messages(
                    messages_per_page=self.options.batch_size,
                    max_messages=self.options.batch_size,
                    visibility_timeout=RECEIVE_VISIBILITY_SECONDS,
                )
            ]
            for message in received:
                task = asyncio.create_task(self._deliver(message))
                self.running.add(task)
                task.add_done_callback(self.running.discard)
            self.most_running = max(self.most_running, len(self.running))
            if received:
                delay = MIN_POLLING_INTERVAL
                continue
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, self.options.max_polling_interval)

    async def _deliver(self, message: Any) -> None:
        from azure.core.exceptions import AzureError, ResourceExistsError
        from azure.functions.queue import QueueMessage  # the worker's, with the host's metadata

        try:
            await self.function(
                QueueMessage(
                    id=message.id,
                    body=str(message.content),
                    dequeue_count=message.dequeue_count,
                    expiration_time=message.expires_on,
                    insertion_time=message.inserted_on,
                    time_next_visible=message.next_visible_on,
                    pop_receipt=message.pop_receipt,
                )
            )
        except Exception:
            logger.exception("turns failed on message %s (attempt %s)", message.id, message.dequeue_count)
            try:
                if message.dequeue_count >= self.options.max_dequeue_count:
                    with suppress(ResourceExistsError):
                        await self.poison.create_queue()
                    await self.poison.send_message(str(message.content))
                    await self.queue.delete_message(message.id, message.pop_receipt)
                else:
                    await self.queue.update_message(
                        message.id,
                        message.pop_receipt,
                        visibility_timeout=int(self.options.visibility_timeout),
                    )
            except AzureError:
                logger.exception("could not hand message %s back", message.id)
            return
        try:
            await self.queue.delete_message(message.id, message.pop_receipt)
        except AzureError:
            logger.exception("could not delete message %s", message.id)

    async def close(self) -> None:
        for task in list(self.running):
            task.cancel()
        await self.queue.close()
        await self.poison.close()


def worker_app(host_json: Path = HOST_JSON) -> web.Application:
    """The queue side: the ``turns`` listener, and ``GET /api/health``."""
    trigger = _registered("turns")
    binding = next(
        b for b in json.loads(trigger.get_function_json())["bindings"] if b.get("type") == "queueTrigger"
    )
    connection = os.environ[str(binding.get("connection") or "AzureWebJobsStorage")]
    listener = QueueListener(
        cast(QueueHandler, trigger.get_user_function()),
        str(binding["queueName"]),
        connection,
        QueueOptions.from_host_json(host_json),
    )

    async def listening(_: web.Application) -> AsyncIterator[None]:
        from functions.host import get_host, reset_host

        assertion = os.environ.get("BENCH_SSO_ASSERTION")
        if assertion:
            # The bench's rep, signed in as a Teams SSO token exchange would leave them.
            from bot.rep_tokens import SsoRepTokens

            reps = (await get_host()).runtime.bot.reps
            if isinstance(reps, SsoRepTokens):
                await reps.save(assertion)
        task = asyncio.create_task(listener.run())
        yield
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        await listener.close()
        await reset_host()

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "most_running": listener.most_running})

    app = web.Application()
    app.router.add_get("/api/health", health)
    app.cleanup_ctx.append(listening)
    return app


def build_app(function: Handler) -> web.Application:
    async def messages(request: web.Request) -> web.Response:
        headers: dict[str, Any] = {k: v for k, v in request.headers.items()}
        req = func.HttpRequest(
            method="POST", url=str(request.url), headers=headers, body=await request.read()
        )
        response = await function(req)
        return web.Response(
            status=response.status_code, body=response.get_body(), headers=dict(response.headers)
        )

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/api/messages", messages)
    app.router.add_get("/api/health", health)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.function_host")
    parser.add_argument("--port", type=int, required=True)
    side = parser.add_mutually_exclusive_group()
    side.add_argument("--bare", action="store_true", help="a bare enqueueing trigger instead of the app's")
    side.add_argument("--worker", action="store_true", help="the turn queue's worker instead of HTTP")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.worker:
        app = worker_app()
    else:
        app = build_app(_bare_function() if args.bare else _app_function("messages"))
    web.run_app(app, host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
