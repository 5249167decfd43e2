"""The deterministic offline chat model: the product's default when no model API is reachable.

``OfflineChatModel`` is a real :class:`~langchain_core.language_models.BaseChatModel`:
it supports ``bind_tools`` (tools arrive as OpenAI-format JSON schemas in the call's
kwargs, with ``tool_choice``), sync and async generation, and ``with_structured_output``
through the base class's tool-calling implementation. On each call it

1. answers a summarisation request (SummarizationMiddleware) with an extractive summary;
2. otherwise understands the LAST human message (:mod:`offline_intents`), looks at the
   tool calls and results that followed it (:mod:`offline_state`), and plans the next
   step (:mod:`offline_plan`): several independent reads in one message, a write
   proposal, or an answer composed only from tool results (:mod:`offline_compose`).

Tool results are data: only the rep's own words choose tools. The only randomness is
``uuid4`` for tool call ids.
"""

from __future__ import annotations

import datetime
import html
import re
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from copilot.models.offline_intents import Request, parse_request
from copilot.models.offline_plan import PlannedCall, Planner, Step
from copilot.models.offline_state import (
    LATEST_REQUEST_LABEL,
    SUMMARY_PREFIX,
    Turn,
    as_dict,
    current_turn,
    message_text,
    system_text,
)
from copilot.models.offline_text import (
    account_candidates,
    find_amount,
    find_date,
    find_record_ids,
    find_stage,
)

KNOWN_TOOLS = frozenset(
    {
        "search_accounts",
        "get_account",
        "list_opportunities",
        "get_opportunity",
        "list_activities",
        "list_contacts",
        "pipeline_summary",
        "log_activity",
        "update_opportunity",
        "draft_followup_email",
        "update_preferences",
        "get_preferences",
    }
)
"""The tools whose meaning the offline model knows; any other bound tool is a structured-output schema."""

# Phrases of LangChain's DEFAULT_SUMMARY_PROMPT (and the gist of any summarisation prompt).
SUMMARY_MARKERS = (
    "Messages to summarize:",
    "Context Extraction Assistant",
    "conversation history below will be replaced",
    "extract the most important and relevant context",
)
SUMMARY_LIMIT = 1500
_WRITE_TOOL_RE = re.compile(
    r'name="(log_activity|update_opportunity|draft_followup_email|update_preferences)"|'
    r"\b(log_activity|update_opportunity|draft_followup_email|update_preferences)\("
)
_CITATION_RE = re.compile(r"\s?\[([A-Za-z][A-Za-z0-9]*-[A-Za-z0-9._-]+)\]")


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex}"


def is_summary_request(messages: Sequence[BaseMessage]) -> str | None:
    """The summarisation prompt's text if this call is a summarisation request, else ``None``."""
    humans = [m for m in messages if isinstance(m, HumanMessage)]
    candidates = [message_text(humans[-1])] if humans else []
    candidates.append(system_text(messages))
    for text in candidates:
        if sum(marker.lower() in text.lower() for marker in SUMMARY_MARKERS) >= 1 and len(text) > 200:
            if humans:
                return message_text(humans[-1])
            return text
    return None


