"""Human approval for every write, and the start-up check that nothing escapes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents.middleware import HumanInTheLoopMiddleware, InterruptOnConfig
from langchain.agents.middleware.human_in_the_loop import DecisionType
from langchain_core.messages import ToolCall
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime

from copilot.errors import ConfigurationError
from copilot.proposals import describe_proposal
from copilot.writes import write_tools

REQUIRED_DECISIONS: tuple[DecisionType, ...] = ("approve", "edit", "reject")


def _describe(tool_call: ToolCall, state: Any, runtime: Runtime[Any]) -> str:
    record = (state.get("proposals") or {}).get(tool_call["id"])
    return describe_proposal(tool_call["name"], dict(tool_call["args"]), record)


def approval_middleware() -> HumanInTheLoopMiddleware[Any, Any, Any]:
    """HITL on every write tool: approve / edit / reject, one interrupt per tool call."""
    interrupt_on: dict[str, bool | InterruptOnConfig] = {
        name: InterruptOnConfig(allowed_decisions=list(REQUIRED_DECISIONS), description=_describe)
        for name in (tool.name for tool in write_tools())
    }
    return HumanInTheLoopMiddleware(interrupt_on=interrupt_on, interrupt_mode="per_call")


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
