"""A Bot-Connector-shaped HTTP endpoint that records what the bot sends (Teams stand-in).

Speaks the Bot Connector REST protocol the bot uses: ``POST
/v3/conversations/{id}/activities[/{replyToId}]`` (send / reply) and ``PUT
/v3/conversations/{id}/activities/{activityId}`` (update in place). ``fail_next`` queues error responses (e.g. Teams' throttling: 429 with
``Retry-After``) given, in order, to the next requests instead of accepting them.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Recorded:
    method: str
    conversation_id: str
    activity_id: str | None
    body: dict[str, Any]
    authorization: str | None
    at: float | None = None
    """When it arrived, by the connector's ``clock`` (if the test gave it one)."""


@dataclass
class FakeConnector:
    calls: list[Recorded] = field(default_factory=list)
    url: str = ""
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _runner: web.AppRunner | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    fail_next: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    """(status, headers) to answer the next requests with, before anything is recorded."""
    failed: list[tuple[str, int, str | None]] = field(default_factory=list)
    """Each request failed so: method, status given, its Authorization header."""
    inbound_delay: float = 0.0
    """Seconds a request takes to arrive (network latency on the way in): a sender that dies
    meanwhile never delivered it, so it is not recorded."""
    lost_in_flight: int = 0
    """Requests whose sender died before they arrived."""
    in_flight: int = 0
    """Requests on their way in right now."""
    clock: Callable[[], float] | None = None
    """Stamps each recorded request's ``at`` (a test's injected time, e.g. ``VirtualTime.now``)."""

    def _injected_failure(self, request: web.Request) -> web.Response | None:
        if not self.fail_next:
            return None
        status, headers = self.fail_next.pop(0)
        self.failed.append((request.method, status, request.headers.get("Authorization")))
        return web.json_response(
            {"error": {"code": "Throttled" if status == 429 else "ServiceError", "message": "try again"}},
            status=status,
            headers=headers,
        )

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v3/conversations/{conversation}/activities", self._send)
        app.router.add_post("/v3/conversations/{conversation}/activities/{activity}", self._send)
        app.router.add_put("/v3/conversations/{conversation}/activities/{activity}", self._update)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _arrived(self, request: web.Request) -> bool:
        if self.inbound_delay:
            self.in_flight += 1
            try:
                await asyncio.sleep(self.inbound_delay)
            finally:
                self.in_flight -= 1
            if request.transport is None or request.transport.is_closing():
                self.lost_in_flight += 1
                return False
        return True

    async def _send(self, request: web.Request) -> web.Response:
        body = await request.json()
        if not await self._arrived(request):
            return web.Response(status=499)
        if (failure := self._injected_failure(request)) is not None:
            return failure
        activity_id = f"act-{next(self._ids)}"
        self.calls.append(
            Recorded(
                "POST",
                request.match_info["conversation"],
                activity_id,
                body,
                request.headers.get("Authorization"),
                self.clock() if self.clock is not None else None,
            )
        )
        self.changed.set()
        return web.json_response({"id": activity_id})

    async def _update(self, request: web.Request) -> web.Response:
        body = await request.json()
        if (failure := self._injected_failure(request)) is not None:
            return failure
        self.calls.append(
            Recorded(
                "PUT",
                request.match_info["conversation"],
                request.match_info["activity"],
                body,
                request.headers.get("Authorization"),
                self.clock() if self.clock is not None else None,
            )
        )
        self.changed.set()
        return web.json_response({"id": request.match_info["activity"]})

    def messages(self) -> list[Recorded]:
        """Sent message activities (not typing), in order."""
        return [c for c in self.calls if c.method == "POST" and c.body.get("type") == "message"]

    def cards(self, content_kind: str | None = None) -> list[Recorded]:
        """Sent activities that carry an Adaptive Card."""
        return [
            c
            for c in self.messages()
            if any(
                a.get("contentType") == "application/vnd.microsoft.card.adaptive"
                for a in c.body.get("attachments") or []
            )
        ]

    def updates(self) -> list[Recorded]:
        return [c for c in self.calls if c.method == "PUT"]

    def latest_content(self, activity_id: str) -> dict[str, Any]:
        """The Adaptive Card an activity shows now: its latest update, else as it was sent."""
        for call in reversed(self.calls):
            if call.activity_id == activity_id and call.method in ("PUT", "POST"):
                try:
                    return card_of(call)
                except AssertionError:
                    continue
        raise AssertionError(f"no card recorded for activity {activity_id}")


def card_of(recorded: Recorded) -> dict[str, Any]:
    """The Adaptive Card content of a recorded activity."""
    for attachment in recorded.body.get("attachments") or []:
        if attachment.get("contentType") == "application/vnd.microsoft.card.adaptive":
            content: dict[str, Any] = attachment["content"]
            return content
    raise AssertionError("no adaptive card in activity")


def find_actions(card: dict[str, Any], title: str) -> list[dict[str, Any]]:
    """Every action in a card (including inside ShowCards) with this title."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type", "").startswith("Action.") and node.get("title") == title:
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(card)
    return found
