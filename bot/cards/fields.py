"""The fields of a write proposal as a rep reads them (pure): labels, which ones a rep may
edit and how each is typed (from the write-tool registry), values formatted in the rep's locale,
and the record a proposal is about, by name."""

from __future__ import annotations

import datetime as dt
import json
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Le, MaxLen

from bot.dates import DEFAULT_LOCALE, as_date, format_when
from copilot.writes import WRITE_TOOL_SCHEMAS, write_tool, write_tools

if TYPE_CHECKING:
    from copilot.turns import Proposal

__all__ = [
    "EDITABLE_FIELDS",
    "RECORD_LABELS",
    "FieldKind",
    "FieldSpec",
    "changes_record",
    "editable_fields",
    "field_label",
    "field_spec",
    "format_value",
    "header_fields",
    "multiline_fields",
    "record_name",
    "shown_fields",
    "shows_draft",
    "target_line",
]

RECORD_LABELS: dict[str, str] = {
    "currency": "Currency",
    "probability": "Probability",
    "name": "Name",
    "title": "Title",
}
"""Labels of record fields that are no write tool's argument (shown in conflicts); an
argument's label is its schema field's ``title``."""


def field_label(name: str) -> str:
    """The label a rep reads for a field: its write-tool schema title, else a record label."""
    for tool in write_tools():
        field = tool.args_schema.model_fields.get(name)
        if field is not None and field.title:
            return field.title
    return RECORD_LABELS.get(name, name.replace("_", " ").capitalize())


class _EditableView(Mapping[str, tuple[str, ...]]):
    """Fields of each write tool's schema a rep may change in the Edit… card (from the registry).

    The record a change is about (the opportunity to update, the contact to write to) and
    the activity's timestamp are not editable here: a different target is a new proposal.
    """

    def __getitem__(self, tool: str) -> tuple[str, ...]:
        entry = write_tool(tool)
        if entry is None:
            raise KeyError(tool)
        return entry.editable

    def __iter__(self) -> Iterator[str]:
        return (t.name for t in write_tools())

    def __len__(self) -> int:
        return sum(1 for _ in write_tools())


EDITABLE_FIELDS: Mapping[str, tuple[str, ...]] = _EditableView()


def multiline_fields(tool: str) -> frozenset[str]:
    entry = write_tool(tool)
    return entry.multiline if entry is not None else frozenset()


def header_fields(tool: str) -> frozenset[str]:
    entry = write_tool(tool)
    return entry.header_fields if entry is not None else frozenset()


def changes_record(tool: str) -> bool:
    entry = write_tool(tool)
    return entry is not None and entry.changes_record


def shows_draft(tool: str) -> bool:
    entry = write_tool(tool)
    return entry is not None and entry.shows_draft


FieldKind = Literal["choice", "date", "number", "integer", "toggle", "text", "ids"]
"""``ids``: a list of record ids (an activity's contacts), edited as one comma-separated text."""


@dataclass(frozen=True)
class FieldSpec:
    """How one editable field of a write tool is typed, shown and bounded."""

    name: str
    label: str
    kind: FieldKind
    optional: bool
    """``None`` is allowed (empty input = not set)."""
    required: bool
    """The schema has no default: the field must have a value."""
    default: Any = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    max_length: int | None = None
    multiline: bool = False


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        optional = len(args) != len(get_args(annotation))
        return (args[0] if len(args) == 1 else annotation), optional
    return annotation, False


