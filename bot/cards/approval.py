"""The approval card (pure): the Teams twin of ``copilot.render``.

The tool in plain words, the target record by name, the current value next to the proposed value
of every field the proposal sets, and three ways to decide: Approve, Edit… (typed inputs
prefilled with the proposed values) and Reject… (a required reason); Edit… and Reject…
open their panel by the bot updating the card (:data:`CardView`). Each proposal
gets its own card; there is no "approve all", and nothing on any card sends an email.
No ``Action.Execute`` (unreliable on mobile): decisions use ``Action.Submit`` and the bot
replaces the card with ``bot.cards.outcome.outcome_card``.

Decision buttons carry :func:`submit_data`; ``bot.card_submit`` parses what Teams
sends back (that data merged with the card's input values).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from bot.cards.blocks import (
    SUBMIT_KIND,
    SUBMIT_VERSION,
    Card,
    adaptive_card,
    fact_set,
    field_facts,
    proposal_header,
    text_block,
    text_lines,
)
from bot.cards.fields import (
    FieldSpec,
    changes_record,
    editable_fields,
    field_label,
    format_value,
    multiline_fields,
    shown_fields,
    shows_draft,
    target_line,
)
from bot.dates import DEFAULT_LOCALE
from copilot.turns import args_digest
from copilot.writes import title as write_title

if TYPE_CHECKING:
    from copilot.turns import Proposal

__all__ = [
    "EDIT_PREFIX",
    "NOT_SENT_NOTICE",
    "REJECT_REASON_ID",
    "REJECT_REASON_MAX",
    "VIEW_KIND",
    "CardView",
    "DecisionAction",
    "approval_card",
    "shown_value",
    "submit_data",
    "view_data",
]

VIEW_KIND = "view"
"""``data.copilot`` of a button that switches an approval card's panel (see :data:`CardView`)."""
CardView = Literal["decide", "edit", "reject"]
"""Which panel of an approval card is open; the bot keeps it by updating the card."""


EDIT_PREFIX = "edit."
REJECT_REASON_ID = "reject.reason"
REJECT_REASON_MAX = 1000
"""Same bound as ``copilot.decisions.Reject.reason``."""


DecisionAction = Literal["approve", "edit", "reject"]


NOT_SENT_NOTICE = (
    "This email will NOT be sent. It is saved to your Outlook drafts, where you can review, "
    "change and send it yourself."
)


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


def _restore_blocks(record: dict[str, Any], locale: str | None, zone: dt.tzinfo | None) -> list[Card]:
    """An undo's fields: each value now next to the value it puts back."""
    current = record.get("current") or {}
    currency = current.get("currency")
    blocks: list[Card] = []
    if record.get("summary"):
        blocks.append(text_block(str(record["summary"]), spacing="Medium"))
    for name, value in (record.get("restored") or {}).items():
        blocks.append(_compared(name, current.get(name), "Restored", value, currency, locale, zone))
    return blocks


def _compared(
    name: str,
    current: Any,
    label: str,
    value: Any,
    currency: Any,
    locale: str | None,
    zone: dt.tzinfo | None,
) -> Card:
    """One field's block: its label, then its current value above the ``label``led one."""
    facts = [
        ("Current", format_value(current, field=name, currency=currency, locale=locale, zone=zone)),
        (label, format_value(value, field=name, currency=currency, locale=locale, zone=zone)),
    ]
    return {
        "type": "Container",
        "separator": True,
        "spacing": "Medium",
        "items": [text_block(field_label(name), weight="Bolder"), fact_set(facts)],
    }


def _field_blocks(proposal: Proposal, locale: str | None, zone: dt.tzinfo | None) -> list[Card]:
    record = proposal.record or {}
    if "restored" in record or "summary" in record:
        return _restore_blocks(dict(record), locale, zone)
    current = record.get("current") or {}
    currency = current.get("currency")
    names = shown_fields(proposal.tool, proposal.args)
    if shows_draft(proposal.tool) and record.get("preview"):
        names = [
            n for n in names if n not in multiline_fields(proposal.tool)
        ]  # the preview shows the whole message
    blocks: list[Card] = []
    if changes_record(proposal.tool) or any(n in current for n in names):
        for name in names:
            blocks.append(
                _compared(name, current.get(name), "Proposed", proposal.args[name], currency, locale, zone)
            )
        return blocks
    short = [n for n in names if n not in multiline_fields(proposal.tool)]
    if short:
        blocks.append(
            field_facts(proposal, proposal.args, short, currency=currency, locale=locale, zone=zone)
        )
    for name in names:
        if name in multiline_fields(proposal.tool):
            items = [
                text_block(field_label(name), weight="Bolder"),
                *text_lines(format_value(proposal.args[name])),
            ]
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
        text_block("Your changes", weight="Bolder"),
        text_block(
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
    zone: dt.tzinfo | None = None,
    view: CardView = "decide",
) -> Card:
    """The card a rep decides one proposal on: Approve, Edit… or Reject… (pure).

    Shows the tool in plain words, the target record by name, and for each field the
    proposal sets its current value next to the proposed one (stacked, phone width;
    dates in the rep's ``locale``, times in their ``zone``: mailbox settings', else Teams'; UTC,
    named, when none is known). ``draft_followup_email`` shows the draft and says it
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
    body: list[Card] = [proposal_header(proposal, "Your approval is needed")]
    if record is None:
        body.append(_warning("The record this change is about could not be read."))
    elif record.get("error"):
        message = (record.get("error") or {}).get("message") or "the record could not be read"
        body.append(_warning(f"Warning: {message}"))
    body.extend(_field_blocks(proposal, locale, zone))
    is_draft = shows_draft(proposal.tool)
    if is_draft:
        preview = (record or {}).get("preview")
        if preview:
            body.append(
                {
                    "type": "Container",
                    "separator": True,
                    "spacing": "Medium",
                    "items": [text_block("Draft preview", weight="Bolder"), *text_lines(str(preview))],
                }
            )
        body.append(
            {
                "type": "Container",
                "style": "accent",
                "spacing": "Medium",
                "items": [text_block(NOT_SENT_NOTICE, weight="Bolder")],
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
            text_block("Nothing is written until you decide.", size="Small", isSubtle=True, spacing="Medium")
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
    target = target_line(proposal)
    fallback = f"{title}{f' — {target}' if target else ''}: approve, edit or reject it in Teams."
    return adaptive_card(body, actions, fallback=fallback)


def _warning(text: str) -> Card:
    return {"type": "Container", "style": "attention", "spacing": "Medium", "items": [text_block(text)]}
