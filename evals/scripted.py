"""Scripted models for evals only: models that misbehave the way real ones do, so that
``python -m evals --model scripted:lazy`` measures what the copilot shows a rep when
its model does.

Nothing a deployment can configure reaches them. The product's model factory
(:func:`copilot.models.factory.build_model`) knows ``offline`` and ``init_chat_model``'s
``provider:model`` names, and ``scripted`` is no provider of ``init_chat_model`` (so
``COPILOT_MODEL=scripted:lazy`` outside an eval fails to start); only the eval's runner
(:func:`evals.run.evaluate_model`) builds them, through :func:`scripted_model`, and
hands the instance to ``open_service(model=...)``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from copilot import writes
from copilot.citations import message_text
from copilot.errors import InvalidInput

SCRIPTED_PREFIX = "scripted:"

LAZY_ANSWER = (
    "I checked: there is nothing open for that account. "
    "No recent activity or next step is logged on it either."
)
"""What the lazy model says to every question: CRM facts it never read."""

STATES_FACTS_FIELD = "states_record_facts"
"""The grounding gate's question to a model, as a boolean field of a forced tool call:
does its reply state CRM facts?"""


def _bound(tool: Any) -> dict[str, Any]:
    """A bound tool as JSON: name, argument schema, and what kind of tool it is.

    ``read``: a tool annotated ``readOnlyHint: True`` (MCP annotations, the copilot's own read
    tools), or a tool without the annotation that is no registry write. ``write``: any other
    tool. ``schema``: a bound schema that is no tool (structured output, a classification).
    """
    function = convert_to_openai_tool(tool)["function"]
    name = str(function["name"])
    if isinstance(tool, BaseTool):
        hint = (tool.metadata or {}).get("readOnlyHint")
        read = hint is True or (hint is None and not writes.is_write(name))
        kind = "read" if read else "write"
    else:
        kind = "schema"
    params = function.get("parameters")
    return {"name": name, "parameters": params if isinstance(params, dict) else {}, "kind": kind}


def _forced(tool_choice: Any, tools: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The tool a ``tool_choice`` makes the model call (``None``: no call is forced).

    A named tool is that tool; ``"any"`` / ``"required"`` / ``True`` is the only bound tool
    when there is one (``with_structured_output``), else a schema asking
    ``states_record_facts``, else the first read tool (else the first bound tool).
    """
    if tool_choice in (None, "auto", "none", False) or not tools:
        return None
    if tool_choice in ("any", "required", True):
        if len(tools) == 1:
            return tools[0]
        asked = [t for t in tools if STATES_FACTS_FIELD in (t["parameters"].get("properties") or {})]
        reads = [t for t in tools if t["kind"] == "read"]
        return [*asked, *reads, tools[0]][0]
    name = tool_choice
    if isinstance(tool_choice, Mapping):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else tool_choice.get("name")
    return next((t for t in tools if t["name"] == name), None)


def _value(name: str, schema: Mapping[str, Any], text: str) -> Any:
    """A valid value for one argument: ``states_record_facts`` true, strings ``text``."""
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            typed = [o for o in options if isinstance(o, Mapping) and o.get("type") != "null"]
            if typed:
                schema = {**schema, **typed[0]}
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = schema.get("type")
    if kind == "boolean":
        return name == STATES_FACTS_FIELD
    if kind in ("integer", "number"):
        low = schema.get("minimum", 1)
        return int(low) if kind == "integer" else float(low)
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return text


def arguments(parameters: Mapping[str, Any], text: str) -> dict[str, Any]:
    """Arguments for a forced call from its JSON schema: every required field (and
    ``states_record_facts`` whenever the schema has it), of its type, strings ``text``."""
    props = parameters.get("properties")
    props = props if isinstance(props, Mapping) else {}
    wanted = set(parameters.get("required") or []) | ({STATES_FACTS_FIELD} & set(props))
    return {
        name: _value(name, schema if isinstance(schema, Mapping) else {}, text)
        for name, schema in props.items()
        if name in wanted
    }


