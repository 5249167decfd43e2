"""The current question's history as the offline model sees it: calls made and their results.

Only messages after the last human message belong to the current question. Tool
results are parsed into :class:`ToolResult` (JSON data, error code, rejection) so the
planner and the composer never look at raw message content.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from copilot.citations import message_text
from copilot.tools.crm_client import parse_result_text

SUMMARY_PREFIX = "Here is a summary of the conversation to date:"
LATEST_REQUEST_LABEL = "Latest request:"
_UNAVAILABLE_CODES = frozenset({"unavailable", "rate_limited", "timeout", "circuit_open", "crm_unavailable"})
_REJECTION_RE = re.compile(r"\brejected\b.*?(?:\bwith reason:?\s*(?P<reason>.*))?$", re.I | re.DOTALL)


def as_dict(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (tool data is never trusted to be shaped)."""
    return value if isinstance(value, dict) else {}


def _parse_json(text: str) -> Any:
    # Tool wrappers sometimes add a prefix (an approval note, "Error: …"); the JSON
    # object that runs to the end of the text is the result.
    value = parse_result_text(text)
    return None if isinstance(value, str) else value


@dataclass(frozen=True)
class ToolResult:
    """One tool result, understood: its JSON data or its failure."""

    text: str
    data: Any = None
    error_code: str | None = None
    error_message: str = ""
    rejected: bool = False
    reason: str = ""
    for_rep: bool = False
    """The error's message is written for the rep (a question back): shown as it is."""

    @property
    def ok(self) -> bool:
        """Neither an error nor a rejection."""
        return self.error_code is None and not self.rejected

    @property
    def unavailable(self) -> bool:
        """The CRM (or the copilot's guard around it) could not serve the call right now."""
        return self.error_code in _UNAVAILABLE_CODES

    @property
    def conflict(self) -> bool:
        """A write found the record changed since it was read."""
        return self.error_code == "conflict"

    @property
    def items(self) -> list[dict[str, Any]]:
        """The ``items`` of a list result (empty when there are none or on error)."""
        if isinstance(self.data, dict) and isinstance(self.data.get("items"), list):
            return [i for i in self.data["items"] if isinstance(i, dict)]
        return []

    @property
    def obj(self) -> dict[str, Any]:
        """The result as a JSON object (empty when it is not one)."""
        return self.data if isinstance(self.data, dict) else {}


def parse_tool_result(message: ToolMessage) -> ToolResult:
    """Classify a tool message: data, an error with a stable code, or the rep's rejection."""
    text = message_text(message)
    data = _parse_json(text)
    failed = getattr(message, "status", "success") == "error"
    if data is None:
        rejection = _REJECTION_RE.search(text) if re.search(r"\brejected\b", text, re.I) else None
        if rejection is not None and re.search(r"\b(user|rep|human)\b", text, re.I):
            reason = (rejection.group("reason") or "").strip().strip("\"'“”`").strip()
            return ToolResult(text=text, rejected=True, reason=reason)
        if failed or re.match(r"\s*error\b", text, re.I):
            return ToolResult(text=text, error_code=_guess_code(text), error_message=text.strip())
        return ToolResult(text=text, data=text)
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            code = str(error.get("code") or "error")
            return ToolResult(
                text=text,
                data=data,
                error_code=code,
                error_message=str(error.get("message", "")),
                for_rep=error.get("for_rep") is True,
            )
        if isinstance(error, str):
            return ToolResult(text=text, data=data, error_code=_guess_code(error), error_message=error)
        if str(data.get("status", "")).lower() == "conflict":
            return ToolResult(
                text=text, data=data, error_code="conflict", error_message=str(data.get("message", ""))
            )
        if str(data.get("status", "")).lower() == "rejected":
            return ToolResult(text=text, data=data, rejected=True, reason=str(data.get("reason", "") or ""))
    if failed:
        return ToolResult(text=text, data=data, error_code=_guess_code(text), error_message=text.strip())
    return ToolResult(text=text, data=data)