def extractive_summary(prompt: str) -> str:
    """A deterministic summary of the history inside a summarisation prompt.

    Lists the rep's requests (carrying over those of an earlier summary), the record ids
    mentioned and the writes proposed, and ends with the latest request so a later call
    can still see what is being worked on. At most ``SUMMARY_LIMIT`` characters.
    """
    history = prompt.split("Messages to summarize:", 1)[-1]
    humans = re.findall(r'<message type="human">(.*?)</message>', history, re.S)
    if not humans:
        humans = re.findall(r"^Human:\s*(.*)$", history, re.M)
    requests: list[str] = []
    for raw in humans:
        text = html.unescape(raw).strip()
        if text.startswith(SUMMARY_PREFIX):
            requests += re.findall(r'^- Rep asked: "(.*)"$', text, re.M)
            continue
        line = " ".join(text.split())
        requests.append(line if len(line) <= 160 else line[:159] + "…")
    ids = find_record_ids(html.unescape(history))
    writes = sorted({a or b for a, b in _WRITE_TOOL_RE.findall(history)})
    latest = requests[-1] if requests else ""

    def render(keep_requests: list[str], keep_ids: list[str]) -> str:
        lines = [
            "## SESSION INTENT",
            "A sales rep using the CRM copilot (questions, drafts and approved updates).",
            "",
            "## SUMMARY",
        ]
        lines += [f'- Rep asked: "{r}"' for r in keep_requests] or ["- None"]
        lines += ["", "## ARTIFACTS"]
        lines.append(f"- Records referenced: {', '.join(keep_ids)}" if keep_ids else "- None")
        if writes:
            lines.append(f"- Writes proposed: {', '.join(writes)}")
        lines += ["", "## NEXT STEPS", "- Continue with the latest request." if latest else "- None"]
        if latest:
            lines.append(f"{LATEST_REQUEST_LABEL} {latest}")
        return "\n".join(lines)

    keep_requests, keep_ids = requests[-8:], ids[:40]
    summary = render(keep_requests, keep_ids)
    while len(summary) > SUMMARY_LIMIT and (len(keep_requests) > 1 or len(keep_ids) > 5):
        if len(keep_ids) > 5:
            keep_ids = keep_ids[: max(5, len(keep_ids) // 2)]
        else:
            keep_requests = keep_requests[1:]
        summary = render(keep_requests, keep_ids)
    return summary[:SUMMARY_LIMIT]


def seen_ids(turn: Turn) -> set[str]:
    """Every record id that appeared in this question's tool results."""
    seen: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "id" and isinstance(value, str):
                    seen.add(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, str):
            seen.update(find_record_ids(node))

    for _, result in turn.results():
        walk(result.data)
        seen.update(find_record_ids(result.text))
    return seen


def drop_unseen_citations(answer: str, seen: set[str]) -> str:
    """Remove ``[id]`` citations of ids no tool result contained (a last line of defence)."""
    return _CITATION_RE.sub(lambda m: m.group(0) if m.group(1) in seen else "", answer)


def _schema_type(schema: dict[str, Any]) -> dict[str, Any]:
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            for option in options:
                if isinstance(option, dict) and option.get("type") != "null":
                    return {**schema, **option}
    return schema


def best_effort_args(
    parameters: dict[str, Any], request: Request, text: str, answer: str, today: datetime.date
) -> dict[str, Any]:
    """Arguments for a forced tool the offline model has no plan for (e.g. a structured-output schema).

    Each property gets a value found in the rep's message when its name or type says what
    it is (a date, an amount, a stage, an account, free text), else its default; required
    properties without either get an empty value of their type.
    """
    props = as_dict(parameters.get("properties"))
    required = set(parameters.get("required") or [])
    args: dict[str, Any] = {}
    for name, raw in props.items():
        schema = _schema_type(raw if isinstance(raw, dict) else {})
        value = _extract_for(name.lower(), schema, request, text, answer, today)
        if value is None and "default" in schema:
            value = schema["default"]
        if value is None and name in required:
            value = _empty_of(schema, text)
        if value is not None or name in required:
            args[name] = value
    return args


def _extract_for(
    name: str, schema: dict[str, Any], request: Request, text: str, answer: str, today: datetime.date
) -> Any:
    kind = schema.get("type")
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        for option in enum:
            if isinstance(option, str) and re.search(rf"\b{re.escape(option)}\b", text, re.I):
                return option
        return None
    if kind in ("integer", "number"):
        amount = find_amount(text, plain_numbers=True)
        if amount is not None:
            value = amount.value.value  # type: ignore[attr-defined]
            return int(value) if kind == "integer" else value
        return None
    if kind == "boolean" or kind in ("array", "object"):
        return None
    if "date" in name or schema.get("format") in ("date", "date-time"):
        day = find_date(text, today)
        return day.isoformat() if day else None
    if "stage" in name:
        stage = find_stage(text)
        return stage.value if stage else None
    if any(w in name for w in ("account", "company", "customer", "query")):
        names = request.account_queries or account_candidates(text)
        return names[0] if names else None
    if any(
        w in name for w in ("answer", "summary", "response", "content", "text", "body", "message", "reply")
    ):
        return answer or text
    return None


def _empty_of(schema: dict[str, Any], text: str) -> Any:
    kind = schema.get("type")
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    return {"integer": 0, "number": 0.0, "boolean": False, "array": [], "object": {}}.get(str(kind), text)


def _forced_tool(tool_choice: Any, names: list[str]) -> tuple[str | None, bool]:
    """``(tool that must be called, whether some tool must be called)`` from ``tool_choice``."""
    if tool_choice is None or tool_choice in ("auto", "none", False):
        return None, False
    if tool_choice in ("any", "required", True):
        return (names[0] if len(names) == 1 else None), True
    if isinstance(tool_choice, str):
        return tool_choice, True
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, dict) else tool_choice.get("name")
        return (str(name) if name else None), True
    return None, False


class OfflineChatModel(BaseChatModel):
    """A deterministic, tool-calling chat model that plans from the rep's words and answers from tool results.

    ``today`` fixes the date used for "this quarter", "Dec 15" and "yesterday" (tests);
    by default it is the current date at each call.
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
        """Bind tools (kept as OpenAI-format JSON schemas) and an optional ``tool_choice``."""
        formatted = [convert_to_openai_tool(tool) for tool in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=formatted, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = self.respond(messages, tools=kwargs.get("tools"), tool_choice=kwargs.get("tool_choice"))
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
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> AIMessage:
        """The model's next message for this conversation and these bound tools."""
        today = self.today or datetime.date.today()
        specs = _tool_specs(tools or [])
        prompt = is_summary_request(messages)
        if prompt is not None and not specs:
            return self._message(extractive_summary(prompt), [], messages)
        turn = current_turn(messages)
        request = parse_request(turn.question, today)
        forced, must_call = _forced_tool(tool_choice, list(specs))
        if prompt is not None:
            step = Step(answer=extractive_summary(prompt))
        else:
            step = Planner(request, turn, {n for n in specs if n in KNOWN_TOOLS}, today).plan()
        answer = drop_unseen_citations(step.answer, seen_ids(turn)) if step.answer else ""
        calls = step.calls
        if tool_choice == "none":
            calls = []
            answer = answer or "I need to look that up in the CRM, but tools are switched off for this step."
        if forced is not None and forced in specs:
            planned = [call for call in calls if call.name == forced]
            if not planned:
                args = best_effort_args(specs[forced], request, turn.question, answer, today)
                planned = [PlannedCall(forced, args)]
            calls = planned[:1]
        elif must_call and not calls:
            # Structured output alongside real tools (create_agent's ToolStrategy): the
            # answer goes into the first schema the model does not know as a tool.
            schema_tools = [n for n in specs if n not in KNOWN_TOOLS]
            if schema_tools:
                target = schema_tools[0]
                calls = [
                    PlannedCall(
                        target, best_effort_args(specs[target], request, turn.question, answer, today)
                    )
                ]
        content = answer if not calls else step.answer
        return self._message(content, calls, messages)

    def _message(
        self, content: str, calls: Sequence[PlannedCall], messages: Sequence[BaseMessage]
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
            },
            usage_metadata={
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
            },
        )


def _tool_specs(tools: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Bound tool name → JSON schema of its parameters."""
    specs: dict[str, dict[str, Any]] = {}
    for tool in tools:
        function = as_dict(tool.get("function")) or tool
        name = function.get("name")
        if isinstance(name, str):
            params = function.get("parameters")
            specs[name] = params if isinstance(params, dict) else {}
    return specs


__all__ = ["KNOWN_TOOLS", "OfflineChatModel", "best_effort_args", "extractive_summary", "is_summary_request"]
