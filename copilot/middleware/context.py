"""First in the chain: make sure the run knows who it is for, and tell the model (no secrets).

When the CRM's reads are a generic SQL query tool (Dataverse's ``read_query``), the model
also gets the compact schema of the tables a rep's questions touch (:mod:`copilot.crm.sql_schema`),
built once per deployment from the CRM's own describe tool. A CRM with typed read tools (the
reference CRM) gets no schema: its prompt is unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import SystemMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.runtime import Runtime
from mcp.types import TextContent

from copilot.context import AgentContext
from copilot.crm.sql_schema import SCHEMAS, ToolShape, sql_query_argument
from copilot.errors import ConfigurationError, CrmUnavailable
from copilot.tools.crm_client import TRANSPORT_ERRORS

_UNREACHABLE: tuple[type[BaseException], ...] = (CrmUnavailable, *TRANSPORT_ERRORS)
"""The CRM could not be asked right now: no schema this call (the next one asks again)."""

_SHAPES: dict[tuple[int, ...], tuple[list[Any], list[ToolShape]]] = {}
"""Bound tool lists (by identity; the agent's tools are built once per process) → their shapes.
The value keeps the tools alive, so an id is never reused while its entry is here."""


def tool_shapes(tools: Sequence[object]) -> list[ToolShape]:
    """The bound tools as the capability checks see them (worked out once per tool list)."""
    key = tuple(id(t) for t in tools)
    found = _SHAPES.get(key)
    if found is None:
        shapes = [_shape(t) for t in tools]
        if len(_SHAPES) > 64:
            _SHAPES.clear()
        found = _SHAPES[key] = (list(tools), shapes)
    return found[1]


def _shape(tool: object) -> ToolShape:
    function = convert_to_openai_tool(tool)["function"]  # type: ignore[arg-type]
    metadata = (tool.metadata or {}) if isinstance(tool, BaseTool) else {}
    params = function.get("parameters")
    return ToolShape(
        name=str(function["name"]),
        description=str(function.get("description") or ""),
        parameters=params if isinstance(params, dict) else {},
        read_only=metadata.get("readOnlyHint") is True,
    )


async def crm_schema_note(ctx: AgentContext, tools: Sequence[object]) -> str:
    """The compact CRM schema for this deployment, when the bound tools offer a SQL query tool
    ("" otherwise, and while the CRM cannot be asked: the next call tries again)."""
    shapes = tool_shapes(tools)
    if not any(sql_query_argument(s) for s in shapes):
        return ""
    key = ctx.settings.crm_url or ctx.settings.crm_mcp_url

    async def call(name: str, args: dict[str, Any]) -> str | None:
        try:
            result = await ctx.crm.call_tool(name, args)
        except _UNREACHABLE:
            return None
        if result.isError:
            return None
        return "".join(b.text for b in result.content if isinstance(b, TextContent)) or None

    # The copilot's own write-key column is bookkeeping, not something a rep asks about.
    return await SCHEMAS.get(key, shapes, call, frozenset({ctx.settings.crm_dataverse_key_column}))


class RepContextMiddleware(AgentMiddleware[Any, AgentContext, Any]):
    """Refuses runs without a rep context; adds the rep's name, today's date and (on a SQL read
    surface) the CRM's compact schema to the prompt."""

    async def abefore_agent(
        self, state: AgentState[Any], runtime: Runtime[AgentContext]
    ) -> dict[str, Any] | None:
        if not isinstance(runtime.context, AgentContext):
            raise ConfigurationError("the agent must run with an AgentContext (rep identity and tokens)")
        return None

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        ctx: AgentContext = request.runtime.context
        note = f"\n\nYou are assisting {ctx.identity.name or 'a sales rep'}. Today is {ctx.clock().date().isoformat()}."
        schema = await crm_schema_note(ctx, request.tools)
        if schema:
            note += f"\n\n{schema}"
        base = request.system_message.content if request.system_message is not None else ""
        return await handler(request.override(system_message=SystemMessage(content=f"{base}{note}")))
