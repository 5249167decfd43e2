"""What a run did, seen through LangChain callbacks: model calls, tokens, the tools bound to the
model, the tools the model called, the tools that ran and the record ids and names in their
results.

The handler is attached with LangChain's configure hook (a context variable), so the
service is run exactly as in production: nothing in it knows it is observed. Model calls
nested in another model call (a fallback wrapper around the model it delegates to) are
counted once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.tracers.context import register_configure_hook

from copilot.citations import ids_in_tool_results, message_text
from copilot.tools.crm_client import parse_result_text


class RunObserver(BaseCallbackHandler):
    """Collects one turn's model calls, token usage, tool calls and tool results."""

    def __init__(self) -> None:
        self.model_calls = 0
        self.tokens = 0
        self.prompt_tokens = 0
        """The input tokens of the turn's model calls (the prompt each call sent)."""
        self.tool_calls: list[str] = []
        self.bound_tools: set[str] = set()
        """Names of the tools bound to any model call of the turn (what the model was given)."""
        self.tools_run: list[str] = []
        """Tools that actually ran (a proposed write runs only once approved: never in an eval)."""
        self.tool_errors: list[str] = []
        """The text of every tool result that was an error (what only the model may see)."""
        self.result_ids: set[str] = set()
        self.result_names: set[str] = set()
        self._model_runs: set[UUID] = set()

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        nested = parent_run_id is not None and parent_run_id in self._model_runs
        self._model_runs.add(run_id)
        params = kwargs.get("invocation_params")
        self.bound_tools |= _tool_names(params.get("tools") if isinstance(params, dict) else None)
        if not nested:
            self.model_calls += 1

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **_: Any
    ) -> None:
        if parent_run_id is not None and parent_run_id in self._model_runs:
            return
        for generations in response.generations:
            for generation in generations:
                if not isinstance(generation, ChatGeneration):
                    continue
                message = generation.message
                if isinstance(message, AIMessage):
                    usage = message.usage_metadata
                    if usage:
                        self.tokens += int(usage.get("total_tokens", 0))
                        self.prompt_tokens += int(usage.get("input_tokens", 0))
                    self.tool_calls.extend(call["name"] for call in message.tool_calls)

    def on_tool_start(self, serialized: dict[str, Any], input_str: str, **_: Any) -> None:
        name = (serialized or {}).get("name")
        if isinstance(name, str):
            self.tools_run.append(name)

    def on_tool_end(self, output: Any, **_: Any) -> None:
        if isinstance(output, ToolMessage):
            if output.status == "error":
                self.tool_errors.append(message_text(output))
            self.result_ids |= ids_in_tool_results([output])
            _names(parse_result_text(message_text(output)), self.result_names)


def _tool_names(tools: Any) -> set[str]:
    """The names in a model call's bound ``tools`` (a provider's ``{"function": {"name"}}`` form,
    a plain ``{"name"}`` dict, or a tool object)."""
    names: set[str] = set()
    for tool in tools if isinstance(tools, list | tuple) else ():
        if isinstance(tool, dict):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else tool.get("name")
        else:
            name = getattr(tool, "name", None)
        if isinstance(name, str) and name:
            names.add(name)
    return names


def _names(value: Any, found: set[str]) -> None:
    if isinstance(value, dict):
        for key, child in value.items():
            if key in ("name", "subject") and isinstance(child, str):
                found.add(child)
            else:
                _names(child, found)
    elif isinstance(value, list):
        for child in value:
            _names(child, found)


_current: ContextVar[RunObserver | None] = ContextVar("copilot_eval_observer", default=None)
register_configure_hook(_current, inheritable=True)


@contextmanager
def observing() -> Iterator[RunObserver]:
    """Every LangChain run started inside the block reports to the returned observer."""
    observer = RunObserver()
    token = _current.set(observer)
    try:
        yield observer
    finally:
        _current.reset(token)
