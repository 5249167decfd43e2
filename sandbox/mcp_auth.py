"""Bearer-token gate in front of the MCP endpoint, plus the test knobs.

Runs before the MCP transport on every request:

* no/invalid token → 401 with a ``WWW-Authenticate`` challenge (RFC 6750 / MCP auth);
* a valid token of a user whose CRM access was revoked (``User.crm_access`` or a
  runtime override, see :mod:`sandbox.access`) → 401 ``invalid_token``;
* valid token without ``crm.read`` → 403; a ``tools/call`` of a write tool without
  ``crm.write`` → 403 ``insufficient_scope`` naming the scope (the MCP spec's scope
  challenge), before the tool runs;
* the authenticated :class:`~sandbox.directory.User` goes on the ASGI scope, where
  the tools read it;
* knobs: added latency, injected 503 / 429 / timeout, per-user rate limit (429).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sandbox.access import crm_access_enabled
from sandbox.config import SandboxSettings
from sandbox.identity.tokens import TokenError, bearer_from_header, validate_token
from sandbox.knobs import KnobState
from sandbox.mcp_server import CALLER_SCOPE_KEY, WRITE_TOOLS

READ_SCOPE = "crm.read"
WRITE_SCOPE = "crm.write"
REVOKED_DESCRIPTION = "CRM access revoked for this user"


def called_tools(body: bytes) -> list[str]:
    """Names of the tools a JSON-RPC message (or batch) calls; [] if none or unparsable."""
    try:
        parsed = json.loads(body or b"null")
    except ValueError:
        return []
    messages = parsed if isinstance(parsed, list) else [parsed]
    names: list[str] = []
    for message in messages:
        if isinstance(message, dict) and message.get("method") == "tools/call":
            params = message.get("params")
            if isinstance(params, dict) and isinstance(params.get("name"), str):
                names.append(params["name"])
    return names


async def _send_json(
    send: Send, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
) -> None:
    body = json.dumps(payload).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


class McpAuthGate:
    """ASGI wrapper that authenticates, authorises and (optionally) sabotages MCP requests."""

    def __init__(self, app: ASGIApp, settings: SandboxSettings, knobs: KnobState):
        self._app = app
        self._settings = settings
        self._knobs = knobs

    def _challenge(self, error: TokenError) -> dict[str, str]:
        metadata = f"{self._settings.http_base_url}/.well-known/oauth-protected-resource"
        extra = f', scope="{READ_SCOPE} {WRITE_SCOPE}"' if error.status == 403 else ""
        return {"WWW-Authenticate": f'{error.www_authenticate()}{extra}, resource_metadata="{metadata}"'}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        try:
            token = bearer_from_header(headers.get("authorization"))
            claims = validate_token(
                self._settings, token, audience=self._settings.crm_audience, required_scopes={READ_SCOPE}
            )
            user = claims.user
            if not await anyio.to_thread.run_sync(crm_access_enabled, self._settings.db_path, user):
                raise TokenError(401, "invalid_token", REVOKED_DESCRIPTION)
        except TokenError as exc:
            await _send_json(
                send,
                exc.status,
                {"error": exc.error, "error_description": exc.description},
                self._challenge(exc),
            )
            return

        body = b""
        if scope.get("method") == "POST":
            body = await _read_body(receive)
        tools = called_tools(body)
        if any(name in WRITE_TOOLS for name in tools) and WRITE_SCOPE not in claims.scopes:
            denied = TokenError(403, "insufficient_scope", f"{WRITE_SCOPE} is required to change CRM records")
            await _send_json(
                send,
                403,
                {"error": denied.error, "error_description": denied.description},
                self._challenge(denied),
            )
            return
        if tools and not await self._survives_knobs(claims.user.id, send):
            return

        scope = {**scope, CALLER_SCOPE_KEY: claims.user}
        await self._app(scope, _replay(body, receive) if scope.get("method") == "POST" else receive, send)

    async def _survives_knobs(self, caller_id: str, send: Send) -> bool:
        knobs = self._knobs.knobs
        verdict = self._knobs.judge(caller_id)
        if knobs.latency_ms:
            await anyio.sleep(knobs.latency_ms / 1000)
        if verdict.kind == "ok":
            return True
        if verdict.kind == "timeout":
            await anyio.sleep(knobs.timeout_seconds)
            await _send_json(send, 504, {"error": {"code": "unavailable", "message": "CRM timed out"}})
        elif verdict.kind == "503":
            await _send_json(
                send,
                503,
                {"error": {"code": "unavailable", "message": "CRM temporarily unavailable"}},
                {"Retry-After": str(verdict.retry_after_seconds)},
            )
        else:
            await _send_json(
                send,
                429,
                {
                    "error": {
                        "code": "rate_limited",
                        "message": "too many requests",
                        "details": {"retry_after_seconds": verdict.retry_after_seconds},
                    }
                },
                {"Retry-After": str(verdict.retry_after_seconds)},
            )
        return False


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
