"""A recording pass-through in front of an MCP streamable-HTTP server (the sandbox CRM).

Point ``CRM_MCP_URL`` at :attr:`McpRecorder.mcp_url`; every request is forwarded as it
is (headers, body, streamed response) and each JSON-RPC ``tools/call`` is recorded when
it arrives and when its response has been passed back. A test that wants to *see* calls
overlap asks :meth:`McpRecorder.gate` to hold arriving calls until a number of them are
in flight together: calls made one after another can never all be in flight at once, so
the recorded order, not a clock, tells whether they ran concurrently. (A held call is
released anyway after ``give_up_seconds``, so a sequential caller fails its assertion
instead of hanging.)
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from tests.support.threaded_server import ThreadedServer

_HOP_BY_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


@dataclass(frozen=True)
class ToolEvent:
    kind: Literal["start", "end"]
    tool: str
    request_id: Any


class _Gate:
    def __init__(self, expected: int, give_up_seconds: float):
        self.expected = expected
        self.give_up_seconds = give_up_seconds
        self.arrived = 0
        self.open = asyncio.Event()


class McpRecorder:
    """``with McpRecorder(upstream_mcp_url) as recorder: recorder.mcp_url, recorder.events``."""

    def __init__(self, upstream: str):
        parts = urlsplit(upstream)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self._path = parts.path
        self.events: list[ToolEvent] = []
        self._lock = threading.Lock()
        self._gate: _Gate | None = None
        self._pending_gate: tuple[int, float] | None = None
        self._server = ThreadedServer(
            Starlette(routes=[Route(self._path, self._forward, methods=["GET", "POST", "DELETE"])])
        )

    def __enter__(self) -> McpRecorder:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    @property
    def mcp_url(self) -> str:
        return f"{self._server.url}{self._path}"

    def gate(self, expected: int, *, give_up_seconds: float = 10.0) -> None:
        """Hold the next ``tools/call`` requests until ``expected`` of them have arrived."""
        with self._lock:
            self._pending_gate = (expected, give_up_seconds)

    def tool_events(self, *tools: str) -> list[tuple[str, str]]:
        """``(kind, tool)`` in the order they happened, for ``tools`` (all if none given)."""
        with self._lock:
            return [(e.kind, e.tool) for e in self.events if not tools or e.tool in tools]

    def _record(self, event: ToolEvent) -> None:
        with self._lock:
            self.events.append(event)

    async def _hold(self) -> None:
        with self._lock:
            if self._pending_gate is not None:
                self._gate = _Gate(*self._pending_gate)
                self._pending_gate = None
            gate = self._gate
        if gate is None:
            return
        gate.arrived += 1
        if gate.arrived >= gate.expected:
            gate.open.set()
            with self._lock:
                self._gate = None
            return
        try:
            await asyncio.wait_for(gate.open.wait(), gate.give_up_seconds)
        except TimeoutError:
            with self._lock:
                self._gate = None

    async def _forward(self, request: Request) -> StreamingResponse:
        body = await request.body()
        tool_call = _tool_call(body) if request.method == "POST" else None
        if tool_call is not None:
            self._record(ToolEvent("start", *tool_call))
            await self._hold()
        # A client per request, in the server's own event loop; closed with the response.
        client = httpx.AsyncClient(base_url=self._origin, timeout=None)
        upstream = await client.send(
            client.build_request(
                request.method,
                self._path,
                params=request.query_params,
                headers={k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP},
                content=body,
            ),
            stream=True,
        )

        async def relay() -> AsyncIterator[bytes]:
            async for data in upstream.aiter_raw():
                yield data

        async def finish() -> None:
            await upstream.aclose()
            await client.aclose()
            if tool_call is not None:
                self._record(ToolEvent("end", *tool_call))

        return StreamingResponse(
            relay(),
            status_code=upstream.status_code,
            headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP},
            background=BackgroundTask(finish),
        )


def _tool_call(body: bytes) -> tuple[str, Any] | None:
    """``(tool name, JSON-RPC id)`` if ``body`` is a ``tools/call`` request."""
    try:
        message = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if isinstance(message, dict) and message.get("method") == "tools/call":
        params = message.get("params") or {}
        return str(params.get("name")), message.get("id")
    return None
