"""Per-tool test facts derived from the write-tool registry (:mod:`copilot.writes`), never copied.

A suite that needs "the fields of a write tool", "arguments of the wrong type", "an
unknown field" or "some valid arguments" asks here, so a new registry entry is covered
the moment it is registered: nothing keyed by tool name has to grow with it. Everything
is read from the tool's bound argument schema (its Pydantic model's JSON schema, the one
the write guard validates against).

Hand-made realistic cases may sit on top of these in a suite, but a tool without them
gets the derived ones (never a ``KeyError``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from copilot.writes import WRITE_TOOL_SCHEMAS

UNKNOWN_FIELD = "injected_unknown_field"
"""A key no schema has: every write schema is ``extra="forbid"``."""

PRIVILEGED_FIELDS: dict[str, Any] = {
    "owner_id": "u-megan",
    "tenant_id": "00000000-0000-0000-0000-000000000002",
    "idempotency_key": "attacker-chosen-key",
    "rep_aad_object_id": "aad00000-0000-4000-8000-000000000003",
    "expected_version": 1,
}
"""Keys an attacker would like to set (who owns it, whose it is, which key, which version),
offered as extra fields to every tool whose schema does not have them."""


@dataclass(frozen=True)
class FieldFacts:
    """One argument of a write tool, as its JSON schema says."""

    name: str
    schema: dict[str, Any]
    """The field's schema with ``null`` alternatives and ``$ref`` resolved away."""
    required: bool
    nullable: bool

    @property
    def type(self) -> str | None:
        kind = self.schema.get("type")
        return kind if isinstance(kind, str) else None

    @property
    def enum(self) -> list[Any] | None:
        enum = self.schema.get("enum")
        if isinstance(enum, list) and enum:
            return enum
        const = self.schema.get("const")
        return [const] if const is not None else None

    @property
    def format(self) -> str | None:
        fmt = self.schema.get("format")
        return fmt if isinstance(fmt, str) else None


def schema_of(tool: str) -> type[BaseModel]:
    """The registered argument schema of ``tool`` (a ``KeyError`` only for a non-write)."""
    return WRITE_TOOL_SCHEMAS[tool]


