"""Reply latency and throughput through the bot dev server, against a minimal echo bot.

Both run as subprocesses (``python -m bot serve`` in local development mode, with the
product's offline model; ``python -m bench.echo_bot``) and reply to the bench's own
stand-in Bot Connector. N Teams-shaped messages are posted at once, each in its own 1:1
conversation of the bench's rep; a message's latency is its POST round trip (both servers
run the turn inside the request, replies included), a batch's wall time / N is the inverse
of turns per second. Batches alternate: ours, echo, ours, echo...
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from aiohttp import web

from bench.environment import BenchEnvironment
from bench.load import Batch, LoadFailed, alternate, post_batch
from bench.processes import http_server
from bench.sandbox import free_port
from bench.stats import Comparison, Progress


@dataclass
class Connector:
    """A stand-in Bot Connector: accepts replies and updates, counts them per conversation,
    and notes when each conversation's first ``message`` activity (the answer, not a typing
    or progress update) arrived, for a conversation :meth:`expect` was called for."""

    url: str = ""
    replies: Counter[str] = field(default_factory=Counter)
    first_message: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The first ``message`` activity of each awaited conversation."""
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _runner: web.AppRunner | None = None
    _waiting: dict[str, asyncio.Future[float]] = field(default_factory=dict)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v3/conversations/{conversation}/activities", self._send)
        app.router.add_post("/v3/conversations/{conversation}/activities/{activity}", self._send)
        app.router.add_put("/v3/conversations/{conversation}/activities/{activity}", self._send)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}/"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def expect(self, conversation: str) -> asyncio.Future[float]:
        """Resolves to the ``time.perf_counter()`` at which ``conversation``'s first message arrives."""
        waiting: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiting[conversation] = waiting
        return waiting

    def forget(self, conversation: str) -> None:
        self._waiting.pop(conversation, None)
        self.first_message.pop(conversation, None)

    async def _send(self, request: web.Request) -> web.Response:
        arrived = time.perf_counter()
        body = await request.read()
        conversation = request.match_info["conversation"]
        self.replies[conversation] += 1
        waiting = self._waiting.get(conversation)
        if waiting is not None and not waiting.done():
            try:
                activity = json.loads(body)
            except ValueError:
                activity = {}
            if isinstance(activity, dict) and activity.get("type") == "message":
                self.first_message[conversation] = activity
                waiting.set_result(arrived)
        return web.json_response({"id": f"act-{next(self._ids)}"})


def teams_activity(env: BenchEnvironment, service_url: str, text: str) -> dict[str, Any]:
    aad, tenant = env.identity.aad_object_id, env.identity.tenant_id
    return {
        "type": "message",
        "id": uuid.uuid4().hex,
        "channelId": "msteams",
        "serviceUrl": service_url,
        "from": {"id": f"29:{aad}", "name": "Bench rep", "aadObjectId": aad},
        "conversation": {
            "id": f"bench-{uuid.uuid4().hex}",
            "conversationType": "personal",
            "tenantId": tenant,
        },
        "recipient": {"id": "28:bot", "name": "bot"},
        "channelData": {"tenant": {"id": tenant}},
        "text": text,
    }


async def bot_replies(
    env: BenchEnvironment, *, rounds: dict[int, int], progress: Progress
) -> list[Comparison]:
    """For each concurrency N (``rounds``: N → batches per side): latency and wall time per turn."""
    connector = Connector()
    await connector.start()
    bot_port, echo_port = free_port(), free_port()
    bot_url = f"http://127.0.0.1:{bot_port}/api/messages"
    echo_url = f"http://127.0.0.1:{echo_port}/api/messages"
    question = env.scenarios.bot_question
    results: list[Comparison] = []
    try:
        async with (
            http_server(
                ["-m", "bot", "serve", "--port", str(bot_port)],
                variables=env.variables,
                health_url=f"http://127.0.0.1:{bot_port}/api/health",
                log_path=env.work / "bot.log",
            ),
            http_server(
                ["-m", "bench.echo_bot", "--port", str(echo_port)],
                variables=env.variables,
                health_url=f"http://127.0.0.1:{echo_port}/api/health",
                log_path=env.work / "echo.log",
            ),
            httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=200)) as client,
        ):

            def replied(body: dict[str, Any], _: httpx.Response) -> None:
                if connector.replies[body["conversation"]["id"]] == 0:
                    raise LoadFailed("the bot answered without replying")

            def batch(url: str) -> Batch:
                async def run(n: int) -> tuple[list[float], float]:
                    bodies = [teams_activity(env, connector.url, question) for _ in range(n)]
                    return await post_batch(client, url, bodies, check=replied)

                return run

            ours, echo = batch(bot_url), batch(echo_url)
            # Warm-up: the copilot's first turn signs the rep in and compiles the agent.
            await ours(1)
            await echo(1)
            results = await alternate(
                "bot reply",
                "reply (dev server, turn inline, offline model)",
                "minimal botbuilder echo bot",
                ours,
                echo,
                rounds=rounds,
                progress=progress,
            )
    finally:
        await connector.stop()
    return results
