"""Adaptive Cards for Teams (pure builders: plain data in, card JSON out, no I/O).

The approval card is the Teams twin of ``copilot.render``: the tool in plain words,
the target record by name, the current value next to the proposed value of
every field the proposal sets, and three ways to decide: Approve, Edit… (typed inputs
prefilled with the proposed values) and Reject… (a required reason); Edit… and Reject…
open their panel by the bot updating the card (:data:`CardView`). Each proposal
gets its own card; there is no "approve all", and nothing on any card sends an email.

Every card targets schema **1.5** and uses only elements and actions that render on
Teams mobile (``ALLOWED_ELEMENTS`` / ``ALLOWED_ACTIONS``): no ``Table`` (too wide at
phone width), no ``Action.Execute`` (unreliable on mobile; decisions use
``Action.Submit`` and the bot replaces the card with :func:`outcome_card`). Facts are
stacked (FactSets, one Container per field), and every TextBlock wraps.

Decision buttons carry :func:`submit_data`; ``bot.card_submit`` parses what Teams
sends back (that data merged with the card's input values).
"""

from __future__ import annotations

import datetime as dt
import json
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Union, assert_never, get_args, get_origin
from urllib.parse import quote

from annotated_types import Ge, Le, MaxLen

from bot.dates import DEFAULT_LOCALE, as_date, format_age, format_when
from copilot.briefs.schedule import resolve_zone
from copilot.briefs.types import (
    DIGEST_SECTIONS,
    DIGEST_TITLES,
    SECTION_TITLES,
    SECTIONS,
    Brief,
    Digest,
    Suggestion,
)
from copilot.delegation import Delegation
from copilot.turns import args_digest
from copilot.writes import WRITE_TOOL_SCHEMAS, write_tool, write_tools
from copilot.writes import title as write_title

if TYPE_CHECKING:
    from copilot.turns import Proposal

Card = dict[str, Any]
"""An Adaptive Card (or one of its elements / actions) as JSON-ready data."""

CARD_VERSION = "1.5"
SCHEMA_URL = "http://adaptivecards.io/schemas/adaptive-card.json"

ALLOWED_ELEMENTS: frozenset[str] = frozenset(
    {
        "TextBlock",
        "RichTextBlock",
        "FactSet",
        "Container",
        "ColumnSet",
        "Column",
        "ActionSet",
        "Image",
        "Input.Text",
        "Input.Number",
        "Input.Date",
        "Input.ChoiceSet",
        "Input.Toggle",
    }
)
"""Element types that render well on Teams mobile at schema 1.5 (no ``Table``)."""

ALLOWED_ACTIONS: frozenset[str] = frozenset({"Action.Submit", "Action.ShowCard", "Action.OpenUrl"})
"""Action types the cards may use (no ``Action.Execute``: unreliable on Teams mobile)."""

SUBMIT_KIND = "decision"
SUBMIT_VERSION = 1
COMMAND_KIND = "command"
VIEW_KIND = "view"
"""``data.copilot`` of a button that switches an approval card's panel (see :data:`CardView`)."""
CardView = Literal["decide", "edit", "reject"]
"""Which panel of an approval card is open; the bot keeps it by updating the card."""
OPEN_KIND = "open_proposal"
"""``data.copilot`` of a "my approvals" row's button: post that proposal's approval card."""
UNDO_KIND = "undo"
"""``data.copilot`` of an approved card's Undo button: ask the copilot to undo that write."""
EDIT_PREFIX = "edit."
REJECT_REASON_ID = "reject.reason"
REJECT_REASON_MAX = 1000
"""Same bound as ``copilot.decisions.Reject.reason``."""

DecisionAction = Literal["approve", "edit", "reject"]
Outcome = Literal["approved", "rejected", "conflict", "failed", "already_decided"]

NOT_SENT_NOTICE = (
    "This email will NOT be sent. It is saved to your Outlook drafts, where you can review, "
    "change and send it yourself."
)

APPROVALS_COMMANDS: tuple[str, ...] = ("my approvals", "my pending approvals", "approvals")
"""Messages (lower-cased) answered with the "my approvals" card; the first is the one shown."""
WELCOME_COMMANDS: tuple[str, ...] = (
    "my pipeline",
    "my deals closing this quarter",
    APPROVALS_COMMANDS[0],
    "help",
    "my preferences",
)
STATS_COMMANDS: tuple[str, ...] = ("copilot stats", "my stats", "approval stats", "team stats", "stats")
"""Messages (lower-cased) answered with the approval stats card; the first is the one shown."""
DELEGATIONS_COMMANDS: tuple[str, ...] = ("my delegations", "delegations")
"""Messages (lower-cased) answered with the delegations card (granting and ending one are said
in the rep's own words, to the agent)."""
HELP_COMMANDS: frozenset[str] = frozenset({"help", "what can you do", "?"})
"""Messages (lower-cased) answered with the help card."""
RESET_COMMANDS: tuple[str, ...] = ("new conversation", "start over", "reset")
"""Messages (lower-cased) that start a new thread; the first is the one the cards suggest."""
EMPTY_MESSAGE_REPLY = (
    'Ask me about your accounts, deals or contacts, for example "my pipeline". '
    'Say "help" to see what I can do.'
)

# --- fields: labels, which ones a rep may edit, how they are typed ------------------------

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


def _multiline(tool: str) -> frozenset[str]:
    entry = write_tool(tool)
    return entry.multiline if entry is not None else frozenset()


def _header_fields(tool: str) -> frozenset[str]:
    entry = write_tool(tool)
    return entry.header_fields if entry is not None else frozenset()


def _changes_record(tool: str) -> bool:
    entry = write_tool(tool)
    return entry is not None and entry.changes_record


def _shows_draft(tool: str) -> bool:
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
        multiline=name in _multiline(tool),
    )


def editable_fields(tool: str) -> list[FieldSpec]:
    """The fields a rep may edit in ``tool``'s approval card, in display order (pure)."""
    return [field_spec(tool, name) for name in EDITABLE_FIELDS.get(tool, ())]


# --- small helpers --------------------------------------------------------------------------


def card_element_id(tool_call_id: str) -> str:
    """The element ``id`` on every card about one proposal (approval, outcome, moved).

    The proposal id is internal, so no card shows it; it stays in the card's data: the
    buttons' submit data, and this id on the card's header (Teams renders it as the
    element's DOM id, so a client or a test can find the card of a proposal by it).
    """
    return f"proposal-{tool_call_id}"


