"""The deterministic offline chat model: the product's default when no model API is reachable.

``OfflineChatModel`` is a real :class:`~langchain_core.language_models.BaseChatModel`:
it supports ``bind_tools`` (each tool is described by its name, description, argument
schema and MCP annotations, :mod:`catalog`), sync and async generation, and
``with_structured_output`` through the base class's tool-calling implementation. On each
call it

1. answers a summarisation request (SummarizationMiddleware) with an extractive summary;
2. otherwise understands the LAST human message (:mod:`intents`), looks at the tool calls
   and results that followed it (:mod:`state`) and the record ids results returned
   (:mod:`records`), and plans the next step (:mod:`plan`): several independent reads in
   one message, a write proposal, or an answer composed only from tool results.

Tool results are data: only the rep's own words choose tools. The only randomness is
``uuid4`` for tool call ids.
"""

from __future__ import annotations

import datetime
import re
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, ToolCall
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool

from offline_model.catalog import ToolCatalog, described
from offline_model.context import PlanContext
from offline_model.intents import parse_request
from offline_model.limits import honest
from offline_model.lookup import unmatched_words
from offline_model.plan import plan
from offline_model.records import RecordIndex, drop_unseen_citations
from offline_model.roles import DETAIL_ARGUMENT, DETAIL_ROLES, ROLES, Kind
from offline_model.sql import SqlSurface
from offline_model.state import Turn, current_turn, every_result
from offline_model.steps import PlannedCall, Step
from offline_model.structured import best_effort_args, forced_tool
from offline_model.summary import extractive_summary, is_summary_request


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex}"


def _result_kind(catalog: ToolCatalog, name: str) -> Kind | None:
    """What a tool's top-level records are, from the role it serves."""
    for role in catalog.roles_of(name):
        kind = ROLES[role].kind
        if kind is not None:
            return kind
    return None


def record_index(messages: Sequence[BaseMessage], catalog: ToolCatalog) -> RecordIndex:
    """Every record id the conversation's tool results returned, with its kind where it shows."""
    index = RecordIndex()
    for name, result in every_result(messages):
        index.add_result(result.data, _result_kind(catalog, name))
    return index


def seen_in_turn(turn: Turn, catalog: ToolCatalog) -> set[str]:
    """Every record id this question's tool results contained (the only ids an answer may cite)."""
    index = RecordIndex()
    for call, result in turn.results():
        index.add_result(result.data, _result_kind(catalog, call.name))
    return index.ids()


def ruled_out(turn: Turn, catalog: ToolCatalog) -> set[str]:
    """Words this question already read as ids.

    One the read returned is a known record from then on (so this set no longer matters
    for it); one it did not return (an error, or another record) is a word.
    """
    words: set[str] = set()
    for kind, role in DETAIL_ROLES.items():
        name = catalog.name(role)
        for call in turn.all(name) if name else []:
            value = call.args.get(DETAIL_ARGUMENT[kind])
            if call.result is not None and isinstance(value, str):
                words.add(value)
    return words


_TODAY_IS = re.compile(r"\bToday is (\d{4}-\d{2}-\d{2})\b")


def prompt_date(messages: Sequence[BaseMessage]) -> datetime.date | None:
    """The date the system prompt gives as today, if it gives one."""
    for message in messages:
        if message.type == "system":
            found = _TODAY_IS.search(message.text)
            if found is not None:
                return datetime.date.fromisoformat(found.group(1))
    return None


