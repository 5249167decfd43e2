"""Running the agent to its next stop, with a progress event per tool call the model makes."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.errors import GraphRecursionError

from copilot.citations import message_text
from copilot.context import AgentContext
from copilot.progress import ProgressEvent, describe_tool_call, names_in
from copilot.tools.crm_client import parse_result_text

ProgressCallback = Callable[[ProgressEvent], Awaitable[None]]

logger = logging.getLogger(__name__)

MODEL_NODE = "model"
"""The node of LangChain's agent graph that calls the model (middleware hooks are nodes of their own)."""
TOOLS_NODE = "tools"
"""The node of LangChain's agent graph that runs the model's tool calls (approved writes too)."""


async def stream_agent(
    agent: Any,
    payload: Any,
    config: dict[str, Any],
    ctx: AgentContext,
    on_progress: ProgressCallback | None,
    *,
    stop_after_tools: bool = False,
) -> bool:
    """Run the agent to its next stop (``stop_after_tools``: also right after its tool
    node ran); False if it ran out of graph steps instead."""
    names: dict[str, str] = {}
    # durability="exit": a run's checkpoint is written once, when it stops (its answer,
    # or its pause with the pending tool calls), and the run returns only after that
    # write. A turn killed before then leaves no trace of itself: the redelivered turn
    # starts again from the last stop, and read tools are safe to repeat. A resumed
    # write cannot run twice either: it runs from the pause already stored, under its
    # idempotency claim (copilot/persistence/idempotency.py), so a kill after the CRM
    # commit completes it from the claim instead of repeating it. "sync" wrote one
    # checkpoint per graph step (about 50 per turn, one per middleware hook); "async"
    # was tried and reverted (tests/adversarial/test_scale_out: a killed worker's
    # in-flight saves left a run that read back without its pause).
    try:
        async for update in agent.astream(
            payload,
            config,
            context=ctx,
            stream_mode="updates",
            durability="exit",
            interrupt_after=[TOOLS_NODE] if stop_after_tools else None,
        ):
            if not isinstance(update, dict):
                continue
            for node, node_update in update.items():
                messages = node_update.get("messages", []) if isinstance(node_update, dict) else []
                for message in messages if isinstance(messages, list) else [messages]:
                    if isinstance(message, ToolMessage):
                        names_in(parse_result_text(message_text(message)), names)
                    elif isinstance(message, AIMessage) and on_progress is not None and node == MODEL_NODE:
                        # Only the model's new message: other nodes' updates (a summary
                        # rewriting the list, say) carry earlier turns' calls as well.
                        for call in message.tool_calls:
                            await on_progress(describe_tool_call(call["name"], call["args"], names))
    except GraphRecursionError:
        # The recursion limit is derived from the model-call limit, so the limit's own
        # answer normally ends the run first; should the graph still run out of steps,
        # the rep gets that same answer, never a recursion error.
        logger.warning("thread %s ran out of graph steps before its model-call limit", ctx.thread_id)
        return False
    return True