AUDIT_ELEMENT_PREFIX = "audit-"
"""Prefix of the element ``id`` that carries an executed write's audit record number."""


def submit_data(proposal: Proposal, *, thread_id: str, action: DecisionAction) -> dict[str, Any]:
    """The ``data`` of a decision button: who/what it decides, and a digest of the arguments."""
    return {
        "copilot": SUBMIT_KIND,
        "v": SUBMIT_VERSION,
        "thread_id": thread_id,
        "tool_call_id": proposal.tool_call_id,
        "tool": proposal.tool,
        "action": action,
        "args_digest": args_digest(proposal.args),
    }


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
    value: Any, *, field: str = "", currency: str | None = None, locale: str | None = DEFAULT_LOCALE
) -> str:
    """A field value as a rep reads it: ``—`` for nothing, ``120,000 USD``, ``yes``/``no``,
    a date field's value in the rep's ``locale`` (``Dec 31, 2026``, ``31.12.2026``)."""
    if value is None or value == "":
        return "—"
    if field and field in _date_fields() and (when := as_date(value)) is not None:
        return format_when(when, locale)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        text = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
        return f"{text} {currency}" if field == "amount" and currency else text
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _text(text: str, **props: Any) -> Card:
    return {"type": "TextBlock", "text": text, "wrap": True, **props}


def _lines(text: str, **props: Any) -> list[Card]:
    """Multi-line text as one TextBlock per line (Teams collapses single newlines)."""
    blocks: list[Card] = []
    gap = False
    for line in text.splitlines():
        if not line.strip():
            gap = True
            continue
        spacing = "Medium" if gap else "None"
        blocks.append(_text(line, spacing=spacing if blocks else "Small", **props))
        gap = False
    return blocks or [_text("—", **props)]


def _facts(pairs: list[tuple[str, str]]) -> Card:
    return {"type": "FactSet", "facts": [{"title": t, "value": v} for t, v in pairs]}


def _card(body: list[Card], actions: list[Card] | None = None, *, fallback: str = "") -> Card:
    card: Card = {
        "type": "AdaptiveCard",
        "$schema": SCHEMA_URL,
        "version": CARD_VERSION,
        "body": body,
    }
    if actions:
        card["actions"] = actions
    if fallback:
        card["fallbackText"] = fallback
    return card


def _header(
    kicker: str,
    title: str,
    subtitle: str | None = None,
    *,
    style: str = "emphasis",
    element_id: str | None = None,
) -> Card:
    items = [
        _text(kicker, size="Small", isSubtle=True, spacing="None"),
        _text(title, size="Medium", weight="Bolder", spacing="Small"),
    ]
    if subtitle:
        items.append(_text(subtitle, spacing="Small"))
    header: Card = {"type": "Container", "style": style, "bleed": True, "items": items}
    if element_id:
        header["id"] = element_id
    return header


def _target_line(proposal: Proposal) -> str | None:
    record = proposal.record or {}
    target = record.get("target")
    if not target:
        return None
    # The record as a rep knows it: its name (its id and version stay in the card's data
    # and the audit log); the id only when the record has no name.
    name = target.get("name") or target.get("id") or "(unnamed)"
    if _shows_draft(proposal.tool):
        title = (record.get("current") or {}).get("title")
        return f"To: {name}" + (f" ({title})" if title else "")
    return str(name)


def _record_name(proposal: Proposal, value: Any) -> Any:
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


def _shown_fields(tool: str, args: dict[str, Any]) -> list[str]:
    schema = WRITE_TOOL_SCHEMAS.get(tool)
    names = list(schema.model_fields) if schema is not None else list(args)
    skip = _header_fields(tool)
    return [n for n in names if n in args and args[n] is not None and n not in skip]


# --- approval card ----------------------------------------------------------------------------


def _restore_blocks(record: dict[str, Any], locale: str | None) -> list[Card]:
    """An undo's fields: each value now next to the value it puts back."""
    current = record.get("current") or {}
    currency = current.get("currency")
    blocks: list[Card] = []
    if record.get("summary"):
        blocks.append(_text(str(record["summary"]), spacing="Medium"))
    for name, value in (record.get("restored") or {}).items():
        blocks.append(_compared(name, current.get(name), "Restored", value, currency, locale))
    return blocks


def _compared(name: str, current: Any, label: str, value: Any, currency: Any, locale: str | None) -> Card:
    """One field's block: its label, then its current value above the ``label``led one."""
    facts = [
        ("Current", format_value(current, field=name, currency=currency, locale=locale)),
        (label, format_value(value, field=name, currency=currency, locale=locale)),
    ]
    return {
        "type": "Container",
        "separator": True,
        "spacing": "Medium",
        "items": [_text(field_label(name), weight="Bolder"), _facts(facts)],
    }


def _field_blocks(proposal: Proposal, locale: str | None) -> list[Card]:
    record = proposal.record or {}
    if "restored" in record or "summary" in record:
        return _restore_blocks(dict(record), locale)
    current = record.get("current") or {}
    currency = current.get("currency")
    names = _shown_fields(proposal.tool, proposal.args)
    if _shows_draft(proposal.tool) and record.get("preview"):
        names = [
            n for n in names if n not in _multiline(proposal.tool)
        ]  # the preview shows the whole message
    blocks: list[Card] = []
    if _changes_record(proposal.tool) or any(n in current for n in names):
        for name in names:
            blocks.append(
                _compared(name, current.get(name), "Proposed", proposal.args[name], currency, locale)
            )
        return blocks
    short = [n for n in names if n not in _multiline(proposal.tool)]
    if short:
        pairs = [
            (
                field_label(n),
                format_value(
                    _record_name(proposal, proposal.args[n]), field=n, currency=currency, locale=locale
                ),
            )
            for n in short
        ]
        blocks.append({"type": "Container", "separator": True, "items": [_facts(pairs)]})
    for name in names:
        if name in _multiline(proposal.tool):
            items = [_text(field_label(name), weight="Bolder"), *_lines(format_value(proposal.args[name]))]
            blocks.append({"type": "Container", "separator": True, "items": items})
    return blocks


