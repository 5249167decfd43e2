"""Counts of the expensive things a turn or a click does, by wrapping the functions doing them.

Both sides of the bench go through the same libraries, so the same wrappers count both:

* ``mcp_sessions``     MCP sessions opened (``MultiServerMCPClient.session``), by token scope
* ``mcp_requests``     MCP requests on them (``tools/list``, and each ``tools/call`` by tool)
* ``webapi_requests``  Dataverse Web API requests (``httpx.AsyncClient.send`` to ``/api/data/``),
  by method and entity set: where the copilot's Dataverse writes and version reads go, so the
  ``dataverse`` profile's click shows its CRM calls too (always 0 on ``reference``)
* ``obo_exchanges``    on-behalf-of token exchanges (``OnBehalfOfCredential.get_token``), by scope
* ``pool_checkouts``   connections taken from a pool (``AsyncConnectionPool.getconn``), by pool
* ``checkpoint_writes`` ``AsyncPostgresSaver.aput`` / ``aput_writes``
* ``checkpoint_reads``  ``AsyncPostgresSaver.aget_tuple``
* ``model_calls``      calls of the bench model (``BenchChatModel._agenerate``), and an
  approximate prompt size per call (characters / 4, counting the bound tools' schemas)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import jwt
from azure.identity import OnBehalfOfCredential
from langchain_mcp_adapters.client import MultiServerMCPClient
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from mcp import ClientSession
from psycopg_pool import AsyncConnectionPool

from bench.model import BenchChatModel

CHARS_PER_TOKEN = 4
"""The approximation of prompt tokens (no tokenizer is installed): characters / 4."""


def _scopes_of(token: str) -> str:
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return "?"
    return " ".join(sorted(str(claims.get("scp", "")).split())) or "?"


class Costs:
    """What was counted since the last :meth:`reset`."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.prompt_tokens: list[int] = []

    def reset(self) -> None:
        self.counts.clear()
        self.prompt_tokens.clear()

    def add(self, kind: str, n: int = 1) -> None:
        self.counts[kind] += n

    def snapshot(self) -> dict[str, Any]:
        """The counts as JSON: totals, by scope / pool, and the prompt size of each model call."""
        totals: Counter[str] = Counter()
        for kind, n in self.counts.items():
            totals[kind.split(" ", 1)[0]] += n
        return {
            "mcp_sessions": totals["mcp_sessions"],
            "mcp_sessions_by_scope": self._by("mcp_sessions"),
            "mcp_requests": totals["mcp_requests"],
            "mcp_requests_by_method": self._by("mcp_requests"),
            "webapi_requests": totals["webapi_requests"],
            "webapi_requests_by_method": self._by("webapi_requests"),
            "obo_exchanges": totals["obo_exchanges"],
            "obo_exchanges_by_scope": self._by("obo_exchanges"),
            "pool_checkouts": totals["pool_checkouts"],
            "pool_checkouts_by_pool": self._by("pool_checkouts"),
            "checkpoint_writes": totals["checkpoint_writes"],
            "checkpoint_reads": totals["checkpoint_reads"],
            "model_calls": totals["model_calls"],
            "prompt_tokens_per_call": list(self.prompt_tokens),
        }

    def _by(self, prefix: str) -> dict[str, int]:
        return {k.split(" ", 1)[1]: v for k, v in sorted(self.counts.items()) if k.startswith(prefix + " ")}


class _Patches:
    """Class attributes replaced, and how to put each back (inherited ones are removed again)."""

    _INHERITED = object()

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        self._undo.append((owner, name, owner.__dict__.get(name, self._INHERITED)))
        setattr(owner, name, value)

    def undo(self) -> None:
        while self._undo:
            owner, name, value = self._undo.pop()
            if value is self._INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


WEBAPI_PATH = "/api/data/"
"""Where a Dataverse Web API URL's path starts (``<org>/api/data/v9.2/<entity set>...``)."""


