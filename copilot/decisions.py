"""The rep's decisions on pending proposals: the wire format and its validation (pure)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from copilot.errors import InvalidDecision
from copilot.tools.schemas import WRITE_TOOL_SCHEMAS


class _Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool_call_id: str = Field(min_length=1)


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


def parse_decisions(raw: Any) -> list[Approve | Edit | Reject]:
    """Decisions from JSON-ready data; a clear ``InvalidDecision`` for anything malformed."""
    try:
        decisions = _DECISIONS.validate_python(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
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
        shown = f" (got {got!r})" if error["type"] != "missing" and not isinstance(got, dict) else ""
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