def _input(spec: FieldSpec, value: Any) -> Card:
    """A typed input for one editable field, prefilled with the proposed ``value``."""
    element: Card = {"id": EDIT_PREFIX + spec.name, "label": spec.label}
    if spec.kind == "choice":
        element.update(
            type="Input.ChoiceSet",
            style="compact",
            choices=[{"title": c, "value": c} for c in spec.choices],
        )
        if spec.optional:
            element["placeholder"] = "Leave unchanged"
        if value is not None:
            element["value"] = str(value)
    elif spec.kind == "date":
        element["type"] = "Input.Date"
        if value:
            element["value"] = str(value)[:10]
    elif spec.kind == "ids":
        element.update(type="Input.Text", placeholder="Record ids, separated by commas")
        if value:
            element["value"] = ", ".join(str(v) for v in value)
    elif spec.kind in ("number", "integer"):
        element["type"] = "Input.Number"
        if spec.minimum is not None:
            element["min"] = int(spec.minimum) if spec.kind == "integer" else spec.minimum
        if spec.maximum is not None:
            element["max"] = int(spec.maximum) if spec.kind == "integer" else spec.maximum
        if value is not None:
            element["value"] = value
    elif spec.kind == "toggle":
        element.update(
            type="Input.Toggle",
            title=spec.label,
            valueOn="true",
            valueOff="false",
            value="true" if value else "false",
        )
    else:
        element.update(type="Input.Text", isMultiline=spec.multiline)
        if spec.max_length is not None:
            element["maxLength"] = spec.max_length
        if value is not None:
            element["value"] = str(value)
    if spec.required and spec.kind != "toggle":
        element["isRequired"] = True
        element["errorMessage"] = f"{spec.label} is required."
    return element


def shown_value(proposal: Proposal, name: str) -> Any:
    """What the Edit panel shows in a field: the proposed value, else (a field the proposal leaves
    alone) the record's value as it was read with the proposal."""
    if proposal.args.get(name) is not None:
        return proposal.args[name]
    current = (proposal.record or {}).get("current") or {}
    return current.get(name) if isinstance(current, Mapping) else None


def _edit_panel(proposal: Proposal) -> Card:
    specs = editable_fields(proposal.tool)
    items: list[Card] = [
        _text("Your changes", weight="Bolder"),
        _text(
            "Each field shows the proposed value, or the record's value now. Change what you need, "
            "then approve; anything you leave as it is stays as it is."
        ),
    ]
    items.extend(_input(spec, shown_value(proposal, spec.name)) for spec in specs)
    return {"type": "Container", "separator": True, "spacing": "Medium", "items": items}


def _reject_panel() -> Card:
    reason: Card = {
        "type": "Input.Text",
        "id": REJECT_REASON_ID,
        "label": "Why not?",
        "placeholder": "e.g. wrong account, the call was yesterday",
        "isMultiline": True,
        "maxLength": REJECT_REASON_MAX,
        "isRequired": True,
        "errorMessage": "Please give a reason, so the copilot can do better next time.",
    }
    return {"type": "Container", "separator": True, "spacing": "Medium", "items": [reason]}


def view_data(proposal: Proposal, *, thread_id: str, view: CardView) -> dict[str, Any]:
    """The ``data`` of a button that shows the approval card in another :data:`CardView`."""
    return {
        "copilot": VIEW_KIND,
        "v": SUBMIT_VERSION,
        "thread_id": thread_id,
        "tool_call_id": proposal.tool_call_id,
        "view": view,
    }


def _view_button(proposal: Proposal, title: str, *, thread_id: str, view: CardView) -> Card:
    # Switching views sends no inputs (nothing typed is a decision) and skips validation.
    return {
        "type": "Action.Submit",
        "title": title,
        "associatedInputs": "none",
        "data": view_data(proposal, thread_id=thread_id, view=view),
    }


def approval_card(
    proposal: Proposal,
    *,
    thread_id: str,
    locale: str | None = DEFAULT_LOCALE,
    view: CardView = "decide",
) -> Card:
    """The card a rep decides one proposal on: Approve, Edit… or Reject… (pure).

    Shows the tool in plain words, the target record by name, and for each field the
    proposal sets its current value next to the proposed one (stacked, phone width;
    dates in the rep's ``locale``). ``draft_followup_email`` shows the draft and says it
    will not be sent; its main button is "Save to Outlook drafts". The proposal's id
    and the record's version are in the card's data only (:func:`card_element_id`,
    :func:`submit_data`).

    ``view`` is which panel is open: ``decide`` (Approve, Edit…, Reject…), ``edit`` (the
    typed inputs, prefilled, with "Edit and approve" and Back) or ``reject`` (a required
    reason, with Reject and Back). The panel is the card itself, as the bot last updated
    it, not a client-side ``Action.ShowCard``: a client that re-lays the card out (a
    resize, a re-render) shows the same panel again, never a collapsed one.
    """
    record = proposal.record
    title = write_title(proposal.tool)
    body: list[Card] = [
        _header(
            "Your approval is needed",
            title,
            _target_line(proposal),
            element_id=card_element_id(proposal.tool_call_id),
        )
    ]
    if record is None:
        body.append(_warning("The record this change is about could not be read."))
    elif record.get("error"):
        message = (record.get("error") or {}).get("message") or "the record could not be read"
        body.append(_warning(f"Warning: {message}"))
    body.extend(_field_blocks(proposal, locale))
    is_draft = _shows_draft(proposal.tool)
    if is_draft:
        preview = (record or {}).get("preview")
        if preview:
            body.append(
                {
                    "type": "Container",
                    "separator": True,
                    "spacing": "Medium",
                    "items": [_text("Draft preview", weight="Bolder"), *_lines(str(preview))],
                }
            )
        body.append(
            {
                "type": "Container",
                "style": "accent",
                "spacing": "Medium",
                "items": [_text(NOT_SENT_NOTICE, weight="Bolder")],
            }
        )
    actions: list[Card]
    back = _view_button(proposal, "Back", thread_id=thread_id, view="decide")
    if view == "edit":
        body.append(_edit_panel(proposal))
        edit: Card = {
            "type": "Action.Submit",
            "title": "Edit and approve",
            "style": "positive",
            "data": submit_data(proposal, thread_id=thread_id, action="edit"),
        }
        actions = [edit, back]
    elif view == "reject":
        body.append(_reject_panel())
        reject: Card = {
            "type": "Action.Submit",
            "title": "Reject",
            "style": "destructive",
            "data": submit_data(proposal, thread_id=thread_id, action="reject"),
        }
        actions = [reject, back]
    else:
        body.append(
            _text("Nothing is written until you decide.", size="Small", isSubtle=True, spacing="Medium")
        )
        actions = [
            {
                "type": "Action.Submit",
                "title": "Save to Outlook drafts" if is_draft else "Approve",
                "style": "positive",
                "data": submit_data(proposal, thread_id=thread_id, action="approve"),
            },
            _view_button(proposal, "Edit…", thread_id=thread_id, view="edit"),
            _view_button(proposal, "Reject…", thread_id=thread_id, view="reject"),
        ]
        if not editable_fields(proposal.tool):
            del actions[1]  # nothing to edit (an undo): approve or reject
    target = _target_line(proposal)
    fallback = f"{title}{f' — {target}' if target else ''}: approve, edit or reject it in Teams."
    return _card(body, actions, fallback=fallback)


