"""Bind only the tools a turn can need, chosen without a model call (issue 34's cost).

Every tool a turn might use is still registered with the agent (the approval gate, the write
guard and the tool node know all of them); what changes is what each model call is *offered*:

* a tool without selection cues (the CRM's reads, the knowledge search) is always offered;
* a tool whose metadata carries ``cues`` (word stems: every write tool, from its registry
  entry, and the copilot's own reads of preferences and recent changes) is offered when the
  conversation uses one of them: the rep's latest message or the one before it (a reply to
  a clarifying question), or when the model called it since the rep's previous message.

Write tools stay behind the approval card whether offered or not. The system prompt is built
for the tools offered (:func:`copilot.prompts.system_prompt`): its fixed rules first, then the
sections for knowledge and changes only when those tools are offered, so a provider's prompt
cache sees the same prefix on every call of a run. ``COPILOT_TOOL_SELECTION=all`` offers
everything (the behaviour before); ``llm`` uses LangChain's ``LLMToolSelectorMiddleware``
instead (one extra model call per turn, with the cue-less tools always included).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool

from copilot.citations import message_text
from copilot.prompts import system_prompt

CONVERSATION = 2
"""The rep's messages whose words choose the tools: the latest and the one before it."""


def tool_cues(tool: object) -> tuple[str, ...]:
    """A tool's selection cues (empty: always offered)."""
    metadata = (tool.metadata or {}) if isinstance(tool, BaseTool) else {}
    cues = metadata.get("cues")
    return tuple(str(c) for c in cues) if isinstance(cues, list | tuple) else ()


@functools.cache
def _cue_pattern(cues: tuple[str, ...]) -> re.Pattern[str]:
    # Compiled once per tool's cues: select_tools runs before every model call.
    return re.compile("|".join(r"\b" + re.escape(c.lower()) for c in cues))


def conversation_text(messages: Sequence[BaseMessage], turns: int = CONVERSATION) -> str:
    """The rep's latest ``turns`` messages, lower-cased (what chooses the tools)."""
    said = [message_text(m) for m in messages if isinstance(m, HumanMessage)]
    return "\n".join(said[-turns:]).lower()


def called_since_previous_message(messages: Sequence[BaseMessage]) -> set[str]:
    """Tools the model called since the rep's message before the latest one."""
    humans = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    start = humans[-2] if len(humans) >= 2 else 0
    return {call["name"] for m in messages[start:] if isinstance(m, AIMessage) for call in m.tool_calls}


def select_tools(tools: Sequence[Any], messages: Sequence[BaseMessage]) -> list[Any]:
    """The tools a model call is offered, in their registered order (see the module docstring)."""
    text = conversation_text(messages)
    called = called_since_previous_message(messages)
    chosen = []
    for tool in tools:
        cues = tool_cues(tool)
        name = tool.name if isinstance(tool, BaseTool) else None
        if not cues or name in called or _cue_pattern(cues).search(text):
            chosen.append(tool)
    return chosen


def _name(tool: object) -> str:
    if isinstance(tool, BaseTool):
        return tool.name
    if isinstance(tool, dict):
        function = tool.get("function", tool)
        return str(function.get("name", "")) if isinstance(function, dict) else ""
    return ""


class ToolSelectionMiddleware(AgentMiddleware[Any, Any, Any]):
    """Offers each model call only the tools its conversation can need, with the system prompt
    for those tools (first in the chain, so every later middleware sees what is offered)."""

    def __init__(self, *, write_tools: Collection[str]) -> None:
        super().__init__()
        self.write_tools = frozenset(write_tools)

    def _selected(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        tools = select_tools(request.tools, request.messages)
        names = [_name(t) for t in tools]
        prompt = system_prompt(names, write_tools=[n for n in names if n in self.write_tools])
        return request.override(tools=tools, system_message=SystemMessage(prompt))

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any]:
        return handler(self._selected(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        return await handler(self._selected(request))
