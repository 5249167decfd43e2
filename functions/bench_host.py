"""A stand-in for the Azure Functions host's HTTP side, for the bench's ack latency.

``python -m functions.bench_host --port N`` imports ``function_app`` as the host
indexes it and serves ``POST /api/messages`` by calling the registered ``messages``
function with an ``azure.functions.HttpRequest``, as the Python worker does.
``--bare`` serves a bare HTTP trigger instead: it enqueues the body on the same queue
(``AzureWebJobsStorage`` / ``COPILOT_TURN_QUEUE``) and answers 202, nothing else.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any, cast

import azure.functions as func
from aiohttp import web

Handler = Callable[[func.HttpRequest], Awaitable[func.HttpResponse]]


def _app_function(name: str) -> Handler:
    import function_app

    for function in function_app.app.get_functions():
        if function.get_function_name() == name:
            return cast(Handler, function.get_user_function())
    raise LookupError(f"function_app registers no function {name!r}")


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
    parser = argparse.ArgumentParser(prog="python -m functions.bench_host")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bare", action="store_true", help="a bare enqueueing trigger instead of the app's")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    function = _bare_function() if args.bare else _app_function("messages")
    web.run_app(build_app(function), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