def _warning(text: str) -> Card:
    return {"type": "Container", "style": "attention", "spacing": "Medium", "items": [_text(text)]}


# --- outcome card -----------------------------------------------------------------------------

_OUTCOME_HEADERS: dict[str, tuple[str, str]] = {
    "approved": ("✓ Approved", "good"),
    "rejected": ("✗ Rejected", "emphasis"),
    "conflict": ("⚠ Not written: the record changed", "warning"),
    "failed": ("⚠ Not completed", "attention"),
    "already_decided": ("Already decided", "emphasis"),
}


_WRITTEN_KEYS = ("opportunity", "activity", "preferences", "draft")
"""Where a write tool's result carries the record as written (see ``copilot.agent_tools.model_tools``)."""

_CONFLICT_EXTRA = ("stage", "close_date", "amount", "next_step")


def _final_values(proposal: Proposal, detail: dict[str, Any]) -> dict[str, Any]:
    """The values that were written, for every field the executed arguments set.

    The executed arguments are the outcome's ``applied`` (an edit may set fields the
    proposal did not), else ``detail["args"]``, else the proposal's; each value is the
    written record's where the write returned it, else the argument.
    """
    given = detail.get("applied") or detail.get("args")
    args: dict[str, Any] = given if isinstance(given, dict) and given else proposal.args
    written: dict[str, Any] = next((detail[k] for k in _WRITTEN_KEYS if isinstance(detail.get(k), dict)), {})
    return {n: written.get(n, args[n]) for n in _shown_fields(proposal.tool, args)}


def undo_data(audit_id: int) -> dict[str, Any]:
    """The ``data`` of an approved card's Undo button (the write's audit id)."""
    return {"copilot": UNDO_KIND, "audit_id": audit_id}


def undo_request(audit_id: int) -> str:
    """What an Undo button asks the copilot, as if the rep typed it."""
    return f"Undo my change recorded as audit record {audit_id}"


def outcome_card(
    proposal: Proposal,
    outcome: Outcome,
    *,
    detail: dict[str, Any],
    locale: str | None = DEFAULT_LOCALE,
    undo: bool = False,
) -> Card:
    """The card that replaces an approval card once it is decided (pure; no actions).

    ``detail`` by outcome: ``approved`` → ``audit_id`` and the final values, as ``args``
    (the arguments executed) or as the write tool's result (``opportunity`` /
    ``activity`` / ``preferences`` record as written), else the proposal's own;
    ``rejected`` → ``reason``; ``conflict`` → ``current`` (the record now; the fields
    the proposal sets are shown); ``failed`` → ``message``;
    ``already_decided`` → optional ``message``. The proposal id and the audit record
    number are internal: they are the header's and the "Done" line's element ``id``
    (:func:`card_element_id`, :data:`AUDIT_ELEMENT_PREFIX`), never shown.

    ``undo`` (the caller checked the write can still be undone: its tool has an undo and
    it is within the undo window) adds an **Undo** button to an approved card; it asks
    for the undo (:func:`undo_data`), whose own approval card follows.
    """
    kicker, style = _OUTCOME_HEADERS[outcome]
    title = write_title(proposal.tool)
    body: list[Card] = [
        _header(
            kicker,
            title,
            _target_line(proposal),
            style=style,
            element_id=card_element_id(proposal.tool_call_id),
        )
    ]
    currency = ((proposal.record or {}).get("current") or {}).get("currency")
    if outcome == "approved":
        final = _final_values(proposal, detail)
        if _shows_draft(proposal.tool):
            done = _text("Saved to your Outlook drafts. It has not been sent.")
        else:
            done = _text("Done: the change was written once and recorded in the audit log.")
        if detail.get("audit_id") is not None:
            done["id"] = f"{AUDIT_ELEMENT_PREFIX}{detail['audit_id']}"
        body.append(done)
        pairs = [
            (
                field_label(n),
                format_value(_record_name(proposal, final[n]), field=n, currency=currency, locale=locale),
            )
            for n in _shown_fields(proposal.tool, final)
            if n not in _multiline(proposal.tool) or not _shows_draft(proposal.tool)
        ]
        if pairs:
            body.append({"type": "Container", "separator": True, "items": [_facts(pairs)]})
    elif outcome == "rejected":
        body.append(_text("Nothing was written."))
        reason = str(detail.get("reason") or "").strip()
        if reason:
            body.append(_facts([("Reason", reason)]))
    elif outcome == "conflict":
        body.append(_text("Someone changed this record after the proposal was made, so nothing was written."))
        now = detail.get("current") or {}
        if isinstance(now, dict) and now:
            wanted = [n for n in _shown_fields(proposal.tool, proposal.args) if n in now]
            wanted += [n for n in _CONFLICT_EXTRA if n in now and n not in wanted]
            keys = wanted or list(now)
            currency = now.get("currency") or currency
            pairs = [
                (field_label(k), format_value(now[k], field=k, currency=currency, locale=locale))
                for k in keys
            ]
            body.append(
                {
                    "type": "Container",
                    "separator": True,
                    "items": [_text("The record now", weight="Bolder"), _facts(pairs)],
                }
            )
        body.append(_text("A fresh proposal with the new values follows.", weight="Bolder"))
    elif outcome == "failed":
        message = str(detail.get("message") or "The change could not be completed.")
        body.append(_text(message))
    else:
        message = str(detail.get("message") or "This proposal was already decided; nothing more was done.")
        body.append(_text(message))
    actions: list[Card] = []
    if undo and outcome == "approved" and isinstance(detail.get("audit_id"), int):
        actions.append({"type": "Action.Submit", "title": "Undo", "data": undo_data(detail["audit_id"])})
    return _card(body, actions or None, fallback=f"{kicker}: {title}")


