"""The gate in front of ``/api/mcp``: token (401), allowed MCP client (403), budget (429).

Refusals use Dataverse's error body; an accepted request reaches the MCP transport with
the caller on the ASGI scope, where the tools read it.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from sandbox.config import SandboxSettings
from sandbox.dataverse.errors import DataverseError
from sandbox.dataverse.mcp_tools import CALLER_SCOPE_KEY
from sandbox.dataverse.org import OrgConfig
from sandbox.dataverse.security import authenticate, charge, require_allowed_mcp_client
from sandbox.knobs import KnobState


async def _refuse(send: Send, exc: DataverseError) -> None:
    body = json.dumps(exc.payload()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in exc.headers.items()]
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class DataverseMcpGate:
    """ASGI wrapper that authenticates and admits Dataverse MCP requests."""

    def __init__(self, app: ASGIApp, settings: SandboxSettings, knobs: KnobState, org: OrgConfig) -> None:
        self._app = app
        self._settings = settings
        self._knobs = knobs
        self._org = org

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        try:
            claims = await authenticate(self._settings, headers.get("authorization"), "mcp")
            require_allowed_mcp_client(self._org, claims)
            charge(self._knobs, claims)
        except DataverseError as exc:
            await _refuse(send, exc)
            return
        await self._app({**scope, CALLER_SCOPE_KEY: claims.user}, receive, send)
