"""After the model proposes writes: snapshot each target record once, into state.

Runs in ``after_model`` (once per model response, before any tool runs and before the
approval pause), so the version the rep reviews is the version read at proposal time,
never re-read on resume.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from copilot.context import AgentContext
from copilot.writes import ProposalRecord, write_tool


def _merge(
    left: dict[str, ProposalRecord] | None, right: dict[str, ProposalRecord] | None
) -> dict[str, ProposalRecord]:
    return {**(left or {}), **(right or {})}


class ProposalState(AgentState[Any]):
    proposals: NotRequired[Annotated[dict[str, ProposalRecord], _merge]]


class ProposalSnapshotMiddleware(AgentMiddleware[ProposalState, AgentContext, Any]):
    """Adds ``proposals[tool_call_id]`` for every write tool call of the latest model message."""

    state_schema = ProposalState

    async def aafter_model(
        self, state: ProposalState, runtime: Runtime[AgentContext]
    ) -> dict[str, Any] | None:
        messages = state.get("messages", [])
        last = messages[-1] if messages else None
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return None
        known = state.get("proposals") or {}
        ctx = runtime.context
        new: dict[str, ProposalRecord] = {}
        for call in last.tool_calls:
            entry = write_tool(call["name"])
            if entry is not None and call["id"] and call["id"] not in known:
                new[call["id"]] = await entry.snapshot(ctx, runtime.store, dict(call["args"]))
        return {"proposals": new} if new else None
