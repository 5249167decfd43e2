"""What an approval card becomes once decided (pure): the outcome card (approved, rejected,
conflict, failed, already decided; an approved write's Undo button), and the moved card."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any, Literal

from bot.cards.blocks import (
    AUDIT_ELEMENT_PREFIX,
    Card,
    adaptive_card,
    fact_set,
    field_facts,
    proposal_header,
    text_block,
)
from bot.cards.fields import (
    field_label,
    format_value,
    multiline_fields,
    shown_fields,
    shows_draft,
)
from bot.dates import DEFAULT_LOCALE
from copilot.writes import title as write_title

if TYPE_CHECKING:
    from copilot.turns import Proposal

__all__ = ["UNDO_KIND", "Outcome", "moved_card", "outcome_card", "undo_data", "undo_request"]

UNDO_KIND = "undo"
"""``data.copilot`` of an approved card's Undo button: ask the copilot to undo that write."""


Outcome = Literal["approved", "rejected", "conflict", "failed", "already_decided"]


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
    return {n: written.get(n, args[n]) for n in shown_fields(proposal.tool, args)}


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
    zone: dt.tzinfo | None = None,
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
    for the undo (:func:`undo_data`), whose own approval card follows. Times are in the rep's
    ``zone`` (UTC, named, when none is known), as on the approval card.
    """
    kicker, style = _OUTCOME_HEADERS[outcome]
    title = write_title(proposal.tool)
    body: list[Card] = [proposal_header(proposal, kicker, style=style)]
    currency = ((proposal.record or {}).get("current") or {}).get("currency")
    if outcome == "approved":
        final = _final_values(proposal, detail)
        if shows_draft(proposal.tool):
            done = text_block("Saved to your Outlook drafts. It has not been sent.")
        else:
            done = text_block("Done: the change was written once and recorded in the audit log.")
        if detail.get("audit_id") is not None:
            done["id"] = f"{AUDIT_ELEMENT_PREFIX}{detail['audit_id']}"
        body.append(done)
        if said := str(detail.get("message") or "").strip():
            # What the change now means, in words ("Meeting prep briefs are on, …").
            body.append(text_block(said, spacing="Small"))
        names = [
            n
            for n in shown_fields(proposal.tool, final)
            if n not in multiline_fields(proposal.tool) or not shows_draft(proposal.tool)
        ]
        if names:
            body.append(field_facts(proposal, final, names, currency=currency, locale=locale, zone=zone))
    elif outcome == "rejected":
        body.append(text_block("Nothing was written."))
        reason = str(detail.get("reason") or "").strip()
        if reason:
            body.append(fact_set([("Reason", reason)]))
    elif outcome == "conflict":
        body.append(
            text_block("Someone changed this record after the proposal was made, so nothing was written.")
        )
        now = detail.get("current") or {}
        if isinstance(now, dict) and now:
            wanted = [n for n in shown_fields(proposal.tool, proposal.args) if n in now]
            wanted += [n for n in _CONFLICT_EXTRA if n in now and n not in wanted]
            keys = wanted or list(now)
            currency = now.get("currency") or currency
            pairs = [
                (field_label(k), format_value(now[k], field=k, currency=currency, locale=locale, zone=zone))
                for k in keys
            ]
            body.append(
                {
                    "type": "Container",
                    "separator": True,
                    "items": [text_block("The record now", weight="Bolder"), fact_set(pairs)],
                }
            )
        body.append(text_block("A fresh proposal with the new values follows.", weight="Bolder"))
    elif outcome == "failed":
        message = str(detail.get("message") or "The change could not be completed.")
        body.append(text_block(message))
    else:
        message = str(detail.get("message") or "This proposal was already decided; nothing more was done.")
        body.append(text_block(message))
    actions: list[Card] = []
    if undo and outcome == "approved" and isinstance(detail.get("audit_id"), int):
        actions.append({"type": "Action.Submit", "title": "Undo", "data": undo_data(detail["audit_id"])})
    return adaptive_card(body, actions or None, fallback=f"{kicker}: {title}")


def moved_card(proposal: Proposal) -> Card:
    """What an older copy of a proposal's approval card becomes once the card was posted
    again (from "my approvals"): no buttons, so only the newest copy decides it (pure)."""
    title = write_title(proposal.tool)
    body: list[Card] = [
        proposal_header(proposal, "Moved further down"),
        text_block("This proposal's card was shown again below: approve, edit or reject it there."),
    ]
    return adaptive_card(body, fallback=f"{title}: shown again below")
