"""Human approval for every write, and the start-up check that nothing escapes it.

A proposal that would change nothing (every proposed field already has that value in the
record read at proposal time) is not put to the rep: the call is answered with a tool
result saying what the record already has, whichever model proposed it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import HumanInTheLoopMiddleware, InterruptOnConfig
from langchain.agents.middleware.human_in_the_loop import DecisionType
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import ToolCall, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime
from langgraph.types import Command

from copilot.errors import ConfigurationError
from copilot.grounding.rules import FOR_REP
from copilot.proposals import describe_proposal, unchanged_fields, unchanged_result
from copilot.writes import UNRESOLVED, write_tools

REQUIRED_DECISIONS: tuple[DecisionType, ...] = ("approve", "edit", "reject")


def _describe(tool_call: ToolCall, state: Any, runtime: Runtime[Any]) -> str:
    record = (state.get("proposals") or {}).get(tool_call["id"])
    return describe_proposal(tool_call["name"], dict(tool_call["args"]), record)


def no_change_answer(request: ToolCallRequest) -> ToolMessage | None:
    """The tool result for a write call that would change nothing; ``None`` for any other call.

    Decided from the proposal's snapshot in state (taken once, at proposal time), so a
    resumed run decides the same way and the interrupt order never shifts.
    """
    call = request.tool_call
    state = request.state if isinstance(request.state, dict) else {}
    record = (state.get("proposals") or {}).get(call["id"])
    fields = unchanged_fields(call["name"], dict(call["args"]), record)
    if record is None or fields is None:
        return None
    return ToolMessage(
        json.dumps(unchanged_result(call["name"], record, fields), default=str),
        tool_call_id=str(call["id"]),
        name=call["name"],
    )


def unresolved_answer(request: ToolCallRequest) -> ToolMessage | None:
    """The tool error for a write call whose snapshot could not tell what it names (a colleague
    called "Megan" when two are, or none): the model asks the rep which, nothing is proposed."""
    call = request.tool_call
    state = request.state if isinstance(request.state, dict) else {}
    record = (state.get("proposals") or {}).get(call["id"]) or {}
    error = record.get("error") or {}
    if error.get("code") != UNRESOLVED:
        return None
    return ToolMessage(
        json.dumps({"error": {"code": UNRESOLVED, "message": error.get("message", ""), FOR_REP: True}}),
        tool_call_id=str(call["id"]),
        name=call["name"],
        status="error",
    )


class ApprovalMiddleware(HumanInTheLoopMiddleware[Any, Any, Any]):
    """LangChain's HITL, per call, except that a no-op proposal is answered instead of asked,
    and so is one that names no one (or more than one) it could resolve."""

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        return (
            unresolved_answer(request)
            or no_change_answer(request)
            or super().wrap_tool_call(request, handler)
        )

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        return (
            unresolved_answer(request)
            or no_change_answer(request)
            or await super().awrap_tool_call(request, handler)
        )


def approval_middleware() -> HumanInTheLoopMiddleware[Any, Any, Any]:
    """HITL on every write tool: approve / edit / reject, one interrupt per tool call (no-op
    proposals answered without one)."""
    interrupt_on: dict[str, bool | InterruptOnConfig] = {
        name: InterruptOnConfig(allowed_decisions=list(REQUIRED_DECISIONS), description=_describe)
        for name in (tool.name for tool in write_tools())
    }
    return ApprovalMiddleware(interrupt_on=interrupt_on, interrupt_mode="per_call")


def assert_every_write_is_interrupted(
    tools: Sequence[BaseTool], hitl: HumanInTheLoopMiddleware[Any, Any, Any], read_only: set[str]
) -> None:
    """Refuse to build an agent in which any tool that may change something runs unreviewed.

    A tool counts as read-only only if it is in ``read_only``: the CRM declared it so
    (``readOnlyHint``), or it is one of the copilot's own read tools; everything else must be interrupted with
    approve, edit and reject. And there is no sending of email, ever.
    """
    for tool in tools:
        if "send" in tool.name.lower():
            raise ConfigurationError(f"tool {tool.name!r} looks like a send tool; the copilot only drafts")
        if tool.name in read_only:
            continue
        config = hitl.interrupt_on.get(tool.name)
        allowed = set(config["allowed_decisions"]) if config else set()
        if not set(REQUIRED_DECISIONS) <= allowed:
            raise ConfigurationError(
                f"tool {tool.name!r} may change data but is not interrupted for approve/edit/reject",
                tool=tool.name,
            )
    if hitl.interrupt_mode != "per_call":
        raise ConfigurationError("approvals must be per call so each proposal is decided on its own")