def moved_card(proposal: Proposal) -> Card:
    """What an older copy of a proposal's approval card becomes once the card was posted
    again (from "my approvals"): no buttons, so only the newest copy decides it (pure)."""
    title = write_title(proposal.tool)
    body: list[Card] = [
        _header(
            "Moved further down",
            title,
            _target_line(proposal),
            element_id=card_element_id(proposal.tool_call_id),
        ),
        _text("This proposal's card was shown again below: approve, edit or reject it there."),
    ]
    return _card(body, fallback=f"{title}: shown again below")


@dataclass(frozen=True)
class WaitingProposal:
    """One row of the "my approvals" card: a pending proposal and when it was made."""

    thread_id: str
    proposal: Proposal
    proposed_at: dt.datetime
    on_behalf_of: str = ""
    """The colleague whose proposal this is, when the rep decides it as their delegate."""


APPROVALS_SHOWN = 20
"""At most this many rows on the "my approvals" card (newest first); the rest are counted."""


def open_data(thread_id: str, tool_call_id: str) -> dict[str, Any]:
    """The ``data`` of a "my approvals" row's button: show that proposal's approval card."""
    return {"copilot": OPEN_KIND, "v": SUBMIT_VERSION, "thread_id": thread_id, "tool_call_id": tool_call_id}


def approvals_card(
    waiting: list[WaitingProposal], *, now: dt.datetime, locale: str | None = DEFAULT_LOCALE
) -> Card:
    """The rep's pending proposals across their threads, newest first (pure).

    Each row: what the change is, the record by name, the fields it proposes, its age in
    the rep's locale, and an "Open" button that posts the proposal's own approval card.
    There is deliberately no way to decide here, and no "approve all".
    """
    rows = sorted(waiting, key=lambda w: w.proposed_at, reverse=True)
    n = len(rows)
    if n == 0:
        body: list[Card] = [
            _header("My approvals", "Nothing waits for your decision."),
            _text("When I propose a change, it waits here until you approve, edit or reject it."),
        ]
        return _card(body, fallback="My approvals: nothing waits for your decision.")
    heading = "1 proposal waits for your decision" if n == 1 else f"{n} proposals wait for your decision"
    body = [
        _header("My approvals", heading, "Open one to approve, edit or reject it on its own card."),
    ]
    for row in rows[:APPROVALS_SHOWN]:
        proposal = row.proposal
        currency = ((proposal.record or {}).get("current") or {}).get("currency")
        pairs = [
            (
                field_label(name),
                _short(
                    format_value(
                        _record_name(proposal, proposal.args[name]),
                        field=name,
                        currency=currency,
                        locale=locale,
                    )
                ),
            )
            for name in _shown_fields(proposal.tool, proposal.args)
        ]
        items: list[Card] = [_text(write_title(proposal.tool), weight="Bolder")]
        target = _target_line(proposal)
        if target:
            items.append(_text(target, spacing="None"))
        if pairs:
            items.append(_facts(pairs))
        if row.on_behalf_of:
            items.append(_text(f"For {row.on_behalf_of} (you are their delegate)", size="Small"))
        items.append(
            _text(f"Proposed {format_age(row.proposed_at, now, locale)}", size="Small", isSubtle=True)
        )
        items.append(
            {
                "type": "ActionSet",
                "actions": [
                    {
                        "type": "Action.Submit",
                        "title": "Open",
                        "data": open_data(row.thread_id, proposal.tool_call_id),
                    }
                ],
            }
        )
        body.append(
            {
                "type": "Container",
                "id": f"waiting-{proposal.tool_call_id}",
                "separator": True,
                "spacing": "Medium",
                "items": items,
            }
        )
    if n > APPROVALS_SHOWN:
        body.append(_text(f"…and {n - APPROVALS_SHOWN} older ones.", isSubtle=True, spacing="Medium"))
    return _card(body, fallback=f"My approvals: {heading}.")


def _short(text: str, limit: int = 120) -> str:
    """One line of a long value (a note, a draft body) for a list row; the card shows it all."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


# --- answers, welcome, notices -----------------------------------------------------------------


def record_url(record_id: str, template: str | None) -> str | None:
    """The record's page in the CRM, from ``CRM_RECORD_URL_TEMPLATE`` (``{id}`` replaced), if set."""
    return template.replace("{id}", quote(record_id, safe="")) if template else None


def record_link(record_id: str, template: str | None) -> str:
    """A record id as Teams markdown: ``[id](url)`` with a URL template, else the bare id."""
    url = record_url(record_id, template)
    if not url:
        return record_id
    label = record_id.replace("[", "(").replace("]", ")")
    return f"[{label}]({url})"


def document_link(title: str, url: str | None) -> str:
    """A cited document as Teams markdown: ``[title](url)`` for a web link, else the title."""
    label = title.replace("[", "(").replace("]", ")")
    return f"[{label}]({url})" if url and url.startswith(("https://", "http://")) else label


def answer_card(
    answer: str,
    citations: list[str],
    *,
    record_url_template: str | None = None,
    documents: Mapping[str, tuple[str, str | None]] | None = None,
) -> Card:
    """An answer (Teams markdown) with a "Sources" section of the record ids it cites (pure).

    ``record_url_template`` (e.g. ``https://crm.example.com/records/{id}``) turns each
    cited id into a link. ``documents`` (cited chunk id → document title and link) shows
    a cited document by its title, linked to its source.
    """
    docs = documents or {}
    body: list[Card] = _lines(answer) if answer.strip() else [_text("(no answer)")]
    if citations:
        body.append(sources_block(citations, docs, record_url_template))
    fallback = answer + (f"\n\nSources: {', '.join(citations)}" if citations else "")
    return _card(body, fallback=fallback)


def sources_block(
    citations: Sequence[str], documents: Mapping[str, tuple[str, str | None]], record_url_template: str | None
) -> Card:
    """The "Sources" section under cited text: each record id (a link with a template), each
    document by its title; two chunks of one document are one source."""
    sources = dict.fromkeys(
        document_link(*documents[c]) if c in documents else record_link(c, record_url_template)
        for c in dict.fromkeys(citations)
    )
    return {
        "type": "Container",
        "separator": True,
        "spacing": "Medium",
        "items": [_text("Sources", weight="Bolder", size="Small"), _text(" · ".join(sources), size="Small")],
    }


