"""The local dev server: aiohttp hosting the same bot, turns run inline.

For the Microsoft 365 Agents Playground or any Bot Framework client; replies go to the
activity's ``serviceUrl``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

from aiohttp import web

from bot.runtime import BotRuntime, open_runtime, process_inline
from bot.settings import BotSettings
from copilot.settings import Settings

logger = logging.getLogger(__name__)
RUNTIME = web.AppKey("runtime", BotRuntime)


def build_app(settings: Settings, bot_settings: BotSettings) -> web.Application:
    """The aiohttp app: ``POST /api/messages`` and ``GET /api/health``."""
    app = web.Application()

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            app[RUNTIME] = await stack.enter_async_context(open_runtime(settings, bot_settings))
            yield

    async def messages(request: web.Request) -> web.StreamResponse:
        runtime = app[RUNTIME]
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "the body is not a JSON activity"}, status=400)
        status, payload = await process_inline(runtime, body, request.headers.get("Authorization"))
        return (
            web.json_response(payload, status=status) if payload is not None else web.Response(status=status)
        )

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app.cleanup_ctx.append(lifecycle)
    app.router.add_post("/api/messages", messages)
    app.router.add_get("/api/health", health)
    return app


def serve(port: int) -> None:
    """Run the dev server until Ctrl-C."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # azure-identity logs every token request's headers at INFO.
    logging.getLogger("azure").setLevel(logging.WARNING)
    app = build_app(Settings(), BotSettings())
    print(f"Bot dev server on http://localhost:{port}/api/messages", flush=True)
    web.run_app(app, host="127.0.0.1", port=port, print=None)