def _question(messages: Sequence[BaseMessage]) -> str:
    """The rep's last message, as plain words."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return " ".join(re.findall(r"[\w'-]+", message_text(message))) or "account"
    return "account"


class LazyChatModel(BaseChatModel):
    """A chat model that answers every question without reading, as real models do.

    Small open models (and a hosted one behind a fallback) answer "no open deals" without
    calling a tool; this model always does, so an eval shows what the copilot lets through:

    * no ``tool_choice`` (or ``"auto"`` / ``"none"``): no tool call; the answer is
      :data:`LAZY_ANSWER`, CRM facts stated as if they had been read, whatever was asked and
      whatever tool results the conversation holds (a result is never used);
    * ``tool_choice`` naming a bound tool, or ``"any"`` / ``"required"`` / ``True`` with one
      tool bound (``with_structured_output``, the grounding gate's classification): that
      tool is called, with :func:`arguments` from its JSON schema; its answers to the gate are
      honest, so a boolean ``states_record_facts`` is ``True`` (every lazy reply states CRM
      facts) and any other boolean ``False``; strings are :data:`LAZY_ANSWER` in a schema
      and the question's words in a tool's arguments;
    * ``"any"`` / ``"required"`` / ``True`` with several tools bound: it calls the first
      bound read tool (``readOnlyHint: True``, or no annotation and no registry write) with
      its required arguments filled (strings from the question's words), and answers the
      next call from nothing again.

    ``bind_tools`` keeps each tool's name, schema and kind only to serve a forced call. Usage
    metadata is an approximate count, so token totals are comparable with other models'.
    """

    model_name: str = "scripted:lazy"

    @property
    def _llm_type(self) -> str:
        return "scripted-lazy"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | dict[str, Any] | bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools (kept only for a forced call; never used to answer) and a ``tool_choice``."""
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=[_bound(tool) for tool in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = self.respond(messages, kwargs.get("tools") or [], kwargs.get("tool_choice"))
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._generate(messages, stop=stop, **kwargs)

    def respond(
        self, messages: Sequence[BaseMessage], tools: Sequence[Mapping[str, Any]], tool_choice: Any
    ) -> AIMessage:
        """The next message: a lazy answer, or the one call a ``tool_choice`` forces."""
        forced = _forced(tool_choice, tools)
        calls: list[ToolCall] = []
        content = LAZY_ANSWER
        if forced is not None:
            text = LAZY_ANSWER if forced["kind"] == "schema" else _question(messages)
            args = arguments(forced["parameters"], text)
            calls = [
                ToolCall(name=forced["name"], args=args, id=f"call_{uuid.uuid4().hex}", type="tool_call")
            ]
            content = ""
        input_tokens = count_tokens_approximately(list(messages))
        output_tokens = max(1, len(content) // 4) + 20 * len(calls)
        return AIMessage(
            content=content,
            tool_calls=calls,
            response_metadata={
                "model_name": self.model_name,
                "finish_reason": "tool_calls" if calls else "stop",
            },
            usage_metadata={
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
            },
        )


SCRIPTED_MODELS: dict[str, Callable[[], BaseChatModel]] = {"scripted:lazy": LazyChatModel}
"""The eval's scripted models by ``--model`` name."""


def is_scripted(name: str) -> bool:
    """Whether a ``--model`` name asks for one of the eval's scripted models."""
    return name.strip().lower().startswith(SCRIPTED_PREFIX)


def scripted_model(name: str) -> BaseChatModel:
    """The scripted model ``name`` names; an unknown one is bad input."""
    build = SCRIPTED_MODELS.get(name.strip().lower())
    if build is None:
        known = ", ".join(sorted(SCRIPTED_MODELS))
        raise InvalidInput(f"no scripted model {name!r} (known: {known})")
    return build()
