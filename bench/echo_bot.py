"""The bot baseline: a minimal botbuilder echo bot on aiohttp, no app credentials.

``python -m bench.echo_bot --port N`` answers every message with its text, through
the activity's ``serviceUrl``, like the copilot's dev server does in local development
mode. Nothing else: no state, no sign-in, no CRM.
"""

from __future__ import annotations

import argparse
import logging
from types import SimpleNamespace

from aiohttp import web
from botbuilder.core import ActivityHandler, MessageFactory, TurnContext
from botbuilder.integration.aiohttp import CloudAdapter, ConfigurationBotFrameworkAuthentication


class EchoBot(ActivityHandler):
    async def on_message_activity(self, turn_context: TurnContext) -> None:
        await turn_context.send_activity(MessageFactory.text(f"echo: {turn_context.activity.text}"))


def build_app() -> web.Application:
    config = SimpleNamespace(APP_ID=None, APP_PASSWORD=None, APP_TYPE="MultiTenant", APP_TENANTID=None)
    adapter = CloudAdapter(ConfigurationBotFrameworkAuthentication(config))
    bot = EchoBot()

    async def messages(request: web.Request) -> web.StreamResponse:
        response = await adapter.process(request, bot)
        return response if response is not None else web.Response(status=201)

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/api/messages", messages)
    app.router.add_get("/api/health", health)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.echo_bot")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    web.run_app(build_app(), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