def command_data(text: str) -> dict[str, Any]:
    """The ``data`` of a button that sends ``text`` to the copilot as if the rep typed it."""
    return {"copilot": COMMAND_KIND, "text": text}


def welcome_card() -> Card:
    """What the copilot can do, with example commands as buttons (pure)."""
    body: list[Card] = [
        _header("CRM sales copilot", "Hi! I help you work your pipeline from Teams."),
        _text(
            "- **Answers from live CRM data**, read with your own permissions, citing the "
            "records behind every fact"
        ),
        _text(
            "- **Drafts follow-up emails** into your Outlook drafts. I never send anything.",
            spacing="Small",
        ),
        _text(
            "- **Proposes CRM changes** (log an activity, update an opportunity). You approve, "
            "edit or reject each one; nothing is written without you.",
            spacing="Small",
        ),
        _text("Try one of these, or just ask:", spacing="Medium", isSubtle=True),
    ]
    actions: list[Card] = [
        {"type": "Action.Submit", "title": text, "data": command_data(text)} for text in WELCOME_COMMANDS
    ]
    return _card(body, actions, fallback="CRM sales copilot: ask about your accounts and pipeline.")


def help_card() -> Card:
    """What the copilot can do, from the write-tool registry, with example buttons (pure).

    The changes it can propose are listed from the registry (title and the fields a rep
    may edit), so a new write tool appears here without touching this card.
    """
    body: list[Card] = [
        _header("What I can do", "Ask in your own words; I answer from the CRM as you."),
        _text("**Answer questions** from live CRM data, with your permissions, citing each record:"),
        _text(
            "account summaries, your pipeline (by stage or closing this quarter), deal amounts, "
            "close dates and next steps, contacts by title, the last activity on an account; "
            "**deals at risk** (and why) and **catch me up** (what changed since you last looked, "
            "or since a day you name).",
            spacing="Small",
        ),
        _text("**Propose changes** that you approve, edit or reject on their own card:", spacing="Medium"),
    ]
    for tool in write_tools():
        fields = ", ".join(field_label(name).lower() for name in tool.editable)
        body.append(_text(f"- {tool.title}" + (f" ({fields})" if fields else ""), spacing="Small"))
    body += [
        _text("**Speak first**, in this 1:1 chat, in your working hours:", spacing="Medium"),
        _text(
            "**brief on** / **brief off** (a meeting prep brief before each customer meeting), "
            "**brief 30 minutes before**, **brief me** (your next customer meeting, now); "
            "**digest on** / **digest off** (your day each working morning), **digest at 8:00**, "
            "**digest me** (today's, now); with briefs on, a **How did it go?** card after each "
            "customer meeting.",
            spacing="Small",
        ),
        _text(
            "Nothing is written without your decision, and I never send email: drafts stay in "
            "your Outlook drafts.",
            spacing="Medium",
        ),
        _text(
            f"Say **{APPROVALS_COMMANDS[0]}** to see every proposal waiting for you, "
            f"**{STATS_COMMANDS[0]}** for approve / edit / reject rates (your reports' if you "
            f"manage a team), **{RESET_COMMANDS[0]}** to start over, **help** to see this again.",
            spacing="Small",
            isSubtle=True,
        ),
    ]
    actions: list[Card] = [
        {"type": "Action.Submit", "title": text, "data": command_data(text)}
        for text in WELCOME_COMMANDS
        if text not in HELP_COMMANDS
    ]
    return _card(
        body, actions, fallback="What I can do: answer from the CRM, and propose changes you approve."
    )


def notice_card(title: str, text: str, *, correlation_id: str | None = None) -> Card:
    """A short notice (an error, a limit hit, "CRM unavailable"), with an optional reference id."""
    body: list[Card] = [_text(title, weight="Bolder", size="Medium"), *_lines(text)]
    if correlation_id:
        body.append(
            _text(
                f"Reference: {correlation_id} (give this to your IT admin if it keeps happening)",
                size="Small",
                isSubtle=True,
                spacing="Medium",
            )
        )
    return _card(body, fallback=f"{title}: {text}")


# --- sign-in ------------------------------------------------------------------------------------

OAUTH_CARD_CONTENT_TYPE = "application/vnd.microsoft.card.oauth"
"""The attachment content type of a Bot Framework OAuthCard (what :func:`sign_in_card` builds)."""
SIGN_IN_FOR_BRIEFS = (
    "Sign in so I can post your meeting prep briefs: I read your calendar and the CRM with your "
    "own permissions, and nothing before you have signed in."
)


def sign_in_card(
    *, connection_name: str, exchange_uri: str, exchange_id: str, text: str = SIGN_IN_FOR_BRIEFS
) -> Card:
    """An OAuthCard's content for the bot's OAuth connection (Teams SSO signs the rep in silently
    through the token exchange resource; the button is the fallback sign-in)."""
    return {
        "text": text,
        "connectionName": connection_name,
        "buttons": [{"type": "signin", "title": "Sign in", "value": ""}],
        "tokenExchangeResource": {"id": exchange_id, "uri": exchange_uri},
    }


# --- approval delegation ---------------------------------------------------------------------

REVOKE_DELEGATION_KIND = "revoke_delegation"
"""``data.copilot`` of a delegation card's Revoke button: end that grant now."""


def revoke_delegation_data(delegation_id: int) -> dict[str, Any]:
    """The ``data`` of a Revoke button: the grant's id (the bot revokes only the clicker's own)."""
    return {"copilot": REVOKE_DELEGATION_KIND, "v": SUBMIT_VERSION, "delegation_id": delegation_id}


def _last_day(ends_at: dt.datetime) -> dt.date:
    # A grant "until Dec 24" ends at the start of Dec 25 (UTC): the card names Dec 24.
    return (ends_at.astimezone(dt.UTC) - dt.timedelta(microseconds=1)).date()