def _resolve(raw: dict[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    ref = raw.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref.removeprefix("#/$defs/"), {})
        return {**_resolve(dict(target), defs), **{k: v for k, v in raw.items() if k != "$ref"}}
    if isinstance(raw.get("allOf"), list) and len(raw["allOf"]) == 1:
        return {**_resolve(dict(raw["allOf"][0]), defs), **{k: v for k, v in raw.items() if k != "allOf"}}
    return raw


def fields(tool: str) -> list[FieldFacts]:
    """Every argument of ``tool``, in schema order."""
    full = schema_of(tool).model_json_schema()
    defs = full.get("$defs", {})
    required = set(full.get("required", []))
    out = []
    for name, raw in full.get("properties", {}).items():
        raw = _resolve(dict(raw), defs)
        nullable = False
        options = raw.get("anyOf")
        if isinstance(options, list):
            kept = [_resolve(dict(o), defs) for o in options if o.get("type") != "null"]
            nullable = len(kept) < len(options)
            base = {k: v for k, v in raw.items() if k != "anyOf"}
            raw = {**base, **kept[0]} if len(kept) == 1 else {**base, "anyOf": kept}
        out.append(FieldFacts(name, raw, name in required, nullable))
    return out


def _is_refused(tool: str, args: dict[str, Any]) -> bool:
    try:
        schema_of(tool).model_validate(args)
    except ValidationError:
        return True
    return False


# --- valid arguments --------------------------------------------------------------------------

IdFor = Callable[[str], str | None]
"""A real record id for an argument name (``account_id`` → an account the rep can see), if any."""


def sample_value(f: FieldFacts, id_for: IdFor | None = None, tag: str = "") -> Any:
    """A plausible valid value for one field, from its schema alone (``id_for`` may supply
    ids; ``tag`` goes into free text, to recognise the call's write later)."""
    if id_for is not None and f.name.endswith("_id"):
        known = id_for(f.name)
        if known is not None:
            return known
    if f.enum is not None:
        return f.enum[0]
    kind, s = f.type, f.schema
    if kind == "boolean":
        return True
    if kind in ("integer", "number"):
        low = s.get("minimum", s.get("exclusiveMinimum", 0) + 1)
        value = max(1, low) if s.get("maximum", 1) >= 1 else low
        return int(value) if kind == "integer" else float(value)
    if kind == "array":
        return []
    if kind == "object":
        return {}
    if f.format == "date":
        return "2030-01-15"
    if f.format == "date-time":
        return "2030-01-15T10:00:00Z"
    text = " ".join(filter(None, ("test", f.name.replace("_", " "), tag)))
    return text[: s["maxLength"]] if "maxLength" in s else text


def valid_args(tool: str, id_for: IdFor | None = None, tag: str = "") -> dict[str, Any] | None:
    """Arguments ``tool``'s schema accepts, filled from the schema: the required fields, then
    (if a validator asks for more, e.g. "something to change") one optional field at a time,
    then all of them. None if no generic fill passes."""
    facts = fields(tool)
    args = {f.name: sample_value(f, id_for, tag) for f in facts if f.required}
    if not _is_refused(tool, args):
        return args
    for f in facts:
        if not f.required:
            trial = {**args, f.name: sample_value(f, id_for, tag)}
            if not _is_refused(tool, trial):
                return trial
    every = {f.name: sample_value(f, id_for, tag) for f in facts}
    return None if _is_refused(tool, every) else every


# --- attacks ----------------------------------------------------------------------------------


def _wrong_values(f: FieldFacts) -> list[Any]:
    """Values of the wrong type (and out of range) for one field."""
    kind, s = f.type, f.schema
    wrong: list[Any] = []
    if f.enum is not None:
        outside = "not-" + "-".join(str(e) for e in f.enum)[:40]
        wrong += [outside, 3 if all(isinstance(e, str) for e in f.enum) else "three"]
    elif kind == "string":
        wrong += [[f"{f.name}", "as a list"], {"text": "nested"}]
        if f.format in ("date", "date-time"):
            wrong.append("next week-ish")
    elif kind == "integer":
        wrong += [f"many {f.name}", [1, 2], 1.5]
        if "minimum" in s:
            wrong.append(s["minimum"] - 1)
        if "maximum" in s:
            wrong.append(s["maximum"] + 1)
    elif kind == "number":
        wrong += [f"a lot of {f.name}", {"value": 1}]
        if "minimum" in s:
            wrong.append(s["minimum"] - 1)
    elif kind == "boolean":
        wrong += ["maybe", [True]]
    elif kind == "array":
        wrong += ["not a list", 5]
    elif kind == "object":
        wrong += ["not an object", [1]]
    else:
        wrong.append(object.__name__)
    if f.required and not f.nullable:
        wrong.append(None)
    return wrong


def wrong_types(tool: str) -> list[dict[str, Any]]:
    """One-field overrides that ``tool``'s schema refuses: each field gets values of another
    type (a string field a list, a number a string, an enum a value outside it, ...)."""
    base = valid_args(tool) or {}
    cases = []
    for f in fields(tool):
        for value in _wrong_values(f):
            if _is_refused(tool, {**base, f.name: value}):
                cases.append({f.name: value})
    return cases


def extra_fields(tool: str) -> list[dict[str, Any]]:
    """Fields ``tool``'s schema does not have (it forbids them): an unknown key and the
    privileged keys it lacks."""
    known = {f.name for f in fields(tool)}
    cases: list[dict[str, Any]] = [{UNKNOWN_FIELD: "attacker-chosen"}]
    cases += [{k: v} for k, v in PRIVILEGED_FIELDS.items() if k not in known]
    return cases