def field_spec(tool: str, name: str) -> FieldSpec:
    """The typing of ``tool``'s field ``name``, read from its Pydantic schema (pure)."""
    info = WRITE_TOOL_SCHEMAS[tool].model_fields[name]
    base, optional = _strip_optional(info.annotation)
    kind: FieldKind
    choices: tuple[str, ...] = ()
    if get_origin(base) is Literal:
        kind, choices = "choice", tuple(str(c) for c in get_args(base))
    elif base is bool:
        kind = "toggle"
    elif base is int:
        kind = "integer"
    elif base is float:
        kind = "number"
    elif base is dt.date:
        kind = "date"
    elif base is str:
        kind = "text"
    elif get_origin(base) is list and get_args(base) == (str,):
        kind = "ids"
    else:
        raise ValueError(f"{tool}.{name} ({base!r}) cannot be edited in a card")
    minimum = maximum = None
    max_length = None
    for meta in info.metadata:
        if isinstance(meta, Ge):
            minimum = float(meta.ge)  # type: ignore[arg-type]
        elif isinstance(meta, Le):
            maximum = float(meta.le)  # type: ignore[arg-type]
        elif isinstance(meta, MaxLen):
            max_length = meta.max_length
    required = info.is_required()
    return FieldSpec(
        name=name,
        label=field_label(name),
        kind=kind,
        optional=optional,
        required=required,
        default=None if required else info.get_default(call_default_factory=True),
        choices=choices,
        minimum=minimum,
        maximum=maximum,
        max_length=max_length,
        multiline=name in multiline_fields(tool),
    )


def editable_fields(tool: str) -> list[FieldSpec]:
    """The fields a rep may edit in ``tool``'s approval card, in display order (pure)."""
    return [field_spec(tool, name) for name in EDITABLE_FIELDS.get(tool, ())]


_RECORD_DATE_FIELDS = frozenset({"close_date", "occurred_at", "due_date", "created_at", "updated_at"})


def _date_fields() -> frozenset[str]:
    """Fields holding a date or a time: every write-tool argument typed so, and record dates."""
    names = set(_RECORD_DATE_FIELDS)
    for schema in WRITE_TOOL_SCHEMAS.values():
        for name, info in schema.model_fields.items():
            if _strip_optional(info.annotation)[0] in (dt.date, dt.datetime):
                names.add(name)
    return frozenset(names)


def format_value(
    value: Any,
    *,
    field: str = "",
    currency: str | None = None,
    locale: str | None = DEFAULT_LOCALE,
    zone: dt.tzinfo | None = None,
) -> str:
    """A field value as a rep reads it: ``—`` for nothing, ``120,000 USD``, ``yes``/``no``,
    a date field's value in the rep's ``locale`` (``Dec 31, 2026``, ``31.12.2026``), a time in
    the rep's ``zone`` (named; UTC, and said so, when no zone is known)."""
    if value is None or value == "":
        return "—"
    if field and field in _date_fields() and (when := as_date(value)) is not None:
        return format_when(when, locale, zone)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        text = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
        return f"{text} {currency}" if field == "amount" and currency else text
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def target_line(proposal: Proposal) -> str | None:
    record = proposal.record or {}
    target = record.get("target")
    if not target:
        return None
    # The record as a rep knows it: its name (its id and version stay in the card's data
    # and the audit log); the id only when the record has no name.
    name = target.get("name") or target.get("id") or "(unnamed)"
    if shows_draft(proposal.tool):
        title = (record.get("current") or {}).get("title")
        return f"To: {name}" + (f" ({title})" if title else "")
    return str(name)


def record_name(proposal: Proposal, value: Any) -> Any:
    """A record id argument as its name when it is the proposal's target (ids are internal);
    a list of contact ids as the contacts' names read with the proposal."""
    record = proposal.record or {}
    target: dict[str, Any] = dict(record.get("target") or {})
    if isinstance(value, str) and value and value == target.get("id") and target.get("name"):
        return target["name"]
    if isinstance(value, list):
        names = record.get("contacts") or {}
        assert isinstance(names, Mapping)
        return ", ".join(str(names.get(str(v)) or v) for v in value)
    return value


def shown_fields(tool: str, args: dict[str, Any]) -> list[str]:
    schema = WRITE_TOOL_SCHEMAS.get(tool)
    names = list(schema.model_fields) if schema is not None else list(args)
    skip = header_fields(tool)
    return [n for n in names if n in args and args[n] is not None and n not in skip]
