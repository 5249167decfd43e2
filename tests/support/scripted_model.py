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

Step = Callable[[list[BaseMessage]], AIMessage] | AIMessage


def call(name: str, **args: Any) -> dict[str, Any]:
    """A tool call with a fresh id."""
    return {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:12]}", "type": "tool_call"}


def calls(*tool_calls: dict[str, Any]) -> AIMessage:
    return AIMessage(content="", tool_calls=list(tool_calls))


class ScriptedChatModel(BaseChatModel):
    """Returns ``steps`` in order; after the script ends, answers ``final``."""

    steps: list[Any] = Field(default_factory=list)
    final: str = "Done."
    _received: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _position: int = PrivateAttr(default=0)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def received(self) -> list[list[BaseMessage]]:
        """Every message list the model was called with (what it 'saw')."""
        return self._received

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
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
