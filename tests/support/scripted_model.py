"""A chat model that plays back scripted responses and records what it was sent.

Stands in for an LLM provider where a test needs exact tool calls. Each script step
is a function of the messages the model receives, so steps can use ids from earlier
tool results.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field, PrivateAttr

from copilot.grounding.rules import FACTS_CHECK_TOOL, REQUEST_CHECK_TOOL

Step = Callable[[list[BaseMessage]], AIMessage] | AIMessage


def call(name: str, **args: Any) -> dict[str, Any]:
    """A tool call with a fresh id."""
    return {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:12]}", "type": "tool_call"}


def calls(*tool_calls: dict[str, Any]) -> AIMessage:
    return AIMessage(content="", tool_calls=list(tool_calls))


class ScriptedChatModel(BaseChatModel):
    """Returns ``steps`` in order; after the script ends, answers ``final``.

    The grounding gate's facts check (a call forced to ``FACTS_CHECK_TOOL`` after an answer
    given without a read) is answered ``states_facts``, as a real model answers a forced
    tool call, without using a step; it is recorded in ``checks``, not ``received``.
    """

    steps: list[Any] = Field(default_factory=list)
    final: str = "Done."
    states_facts: bool = False
    asks_for_change: bool = True
    """The answer to the gate's request check (a write proposed for a message that reads as a
    question): scripts propose writes on purpose, so by default the rep asked for them."""
    _received: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _checks: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _position: int = PrivateAttr(default=0)
    _bound: set[str] = PrivateAttr(default_factory=set)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def received(self) -> list[list[BaseMessage]]:
        """Every message list the model was called with (what it 'saw')."""
        return self._received

    @property
    def checks(self) -> list[list[BaseMessage]]:
        """The message lists of the facts checks the gate asked for."""
        return self._checks

    @property
    def bound_tools(self) -> set[str]:
        """The name of every tool the agent ever bound to this model (what it could call)."""
        return self._bound

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        for tool in tools:
            name = tool.get("name") if isinstance(tool, dict) else getattr(tool, "name", None)
            if isinstance(name, str):
                self._bound.add(name)
        return self if tool_choice is None else self.bind(tool_choice=tool_choice)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if kwargs.get("tool_choice") == FACTS_CHECK_TOOL:
            self._checks.append(list(messages))
            check = AIMessage(
                content="", tool_calls=[call(FACTS_CHECK_TOOL, states_record_facts=self.states_facts)]
            )
            return ChatResult(generations=[ChatGeneration(message=check)])
        if kwargs.get("tool_choice") == REQUEST_CHECK_TOOL:
            self._checks.append(list(messages))
            check = AIMessage(
                content="", tool_calls=[call(REQUEST_CHECK_TOOL, asks_for_change=self.asks_for_change)]
            )
            return ChatResult(generations=[ChatGeneration(message=check)])
        self._received.append(list(messages))
        if self._position < len(self.steps):
            step = self.steps[self._position]
            self._position += 1
            message = step(list(messages)) if callable(step) else step
            # A fresh copy: the same AIMessage object must not be reused across runs.
            message = message.model_copy(deep=True)
        else:
            message = AIMessage(content=self.final)
        return ChatResult(generations=[ChatGeneration(message=message)])