def delegations_card(
    granted: list[Delegation],
    held: list[Delegation],
    *,
    locale: str | None = DEFAULT_LOCALE,
    notice: str | None = None,
) -> Card:
    """Who may approve for the rep (each with a Revoke button) and whose proposals the rep may
    decide, with ``notice`` on top (e.g. the grant just made, or what was revoked) (pure)."""
    title = notice or (
        "You have delegated your approvals" if granted else "You have not delegated your approvals"
    )
    body: list[Card] = [
        _header(
            "Delegated approvals",
            title,
            "A delegate approves or rejects your CRM changes as proposed, with their own CRM "
            "permissions, and sees nothing else of your conversations.",
        )
    ]
    for grant in granted:
        body.append(
            {
                "type": "Container",
                "id": f"delegation-{grant.id}",
                "separator": True,
                "spacing": "Medium",
                "items": [
                    _text(f"**{grant.delegate_name or 'A colleague'}** may decide your proposals", wrap=True),
                    _text(
                        f"Until {format_when(_last_day(grant.ends_at), locale)}", size="Small", isSubtle=True
                    ),
                    {
                        "type": "ActionSet",
                        "actions": [
                            {
                                "type": "Action.Submit",
                                "title": "Revoke",
                                "data": revoke_delegation_data(grant.id),
                            }
                        ],
                    },
                ],
            }
        )
    for grant in held:
        body.append(
            _text(
                f"You may decide **{grant.owner_name or 'a colleague'}**'s proposals until "
                f"{format_when(_last_day(grant.ends_at), locale)}: say **{APPROVALS_COMMANDS[0]}**.",
                separator=True,
                spacing="Medium",
            )
        )
    if not granted:
        body.append(
            _text(
                'To delegate, say for example "delegate my approvals to Megan Bowen until '
                'Friday"; "revoke my delegation to Megan" ends it early. Either waits for your approval.',
                isSubtle=True,
                spacing="Medium",
            )
        )
    return _card(body, fallback=f"Delegated approvals: {title}.")


# --- meeting prep briefs ------------------------------------------------------------------------

BRIEF_ELEMENT_PREFIX = "brief-"
"""Prefix of the element ``id`` on a brief card's header (the meeting id follows)."""


def brief_log_request(account: str, subject: str) -> str:
    """What **Log this meeting** sends, as if the rep typed it (a proposal → the approval card)."""
    return f"log a meeting with {account} — {subject}"


def brief_follow_up_request(account: str, subject: str) -> str:
    """What **Draft follow-up** sends, as if the rep typed it (a draft proposal → its card)."""
    return f"draft a follow-up email to {account} about {subject}"


DECLINE_SUGGESTION_KIND = "decline_suggestion"
"""``data.copilot`` of a suggestion's "Not now" button: record it declined at the record's version."""
NOT_NOW = "Not now"


def suggestion_request(suggestion: Suggestion) -> str:
    """What a suggestion's button sends, as if the rep typed it (the model proposes the change,
    and its approval card follows)."""
    match suggestion.kind:
        case "close_date_passed":
            return (
                f"move the close date of {suggestion.record_name} ({suggestion.record_id}) "
                f"to {suggestion.value}"
            )
        case "log_meeting":
            # The attendees by name, before the deal (whose name may hold a dash): the model finds
            # them among the account's contacts and names them on the activity.
            people = f" with {' and '.join(suggestion.contacts)}" if suggestion.contacts else ""
            return f"log a meeting{people} on {suggestion.record_name} ({suggestion.record_id}) — {suggestion.value}"
        case "set_next_step":
            return f"change the next step for {suggestion.record_name} ({suggestion.record_id}): {suggestion.value}"
        case "follow_up_task":
            due = f" due {suggestion.due.isoformat()}" if suggestion.due else ""
            return (
                f"log a task on {suggestion.record_name} ({suggestion.record_id}){due} — {suggestion.value}"
            )
        case _:
            assert_never(suggestion.kind)


def suggestion_button_title(suggestion: Suggestion) -> str:
    """The title of the button that asks for a suggestion's change."""
    match suggestion.kind:
        case "close_date_passed":
            return "Move the close date"
        case "log_meeting":
            return "Log this meeting"
        case "set_next_step":
            return "Set the next step"
        case "follow_up_task":
            return "Add the task"
        case _:
            assert_never(suggestion.kind)


def decline_suggestion_data(suggestion: Suggestion) -> dict[str, Any]:
    """The ``data`` of a "Not now" button: which suggestion, at which record version."""
    return {
        "copilot": DECLINE_SUGGESTION_KIND,
        "v": SUBMIT_VERSION,
        "kind": suggestion.kind,
        "record_id": suggestion.record_id,
        "record_version": suggestion.record_version,
    }


def suggestion_block(suggestions: Sequence[Suggestion]) -> list[Card]:
    """A card's "Suggestions" section (pure): each suggestion's cited question, a button that
    asks for the change in chat (so it is proposed through the normal approval card) and
    "Not now", which declines it until the record changes. No suggestions: no section."""
    if not suggestions:
        return []
    items: list[Card] = [_text("Suggestions", weight="Bolder", size="Small")]
    for suggestion in suggestions:
        items.append(_text(suggestion.text, spacing="Small"))
        items.append(
            {
                "type": "ActionSet",
                "spacing": "Small",
                "actions": [
                    {
                        "type": "Action.Submit",
                        "title": suggestion_button_title(suggestion),
                        "data": command_data(suggestion_request(suggestion)),
                    },
                    {"type": "Action.Submit", "title": NOT_NOW, "data": decline_suggestion_data(suggestion)},
                ],
            }
        )
    return [{"type": "Container", "separator": True, "spacing": "Medium", "items": items}]


