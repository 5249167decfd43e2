"""Forced tool calls: ``tool_choice``, and arguments for a schema the planner has no plan for.

``with_structured_output`` and create_agent's ``ToolStrategy`` bind a response schema as
a tool and force a call; the offline model fills it from the rep's message.
"""

from __future__ import annotations

import datetime
import itertools
import re
from typing import Any

from offline_model.intents import Request
from offline_model.state import as_dict
from offline_model.text import (
    account_candidates,
    find_amount,
    find_date,
    find_dates,
    find_stage,
    mask,
    name_runs,
)


def forced_tool(tool_choice: Any, names: list[str]) -> tuple[str | None, bool]:
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


def schema_type(schema: dict[str, Any]) -> dict[str, Any]:
    """The non-null branch of an optional argument's schema (its title kept)."""
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
        schema = schema_type(raw if isinstance(raw, dict) else {})
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
    if kind == "boolean" and any(w in name for w in ("change", "write", "update")):
        # "Does the message ask for a change?": what the offline model would do with it.
        return request.is_write
    if kind == "boolean" or kind in ("array", "object"):
        return None
    if "date" in name or schema.get("format") in ("date", "date-time"):
        day = find_date(text, today)
        return day.isoformat() if day else None
    if any(w in name for w in _PERSON_FIELDS):
        return find_person(text, today)
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


_PERSON_FIELDS = ("colleague", "person", "delegate", "assignee")
"""Argument names that take a person as the rep named them."""
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_REDACTED = re.compile(r"\[REDACTED_[A-Z_]+\]")
_PERSON_AFTER = frozenset({"to", "for", "with", "from", "by"})


def find_person(text: str, today: datetime.date) -> str | None:
    """The person the rep names: an email address, else the name after "to" / "for" / "with"
    ("delegate approvals to megan"), else the first capitalised name ("can Megan Bowen approve").
    Dates are left out first ("until Friday" is no one)."""
    email = _EMAIL.search(text) or _REDACTED.search(text)
    if email is not None:
        # An address the copilot kept from the model is passed on as it was shown.
        return email.group(0)
    runs = name_runs(mask(text, find_dates(text, today)))
    after = [r for r in runs if r.after in _PERSON_AFTER]
    capitalised = [r for r in runs if r.capitalised]
    for run in after or capitalised:
        words = run.text.split()
        proper = list(itertools.takewhile(lambda w: w[:1].isupper(), words)) if run.capitalised else words
        return " ".join(proper or words)
    return None


def _empty_of(schema: dict[str, Any], text: str) -> Any:
    kind = schema.get("type")
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    return {"integer": 0, "number": 0.0, "boolean": False, "array": [], "object": {}}.get(str(kind), text)
