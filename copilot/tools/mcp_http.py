"""HTTP failures of the CRM's MCP endpoint, turned into per-request JSON-RPC errors.

The MCP SDK's streamable-HTTP client raises ``HTTPStatusError`` / timeouts inside its
transport task group, which tears down the whole session instead of failing the one
request. This transport answers such a request with a JSON-RPC error carrying the
HTTP status and ``Retry-After`` instead, so the call raises ``McpError`` where it was
made, the session survives, and retry / circuit-breaker logic can classify it.

Connections and TLS are shared, credentials never are. Building an ``ssl.SSLContext``
loads a whole CA bundle (tens of milliseconds), and a new ``httpx`` transport builds one,
so the process builds each trust context once (:func:`copilot.tls.ssl_context`) and every MCP session
and mailbox request of an event loop goes through one connection pool
(:func:`shared_transport`). Each session is still its own ``httpx.AsyncClient`` with its
own headers (the rep's bearer token) and cookie jar: the shared part is the connection
pool, which carries no request state, so one rep's token never rides on another's request.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from mcp.shared.exceptions import McpError

from copilot.errors import CrmUnavailable
from copilot.tls import ssl_context

TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
JSONRPC_TRANSIENT = -32001
"""JSON-RPC error code for "the CRM is temporarily unavailable; retrying may work"."""
JSONRPC_REFUSED = -32002
"""JSON-RPC error code for "the CRM refused this request at the HTTP level" (401/403...)."""


def _request_id(request: httpx.Request) -> Any:
    if request.method != "POST":
        return None
    try:
        body = json.loads(request.content or b"null")
    except ValueError:
        return None
    return body.get("id") if isinstance(body, dict) else None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _jsonrpc_error(
    request: httpx.Request, request_id: Any, code: int, message: str, data: dict[str, Any]
) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message, "data": data}}
    return httpx.Response(200, json=body, request=request)


class JsonRpcErrorTransport(httpx.AsyncBaseTransport):
    """Wraps a transport; non-2xx answers and timeouts to JSON-RPC requests become JSON-RPC errors."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None):
        self._inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request_id = _request_id(request)
        try:
            response = await self._inner.handle_async_request(request)
        except (httpx.TimeoutException, httpx.NetworkError) as exc:
            if request_id is None:
                raise
            return _jsonrpc_error(
                request,
                request_id,
                JSONRPC_TRANSIENT,
                f"CRM unreachable: {type(exc).__name__}",
                {"transient": True},
            )
        if request_id is None or response.status_code < 400 or response.status_code == 404:
            # 404 is how MCP signals an expired session; the SDK handles it itself.
            return response
        await response.aread()
        await response.aclose()
        status = response.status_code
        transient = status in TRANSIENT_STATUSES
        data: dict[str, Any] = {
            "status": status,
            "transient": transient,
            "retry_after": _retry_after(response),
        }
        code = JSONRPC_TRANSIENT if transient else JSONRPC_REFUSED
        return _jsonrpc_error(request, request_id, code, f"CRM answered HTTP {status}", data)

    async def aclose(self) -> None:
        await self._inner.aclose()


SHARED_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=20, keepalive_expiry=5.0)
"""The shared pool never caps connections (each MCP session may hold a long-lived stream,
as it could with a transport of its own); it keeps up to 20 idle ones for 5 s."""


@dataclass
class _Shared:
    transports: dict[str | None, httpx.AsyncHTTPTransport] = field(default_factory=dict)
    """One pool per trust: the default (``None``) and each private CA bundle in use."""
    holders: int = 0

    def transport(self, ca_file: str | None) -> httpx.AsyncHTTPTransport:
        found = self.transports.get(ca_file)
        if found is None:
            found = self.transports[ca_file] = httpx.AsyncHTTPTransport(
                verify=ssl_context(ca_file), limits=SHARED_LIMITS
            )
        return found


_SHARED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Shared] = weakref.WeakKeyDictionary()


def _shared_for_loop() -> _Shared:
    # Per event loop: pooled connections belong to the loop that opened them.
    loop = asyncio.get_running_loop()
    shared = _SHARED.get(loop)
    if shared is None:
        shared = _SHARED[loop] = _Shared()
    return shared


class _Borrowed(httpx.AsyncBaseTransport):
    """The shared transport, for one client: closing the client leaves the pool open."""

    def __init__(self, inner: httpx.AsyncBaseTransport):
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        pass


def shared_transport(ca_file: str | None = None) -> httpx.AsyncBaseTransport:
    """This event loop's shared connection pool for one ``httpx.AsyncClient``: default trust,
    or ``ca_file``'s (``CRM_CA_BUNDLE``: a CRM behind a private CA).

    Give each client its own headers (the bearer token goes on the client or the request,
    never on the transport); closing the client does not close the pool.
    """
    return _Borrowed(_shared_for_loop().transport(ca_file))


@asynccontextmanager
async def shared_http() -> AsyncIterator[None]:
    """Hold this event loop's shared pools open (a service, for its lifetime); the last
    holder to leave closes their connections (the next user starts new pools)."""
    loop = asyncio.get_running_loop()
    shared = _shared_for_loop()
    shared.holders += 1
    try:
        yield
    finally:
        shared.holders -= 1
        if shared.holders == 0 and _SHARED.get(loop) is shared:
            del _SHARED[loop]
            for transport in shared.transports.values():
                await transport.aclose()


def mcp_http_client_factory(
    headers: dict[str, str] | None = None,
    timeout: httpx.Timeout | None = None,
    auth: httpx.Auth | None = None,
    *,
    ca_file: str | None = None,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for one MCP session: its own headers (the rep's bearer
    token) and cookies, over the shared pool (``ca_file``'s trust), behind
    :class:`JsonRpcErrorTransport`."""
    return httpx.AsyncClient(
        headers=headers,
        timeout=timeout if timeout is not None else httpx.Timeout(30.0),
        auth=auth,
        transport=JsonRpcErrorTransport(shared_transport(ca_file)),
    )


CANDIDATE_ERRORS: tuple[type[BaseException], ...] = (
    McpError,
    CrmUnavailable,
    httpx.TimeoutException,
    httpx.NetworkError,
    TimeoutError,
)
"""Exception types that may be transient; :func:`is_transient` decides per instance."""


def is_transient(exc: BaseException) -> bool:
    """Whether retrying ``exc`` may succeed."""
    if isinstance(exc, McpError):
        data = exc.error.data if isinstance(exc.error.data, dict) else {}
        return exc.error.code == JSONRPC_TRANSIENT or bool(data.get("transient"))
    return isinstance(exc, CrmUnavailable | httpx.TimeoutException | httpx.NetworkError | TimeoutError)


def retry_after(exc: BaseException) -> float | None:
    """The server's ``Retry-After`` for ``exc``, if it sent one: carried in an MCP error's
    data (:class:`JsonRpcErrorTransport`) or on a :class:`CrmUnavailable` a connector raised
    (the Dataverse Web API's 429)."""
    if isinstance(exc, CrmUnavailable):
        return exc.retry_after
    if isinstance(exc, McpError) and isinstance(exc.error.data, dict):
        value = exc.error.data.get("retry_after")
        return float(value) if isinstance(value, int | float) else None
    return None
