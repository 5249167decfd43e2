"""The CRM over MCP, as the rep: at most one session per scope per run, compact JSON.

``MultiServerMCPClient`` fixes headers per client, so a client (and one MCP session)
is built per CRM token (a rep's, for one scope) when a run first needs it, and kept for
that token's later runs (:mod:`~copilot.tools.session_pool`); underneath, every session's
``httpx`` client shares the process's TLS context and connection pool
(:func:`~copilot.tools.mcp_http.shared_transport`), never its headers. The model's read tools are built
once per process from the CRM's tool definitions and call the session of the run that
uses them (found in the run's context), so the agent is compiled once; the copilot's
own direct calls (proposal snapshots, writes) go through :class:`CrmGateway`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import Any, Protocol

import httpx
from langchain_core.tools import BaseTool
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import convert_mcp_tool_to_langchain_tool
from langgraph.runtime import get_runtime
from mcp import ClientSession
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult, ContentBlock, TextContent
from mcp.types import Tool as ToolDefinition

from copilot.errors import AuthError, CrmCallError, CrmUnavailable
from copilot.settings import Settings
from copilot.tools.compact_schema import compact_json_schema
from copilot.tools.mcp_http import JSONRPC_REFUSED, is_transient, mcp_http_client_factory

TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (httpx.HTTPError, McpError, OSError, TimeoutError)
"""What a broken, slow or refusing CRM endpoint raises out of an MCP session."""


def parse_result_text(text: str) -> Any:
    """A tool result's JSON, or the text itself if it holds none.

    Tolerates a plain-text preamble before the JSON object (the approval middleware
    prefixes edited calls' results with a note for the model).
    """
    try:
        return json.loads(text)
    except ValueError:
        pass
    stripped = text.rstrip()
    decoder = json.JSONDecoder()
    start = stripped.find("{")
    while start != -1:
        # The result is the JSON object that runs to the end of the text.
        try:
            value, end = decoder.raw_decode(stripped, start)
        except ValueError:
            value, end = None, -1
        if end == len(stripped):
            return value
        start = stripped.find("{", start + 1)
    return text


class SessionSource(Protocol):
    """Where a run's session of one scope comes from: its own (:class:`~copilot.tools.session_host.SessionHost`) or the
    process's kept sessions (:class:`~copilot.tools.session_pool.PooledSession`)."""

    @property
    def opened(self) -> bool: ...

    async def session(self) -> ClientSession: ...

    def refused(self) -> None: ...


CRM_REFUSED_MESSAGE = (
    "You don't have access to the CRM (it refused your sign-in). Ask your CRM administrator."
)
"""What a rep is told when the CRM refuses their token (access revoked, licence removed)."""
_ACCESS_STATUSES = frozenset({401, 403})


def _http_status(exc: McpError) -> int | None:
    data = exc.error.data if isinstance(exc.error.data, dict) else {}
    status = data.get("status")
    return status if isinstance(status, int) else None


def _session_gone(exc: McpError) -> bool:
    """The session is no good any more: the CRM refused it at the HTTP level (a revoked
    token), or ended it (an expired server-side session)."""
    return exc.error.code == JSONRPC_REFUSED or "session terminated" in exc.error.message.lower()


class CrmGateway:
    """One scope's CRM session for a run, and the copilot's own direct calls through it."""

    def __init__(self, host: SessionSource):
        self._host = host

    @property
    def opened(self) -> bool:
        """Whether this run has opened the session."""
        return self._host.opened

    async def session(self) -> ClientSession:
        """The MCP session (opened on first use; ``AuthError`` / ``CrmUnavailable`` if it cannot be)."""
        return await self._host.session()

    async def call_tool(self, tool: str, arguments: dict[str, Any] | None, **kwargs: Any) -> CallToolResult:
        """The MCP call itself, through the session; a session the CRM refused is not kept.

        A kept session the server has ended (MCP's "session terminated", a stateful server's
        expiry or restart) is replaced and the call made once more on the new one, as MCP
        asks of a client; a refusal (401/403) is not retried.
        """
        session = await self._host.session()
        try:
            return await session.call_tool(tool, arguments, **kwargs)
        except McpError as exc:
            if not _session_gone(exc):
                raise
            self._host.refused()
            if _http_status(exc) is not None:
                raise
            replacement = await self._host.session()
            if replacement is session:
                raise
        return await replacement.call_tool(tool, arguments, **kwargs)

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Call a CRM tool; returns its JSON object or raises ``CrmCallError`` / ``CrmUnavailable``."""
        try:
            result = await self.call_tool(tool, arguments)
        except McpError as exc:
            if is_transient(exc):
                raise CrmUnavailable(f"live CRM data is unavailable ({exc.error.message})") from exc
            # An HTTP-level refusal (401/403: access revoked, token rejected) is an answer,
            # not an outage.
            raise CrmCallError(
                "permission_denied", f"the CRM refused the request ({exc.error.message})"
            ) from exc
        except TRANSPORT_ERRORS as exc:
            raise CrmUnavailable(f"live CRM data is unavailable ({type(exc).__name__})") from exc
        payload: Any = result.structuredContent
        if payload is None:
            text = "".join(getattr(block, "text", "") for block in result.content)
            payload = parse_result_text(text)
        if result.isError:
            error = payload.get("error", {}) if isinstance(payload, dict) else {}
            raise CrmCallError(
                str(error.get("code", "error")),
                str(error.get("message", payload)),
                error.get("details") if isinstance(error.get("details"), dict) else {},
            )
        if not isinstance(payload, dict):
            raise CrmCallError("validation", f"unexpected CRM answer from {tool}: {payload!r}")
        return payload


def _connection(settings: Settings, token: str) -> dict[str, Any]:
    return {
        "transport": "streamable_http",
        "url": settings.crm_mcp_url,
        "headers": {"Authorization": f"Bearer {token}"},
        "timeout": timedelta(seconds=settings.crm_timeout_seconds),
        "sse_read_timeout": timedelta(seconds=settings.crm_timeout_seconds),
        "httpx_client_factory": functools.partial(mcp_http_client_factory, ca_file=settings.crm_ca_file),
    }


@asynccontextmanager
async def open_crm_session(settings: Settings, token: str) -> AsyncIterator[ClientSession]:
    """One MCP session to the CRM, authenticated as the rep whose ``token`` this is."""
    client = MultiServerMCPClient({"crm": _connection(settings, token)})  # type: ignore[dict-item]
    stack = AsyncExitStack()
    try:
        session = await stack.enter_async_context(client.session("crm"))
    except* TRANSPORT_ERRORS as group:
        await stack.aclose()
        refusals = [e for e in _leaves(group) if isinstance(e, McpError) and not is_transient(e)]
        if refusals:
            raise AuthError(CRM_REFUSED_MESSAGE, no_access=True) from group
        raise CrmUnavailable("live CRM data is unavailable: could not open a CRM session") from group
    try:
        async with stack:
            yield session
    except BaseExceptionGroup as group:
        # The MCP transport's task group wraps whatever the turn raised; hand callers
        # the one real error (e.g. an InvalidDecision) instead of a group.
        leaves = _leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


async def read_tool_definitions(session: ClientSession) -> list[ToolDefinition]:
    """The CRM's tools that it declares read-only (``readOnlyHint``); anything that may write is left out.

    Writes reach the CRM only through the copilot's own typed, approval-gated tools.
    """
    try:
        listed = await session.list_tools()
    except TRANSPORT_ERRORS as exc:
        raise CrmUnavailable("live CRM data is unavailable: could not list the CRM's tools") from exc
    return [t for t in listed.tools if t.annotations is not None and t.annotations.readOnlyHint is True]


class _RunSession:
    """Stands in for an MCP session in the process-wide read tools: each call goes to the
    read session of the run making it (the run's context), opened on its first use."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, **kwargs: Any
    ) -> CallToolResult:
        context: Any = get_runtime().context
        crm: CrmGateway = context.crm
        try:
            return compact_result(await crm.call_tool(name, arguments, **kwargs))
        except McpError as exc:
            # The rep's token refused mid-conversation: the turn ends with the same plain
            # answer as a sign-in the CRM refuses (not a tool error for the model to guess at).
            if _http_status(exc) in _ACCESS_STATUSES:
                raise AuthError(CRM_REFUSED_MESSAGE, no_access=True) from exc
            raise


def compact_result(result: CallToolResult) -> CallToolResult:
    """``result`` with each JSON text block re-serialised compactly (no nulls, no
    padding, no ASCII escapes): every tool result is sent with every later model call."""
    blocks: list[ContentBlock] = []
    for block in result.content:
        if isinstance(block, TextContent):
            try:
                data = json.loads(block.text)
            except ValueError:
                blocks.append(block)
                continue
            text = json.dumps(_without_nulls(data), ensure_ascii=False, separators=(",", ":"))
            blocks.append(block.model_copy(update={"text": text}))
        else:
            blocks.append(block)
    return result.model_copy(update={"content": blocks})


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def read_tools(definitions: list[ToolDefinition]) -> list[BaseTool]:
    """LangChain tools for the model from the CRM's read-only tool definitions.

    A CRM refusal comes back to the model as a tool result (``handle_tool_errors``), not
    as a crash. Each input schema is sent compact (:func:`compact_json_schema`: no null
    branches, null defaults or titles), as the write tools' are; the CRM still validates
    every call against its own schema.
    """
    run_session: Any = _RunSession()
    return [
        convert_mcp_tool_to_langchain_tool(
            run_session,
            definition.model_copy(update={"inputSchema": compact_json_schema(definition.inputSchema)}),
            handle_tool_errors=True,
        )
        for definition in definitions
    ]