class OfflineChatModel(BaseChatModel):
    """A deterministic, tool-calling chat model that plans from the rep's words and answers from tool results.

    ``today`` fixes the date used for "this quarter", "Dec 15" and "yesterday" (tests);
    otherwise it is the date the system prompt names ("Today is 2026-12-09.", as a real
    model learns it from the service's clock), else the current date at each call.
    """

    today: datetime.date | None = None
    model_name: str = "offline"

    @property
    def _llm_type(self) -> str:
        return "offline"

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
        """Bind tools (described as JSON: name, description, schema, read-only) and an optional ``tool_choice``.

        Each tool is described once and the description kept (``create_agent`` binds the
        same tools before every model call), so the bound dicts are shared: read-only.
        """
        bound = [described(tool) for tool in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=bound, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        catalog = ToolCatalog.from_kwargs(kwargs.get("tools"))
        message = self.respond(messages, catalog, tool_choice=kwargs.get("tool_choice"))
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # Pure CPU work on a few messages: no need for a thread.
        return self._generate(messages, stop=stop, **kwargs)

    def respond(
        self, messages: Sequence[BaseMessage], catalog: ToolCatalog, *, tool_choice: Any = None
    ) -> AIMessage:
        """The model's next message for this conversation and these bound tools."""
        today = self.today or prompt_date(messages) or datetime.date.today()
        spoken = messages
        # A CRM whose reads are one SQL tool: its queries are read back as the reads they were.
        surface = SqlSurface.of(catalog, messages)
        if surface is not None:
            catalog = surface.catalog(catalog)
            messages = surface.virtualize(messages)
        prompt = is_summary_request(messages)
        if prompt is not None and not catalog:
            return self._message(extractive_summary(prompt), [], messages)
        turn = current_turn(messages)
        records = record_index(messages, catalog)
        not_names = unmatched_words(turn, catalog.name("account_search"))
        request = parse_request(
            turn.question,
            today,
            records,
            ruled_out=ruled_out(turn, catalog),
            check_ids=any(catalog.has(role) for role in DETAIL_ROLES.values()),
            words=not_names,
        )
        forced, must_call = forced_tool(tool_choice, list(catalog.tools))
        if prompt is not None:
            step = Step(answer=extractive_summary(prompt))
        else:
            ctx = PlanContext(request, turn, catalog, records, today)
            # Only a question read completely is answered (the rest gets the honest limit).
            step = honest(ctx, plan(ctx), messages, not_names)
        answer = drop_unseen_citations(step.answer, seen_in_turn(turn, catalog)) if step.answer else ""
        calls = step.calls
        if tool_choice == "none":
            calls = []
            answer = answer or "I need to look that up in the CRM, but tools are switched off for this step."
        parameters = catalog.parameters(forced) if forced is not None else None
        if forced is not None and parameters is not None:
            planned = [call for call in calls if call.name == forced]
            if not planned:
                planned = [
                    PlannedCall(forced, best_effort_args(parameters, request, turn.question, answer, today))
                ]
            calls = planned[:1]
        elif must_call and not calls:
            # Structured output alongside real tools (create_agent's ToolStrategy): the
            # answer goes into the first bound schema that serves no role of the planner.
            schemas = catalog.without_role()
            if schemas:
                target = schemas[0]
                args = best_effort_args(
                    catalog.parameters(target) or {}, request, turn.question, answer, today
                )
                calls = [PlannedCall(target, args)]
        content = answer if not calls else step.answer
        noted: dict[str, Any] = {}
        if surface is not None:
            calls, noted = surface.realize(calls)
        return self._message(content, calls, spoken, noted)

    def _message(
        self,
        content: str,
        calls: Sequence[PlannedCall],
        messages: Sequence[BaseMessage],
        noted: dict[str, Any] | None = None,
    ) -> AIMessage:
        tool_calls = [ToolCall(name=c.name, args=c.args, id=_new_call_id(), type="tool_call") for c in calls]
        input_tokens = count_tokens_approximately(list(messages))
        output_tokens = max(1, len(content) // 4) + 20 * len(tool_calls)
        return AIMessage(
            content=content,
            tool_calls=tool_calls,
            response_metadata={
                "model_name": self.model_name,
                "finish_reason": "tool_calls" if tool_calls else "stop",
                **(noted or {}),
            },
            usage_metadata={
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
            },
        )