def brief_card(
    brief: Brief,
    *,
    now: dt.datetime,
    locale: str | None = DEFAULT_LOCALE,
    record_url_template: str | None = None,
    documents: Mapping[str, tuple[str, str | None]] | None = None,
) -> Card:
    """A meeting prep brief (pure): per account its cited facts by section, then the sources.

    Every fact keeps its ``[id]`` citations in its text, as answers do, and the "Sources"
    section lists every cited id (a link with ``record_url_template``, a document by its title
    with ``documents``). The buttons send chat requests, so logging the meeting, drafting
    the follow-up and each suggested change go through the normal proposal → approval card
    path; a suggestion's "Not now" declines it (:func:`suggestion_block`). "Log this meeting"
    is offered only once the meeting has started (at ``now``): nothing happened before.
    """
    docs = documents or {}
    when = format_when(brief.start, locale, resolve_zone(brief.time_zone))
    subject = brief.subject or "(no subject)"
    body: list[Card] = [
        _header(
            "Meeting prep",
            subject,
            f"{when}{' · online' if brief.is_online else ''}",
            element_id=f"{BRIEF_ELEMENT_PREFIX}{brief.meeting_id}",
        )
    ]
    for account in brief.accounts:
        items: list[Card] = [_text(account.name or account.account_id, weight="Bolder", size="Medium")]
        for section in SECTIONS:
            facts = [i for i in account.items if i.section == section]
            items.append(_text(SECTION_TITLES[section], weight="Bolder", size="Small", spacing="Medium"))
            if not facts:
                items.append(_text("None on record.", isSubtle=True, spacing="None"))
            items.extend(_text(f"- {f.text}", spacing="None") for f in facts)
        body.append({"type": "Container", "separator": True, "spacing": "Medium", "items": items})
    if brief.other_external_attendees:
        n = brief.other_external_attendees
        body.append(
            _text(
                f"{n} other external attendee{'s' if n != 1 else ''} (no CRM contact you can see).",
                isSubtle=True,
                spacing="Medium",
            )
        )
    body.extend(suggestion_block(brief.suggestions))
    if brief.citations:
        body.append(sources_block(brief.citations, docs, record_url_template))
    actions: list[Card] = []
    if brief.accounts:
        first = brief.accounts[0].name or brief.accounts[0].account_id
        if now >= brief.start:
            actions.append(
                {
                    "type": "Action.Submit",
                    "title": "Log this meeting",
                    "data": command_data(brief_log_request(first, subject)),
                }
            )
        actions.append(
            {
                "type": "Action.Submit",
                "title": "Draft follow-up",
                "data": command_data(brief_follow_up_request(first, subject)),
            }
        )
    return _card(body, actions, fallback=brief.text)


# --- the daily digest ---------------------------------------------------------------------------

DIGEST_ELEMENT_PREFIX = "digest-"
"""Prefix of the element ``id`` on a digest card's header (the rep's local day follows)."""
DIGEST_FEEDBACK_KIND = "digest_feedback"
"""``data.copilot`` of a digest card's "Not useful" and "Snooze" buttons."""
DIGEST_FEEDBACK_VERSION = 1
DigestFeedbackKind = Literal["not_useful", "snooze"]
DIGEST_FEEDBACK_KINDS: tuple[DigestFeedbackKind, ...] = ("not_useful", "snooze")
SNOOZE_INPUT_ID = "snooze.records"
"""The Snooze panel's ChoiceSet: the records (comma-separated, as Teams sends a multi-select)."""
SNOOZE_CHOICE_LENGTH = 60


def digest_feedback_data(day: dt.date, kind: DigestFeedbackKind) -> dict[str, Any]:
    """The ``data`` of a digest card's feedback button."""
    return {
        "copilot": DIGEST_FEEDBACK_KIND,
        "v": DIGEST_FEEDBACK_VERSION,
        "kind": kind,
        "day": day.isoformat(),
    }


def digest_card(digest: Digest, *, record_url_template: str | None = None) -> Card:
    """The daily digest (pure): its sections with their cited lines, the sources, and feedback.

    Every line keeps its ``[id]`` citations and the "Sources" section lists every cited id.
    Stacked TextBlocks that wrap (no columns), so it reads at phone width. **Not useful**
    rates the whole digest; **Snooze** opens a panel to pick lines whose record stays out of
    the rep's digests for a week.
    """
    body: list[Card] = [
        _header(
            "Daily digest",
            f"{digest.day:%A, %B} {digest.day.day}",
            f"Your day ({digest.time_zone})",
            element_id=f"{DIGEST_ELEMENT_PREFIX}{digest.day.isoformat()}",
        )
    ]
    for section in DIGEST_SECTIONS:
        lines = [i for i in digest.items if i.section == section]
        items: list[Card] = [_text(DIGEST_TITLES[section], weight="Bolder", size="Small")]
        if not lines:
            items.append(_text("None.", isSubtle=True, spacing="None"))
        items.extend(_text(f"- {line.text}", spacing="None") for line in lines)
        body.append({"type": "Container", "separator": True, "spacing": "Medium", "items": items})
    notes = []
    if digest.meetings_without_customer:
        n = digest.meetings_without_customer
        notes.append(f"{n} other meeting{'s' if n != 1 else ''} with no CRM contact you can see.")
    if digest.snoozed:
        notes.append(f"{digest.snoozed} snoozed line{'s' if digest.snoozed != 1 else ''} left out.")
    if notes:
        body.append(_text(" ".join(notes), isSubtle=True, spacing="Medium"))
    body.extend(suggestion_block(digest.suggestions))
    if digest.citations:
        body.append(sources_block(digest.citations, {}, record_url_template))
    actions: list[Card] = [
        {
            "type": "Action.Submit",
            "title": "Not useful",
            "data": digest_feedback_data(digest.day, "not_useful"),
        }
    ]
    choices: dict[str, str] = {}
    for line in digest.items:  # one choice per record, titled by its first line
        if line.cited:
            choices.setdefault(line.cited[0], _short(line.text, SNOOZE_CHOICE_LENGTH))
    if choices:
        panel = _card(
            [
                {
                    "type": "Input.ChoiceSet",
                    "id": SNOOZE_INPUT_ID,
                    "label": "Leave these out of your digests for 7 days:",
                    "isMultiSelect": True,
                    "style": "expanded",
                    "isRequired": True,
                    "errorMessage": "Pick at least one line to snooze.",
                    "choices": [{"title": title, "value": record} for record, title in choices.items()],
                },
            ],
            [
                {
                    "type": "Action.Submit",
                    "title": "Snooze",
                    "data": digest_feedback_data(digest.day, "snooze"),
                }
            ],
        )
        actions.append({"type": "Action.ShowCard", "title": "Snooze…", "card": panel})
    return _card(body, actions, fallback=digest.text)


def digest_feedback_card(kind: DigestFeedbackKind, records: Sequence[str], until: dt.date | None) -> Card:
    """The confirmation of a digest's "Not useful" or "Snooze" (pure)."""
    match kind:
        case "not_useful":
            return notice_card("Thanks for telling me", "Noted: this digest was not useful to you.")
        case "snooze":
            what = ", ".join(records)
            back = f" until {until:%a %Y-%m-%d}" if until else ""
            return notice_card("Snoozed", f"Left out of your digests{back}: {what}.")
        case _:
            assert_never(kind)