def webapi_target(url: httpx.URL) -> str | None:
    """The Web API resource a request names (its entity set, function or ``EntityDefinitions``,
    without keys or the rest of the path), or None when ``url`` is not the Web API."""
    path = url.path
    if WEBAPI_PATH not in path:
        return None
    segments = path.split(WEBAPI_PATH, 1)[1].split("/")
    resource = segments[1] if len(segments) > 1 else ""
    return resource.split("(", 1)[0] or "?"


def _counted(costs: Costs, kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        costs.add(kind)
        return await original(*args, **kwargs)

    return wrapper


@contextmanager
def counting(costs: Costs) -> Iterator[Costs]:
    """Count into ``costs`` while the block runs (the wrappers are removed afterwards)."""
    patches = _Patches()
    original_session = MultiServerMCPClient.session

    @asynccontextmanager
    async def session(self: MultiServerMCPClient, server_name: str, **kwargs: Any) -> AsyncIterator[Any]:
        connection: Any = self.connections.get(server_name) or {}
        headers = dict(connection.get("headers") or {})
        token = str(headers.get("Authorization", "")).removeprefix("Bearer ")
        costs.add("mcp_sessions " + _scopes_of(token))
        async with original_session(self, server_name, **kwargs) as opened:
            yield opened

    original_get_token = OnBehalfOfCredential.get_token

    def get_token(self: OnBehalfOfCredential, *scopes: str, **kwargs: Any) -> Any:
        names = sorted(s.rsplit("/", 1)[-1] for s in scopes)
        costs.add("obo_exchanges " + " ".join(names))
        return original_get_token(self, *scopes, **kwargs)

    original_getconn = AsyncConnectionPool.getconn

    async def getconn(self: AsyncConnectionPool[Any], *args: Any, **kwargs: Any) -> Any:
        costs.add(f"pool_checkouts {self.name}")
        return await original_getconn(self, *args, **kwargs)

    original_agenerate = BenchChatModel._agenerate

    async def agenerate(self: BenchChatModel, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        costs.add("model_calls")
        costs.prompt_tokens.append(math.ceil(self.prompt_chars(messages) / CHARS_PER_TOKEN))
        return await original_agenerate(self, messages, *args, **kwargs)

    patches.set(MultiServerMCPClient, "session", session)
    patches.set(OnBehalfOfCredential, "get_token", get_token)
    patches.set(AsyncConnectionPool, "getconn", getconn)
    patches.set(BenchChatModel, "_agenerate", agenerate)
    original_list_tools, original_call_tool = ClientSession.list_tools, ClientSession.call_tool

    async def list_tools(self: ClientSession, *args: Any, **kwargs: Any) -> Any:
        costs.add("mcp_requests tools/list")
        return await original_list_tools(self, *args, **kwargs)

    async def call_tool(self: ClientSession, name: str, *args: Any, **kwargs: Any) -> Any:
        costs.add(f"mcp_requests {name}")
        return await original_call_tool(self, name, *args, **kwargs)

    original_send = httpx.AsyncClient.send

    async def send(self: httpx.AsyncClient, request: httpx.Request, *args: Any, **kwargs: Any) -> Any:
        target = webapi_target(request.url)
        if target is not None:
            costs.add(f"webapi_requests {request.method} {target}")
        return await original_send(self, request, *args, **kwargs)

    patches.set(httpx.AsyncClient, "send", send)
    patches.set(ClientSession, "list_tools", list_tools)
    patches.set(ClientSession, "call_tool", call_tool)
    for name in ("aput", "aput_writes"):
        patches.set(
            AsyncPostgresSaver, name, _counted(costs, "checkpoint_writes", getattr(AsyncPostgresSaver, name))
        )
    patches.set(
        AsyncPostgresSaver,
        "aget_tuple",
        _counted(costs, "checkpoint_reads", AsyncPostgresSaver.aget_tuple),
    )
    try:
        yield costs
    finally:
        patches.undo()
