"""The rep's decisions on pending proposals: the wire format and its validation (pure)."""

from __future__ import annotations

import math
import reprlib
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from copilot.errors import InvalidDecision
from copilot.writes import WRITE_TOOL_SCHEMAS


class _Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool_call_id: str = Field(min_length=1)
    digest: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="The proposal's digest as shown (ask --json); binds the decision to those arguments",
    )


class Approve(_Decision):
    type: Literal["approve"]


class Edit(_Decision):
    type: Literal["edit"]
    args: dict[str, Any] = Field(description="Changed fields (merged over the proposal); null clears a field")
    tool: str | None = Field(default=None, description="Must match the proposal's tool if given")


class Reject(_Decision):
    type: Literal["reject"]
    reason: str = Field(min_length=1, max_length=1000)


Decision = Annotated[Approve | Edit | Reject, Field(discriminator="type")]
_DECISIONS = TypeAdapter(list[Decision])

MAX_DEPTH = 32
"""Deepest nesting accepted in decisions (a list of objects whose edit args hold values: 4 suffice)."""
MAX_VALUES = 10_000
"""Most values (strings, numbers, lists, objects, at any depth) accepted in one set of decisions."""

# Rejected values are named in error messages: shown shortened, and never walked deeper
# than a few levels (a plain repr of a deeply nested value recurses without bound).
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlong = 3, 120, 120, 60


def _check_shape(raw: Any) -> None:
    """Refuse data no decision can be, before anything walks it recursively (pure).

    Bounds the nesting depth and the number of values, so that validation, error messages
    (``repr``), serialization and the checkpointer never recurse without bound or chew on
    a huge value; refuses text PostgreSQL cannot store (NUL, unpaired surrogates) and
    numbers JSON and databases cannot carry (NaN, infinities, integers beyond 64 bits).
    Iterative, so itself bounded; it ends on self-referencing data too (the depth bound
    catches the cycle).
    """
    stack: list[tuple[Any, int]] = [(raw, 0)]
    counted = 1
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidDecision(f"invalid decisions: nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, str):
            _check_text(value)
        elif isinstance(value, int):
            # What a database column or another JSON parser holds; a longer one is no value.
            if not -(2**63) <= value < 2**63:
                raise InvalidDecision("invalid decisions: an integer is too large (64 bits at most)")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise InvalidDecision(f"invalid decisions: {value} is not a finite number")
        elif isinstance(value, dict | list | tuple):
            # Counted when pushed, so the stack itself never outgrows the bound.
            counted += len(value)
            if counted > MAX_VALUES:
                raise InvalidDecision(f"invalid decisions: more than {MAX_VALUES} values")
            if isinstance(value, dict):
                for key, item in value.items():
                    if isinstance(key, str):
                        _check_text(key)
                    stack.append((item, depth + 1))
            else:
                stack.extend((item, depth + 1) for item in value)


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise InvalidDecision("invalid decisions: text contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        # A lone surrogate (from a JSON "\\ud800" escape or a non-UTF-8 command line).
        raise InvalidDecision("invalid decisions: text is not valid Unicode (an unpaired surrogate)") from exc


def parse_decisions(raw: Any) -> list[Approve | Edit | Reject]:
    """Decisions from JSON-ready data; a clear ``InvalidDecision`` for anything malformed."""
    _check_shape(raw)
    try:
        decisions = _DECISIONS.validate_python(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the list"
        raise InvalidDecision(f"invalid decisions ({where}): {first['msg']}") from exc
    seen: set[str] = set()
    for decision in decisions:
        if decision.tool_call_id in seen:
            raise InvalidDecision(f"proposal {decision.tool_call_id} is decided twice in one request")
        seen.add(decision.tool_call_id)
    if not decisions:
        raise InvalidDecision("no decisions given")
    return decisions


def validation_problems(exc: ValidationError) -> str:
    """A short, human-readable list of what is wrong, naming the rejected values (pure)."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "arguments"
        got = error.get("input")
        shown = (
            f" (got {_SHOWN.repr(got)})" if error["type"] != "missing" and not isinstance(got, dict) else ""
        )
        problems.append(f"{where}: {error['msg']}{shown}")
    return "; ".join(problems)


def edited_args(tool: str, original: dict[str, Any], edit: Edit) -> dict[str, Any]:
    """The proposal's arguments after an edit, validated against the tool's schema."""
    if edit.tool is not None and edit.tool != tool:
        raise InvalidDecision(f"the tool of a proposal cannot be changed (it is {tool}, not {edit.tool})")
    schema = WRITE_TOOL_SCHEMAS[tool]
    merged = {**original, **edit.args}
    merged = {k: v for k, v in merged.items() if v is not None}
    try:
        validated = schema.model_validate(merged)
    except ValidationError as exc:
        problems = validation_problems(exc)
        raise InvalidDecision(f"the edited {tool} is invalid, nothing was changed: {problems}") from exc
    return validated.model_dump(mode="json", exclude_none=True)
