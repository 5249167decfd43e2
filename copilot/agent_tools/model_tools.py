"""The tools the copilot implements itself: the registered write tools, and its own reads.

Write tools come from the registry (:mod:`copilot.writes`): what the model is offered
is each entry's schema and description, with an executor that refuses to act. Only the
write guard runs a write, with the plan it validated (see
:class:`copilot.middleware.write_guard.WriteGuardMiddleware`).
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from langgraph.runtime import Runtime, get_runtime

from copilot.agent_tools.insight import insight_tools
from copilot.agent_tools.knowledge import knowledge_tool
from copilot.agent_tools.recent_writes import recent_writes_tool
from copilot.agent_tools.rep_desk import rep_desk_tools
from copilot.context import AgentContext
from copilot.tools.preferences import load_preferences
from copilot.tools.schemas import NoArgs
from copilot.writes import write_tools as registered_write_tools
from copilot.writes.preferences import PREFERENCE_CUES


def write_tools() -> list[BaseTool]:
    """The approval-gated write tools, one per registry entry."""
    return [tool.langchain_tool() for tool in registered_write_tools()]


async def _get_preferences(**_: Any) -> str:
    # The rep and store come from the graph runtime, never from tool arguments.
    runtime: Runtime[AgentContext] = get_runtime(AgentContext)
    if runtime.store is None:
        return json.dumps({"preferences": None})
    prefs = await load_preferences(runtime.store, runtime.context.identity)
    return json.dumps({"preferences": prefs.model_dump()})


def local_read_tools() -> list[BaseTool]:
    """Read tools the copilot implements itself."""
    return [
        StructuredTool.from_function(
            coroutine=_get_preferences,
            name="get_preferences",
            description="Show the rep's drafting preferences (email tone, signature, follow-up cadence).",
            args_schema=NoArgs,
            metadata={"readOnlyHint": True, "cues": PREFERENCE_CUES},
        ),
        recent_writes_tool(),
        knowledge_tool(),
        *insight_tools(),
        *rep_desk_tools(),
    ]