def _guess_code(text: str) -> str:
    lower = text.lower()
    for code, words in (
        ("permission_denied", ("permission", "forbidden", "access denied", "not allowed", "insufficient")),
        ("not_found", ("not_found", "not found", "no such")),
        ("rate_limited", ("rate_limited", "rate limit", "too many requests", "429")),
        ("unavailable", ("unavailable", "timeout", "timed out", "circuit", "503", "connection")),
        ("conflict", ("conflict", "version mismatch")),
        ("validation", ("validation", "invalid")),
    ):
        if any(w in lower for w in words):
            return code
    return "error"


@dataclass
class Call:
    """A tool call made in this question, and its result once it arrived."""

    id: str
    name: str
    args: dict[str, Any]
    result: ToolResult | None = None


@dataclass
class Turn:
    """Everything after the last human message: the question and the calls made so far."""

    question: str
    calls: list[Call] = field(default_factory=list)
    previous_answer: str = ""

    def find(self, name: str, args: dict[str, Any]) -> Call | None:
        """The call of ``name`` with exactly these arguments, if one was made."""
        for call in self.calls:
            if call.name == name and call.args == args:
                return call
        return None

    def all(self, name: str) -> list[Call]:
        """Every call of ``name``, oldest first."""
        return [c for c in self.calls if c.name == name]

    def results(self) -> list[tuple[Call, ToolResult]]:
        """Calls that have results, oldest first."""
        return [(c, c.result) for c in self.calls if c.result is not None]


def is_summary_message(message: BaseMessage) -> bool:
    """Whether a human message is SummarizationMiddleware's stand-in for older history."""
    source = message.additional_kwargs.get("lc_source") if message.additional_kwargs else None
    return source == "summarization" or message_text(message).startswith(SUMMARY_PREFIX)


def current_turn(messages: Sequence[BaseMessage]) -> Turn:
    """The current question and the tool calls/results that followed it."""
    last_human = -1
    for i, message in enumerate(messages):
        if isinstance(message, HumanMessage):
            last_human = i
    question = ""
    previous_answer = ""
    if last_human >= 0:
        human = messages[last_human]
        question = message_text(human)
        if is_summary_message(human):
            # The question itself was summarised away: the summary names it.
            m = re.search(rf"^{re.escape(LATEST_REQUEST_LABEL)}\s*(.+)$", question, re.M)
            question = m.group(1).strip().strip('"') if m else ""
        for message in reversed(messages[:last_human]):
            if isinstance(message, AIMessage) and not message.tool_calls:
                previous_answer = message_text(message)
                break
    turn = Turn(question=question, previous_answer=previous_answer)
    by_id: dict[str, Call] = {}
    for message in messages[last_human + 1 :]:
        if isinstance(message, AIMessage):
            for tc in message.tool_calls:
                call = Call(id=str(tc.get("id") or ""), name=tc["name"], args=dict(tc.get("args") or {}))
                turn.calls.append(call)
                if call.id:
                    by_id[call.id] = call
        elif isinstance(message, ToolMessage):
            target = by_id.get(message.tool_call_id)
            if target is None:
                # A result for a call we cannot see (e.g. trimmed): keep it, named by the message.
                target = Call(id=message.tool_call_id, name=str(message.name or ""), args={})
                turn.calls.append(target)
            target.result = parse_tool_result(message)
    return turn


def every_result(messages: Sequence[BaseMessage]) -> list[tuple[str, ToolResult]]:
    """``(tool name, result)`` for every tool result in the conversation, oldest first.

    The name comes from the model's call when the result does not carry it.
    """
    names: dict[str, str] = {}
    found: list[tuple[str, ToolResult]] = []
    for message in messages:
        if isinstance(message, AIMessage):
            for tc in message.tool_calls:
                if tc.get("id"):
                    names[str(tc["id"])] = tc["name"]
        elif isinstance(message, ToolMessage):
            name = names.get(message.tool_call_id) or str(message.name or "")
            found.append((name, parse_tool_result(message)))
    return found


def system_text(messages: Sequence[BaseMessage]) -> str:
    """All system messages' text (only used to detect a summarisation request)."""
    return "\n".join(message_text(m) for m in messages if isinstance(m, SystemMessage))
