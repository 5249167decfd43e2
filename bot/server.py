"""The local dev server: aiohttp hosting the same bot, turns run inline.

For the Microsoft 365 Agents Playground or any Bot Framework client; replies go to the
activity's ``serviceUrl``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

from aiohttp import web

from bot.activity_input import MAX_ACTIVITY_BYTES, ActivityTooLarge
from bot.runtime import Answer, BotRuntime, open_runtime, process_request, refusal
from bot.settings import BotSettings
from copilot.settings import Settings

logger = logging.getLogger(__name__)
RUNTIME = web.AppKey("runtime", BotRuntime)


def build_app(settings: Settings, bot_settings: BotSettings) -> web.Application:
    """The aiohttp app: ``POST /api/messages`` and ``GET /api/health``."""
    # aiohttp refuses larger bodies itself (413) before reading them.
    app = web.Application(client_max_size=MAX_ACTIVITY_BYTES)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            app[RUNTIME] = await stack.enter_async_context(open_runtime(settings, bot_settings))
            yield

    async def messages(request: web.Request) -> web.StreamResponse:
        runtime = app[RUNTIME]
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _respond(
                refusal(ActivityTooLarge(f"the body is larger than {MAX_ACTIVITY_BYTES // 1024} KiB"))
            )
        try:
            answer = await process_request(runtime, raw, request.headers.getall("Authorization", []))
        except Exception:
            # The HTTP edge: never a stack trace to the caller, always a reference in the log.
            ref = uuid.uuid4().hex[:8]
            logger.exception("POST /api/messages failed (ref %s)", ref)
            answer = Answer(500, {"error": "internal_error", "ref": ref})
        return _respond(answer)

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app.cleanup_ctx.append(lifecycle)
    app.router.add_post("/api/messages", messages)
    app.router.add_get("/api/health", health)
    return app


def _respond(answer: Answer) -> web.Response:
    if answer.body is None:
        return web.Response(status=answer.status, headers=answer.headers)
    return web.json_response(answer.body, status=answer.status, headers=answer.headers)


def serve(port: int) -> None:
    """Run the dev server until Ctrl-C."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # azure-identity logs every token request's headers at INFO.
    logging.getLogger("azure").setLevel(logging.WARNING)
    app = build_app(Settings(), BotSettings())
    print(f"Bot dev server on http://localhost:{port}/api/messages", flush=True)
    web.run_app(app, host="127.0.0.1", port=port, print=None)
