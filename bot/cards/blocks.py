"""The Adaptive Card format and its building blocks (pure): schema 1.5, the elements and
actions that render on Teams mobile, text, facts, headers, and the data every button carries."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from bot.cards.fields import field_label, format_value, record_name, target_line
from copilot.writes import title as write_title

if TYPE_CHECKING:
    from copilot.turns import Proposal

__all__ = [
    "ALLOWED_ACTIONS",
    "ALLOWED_ELEMENTS",
    "AUDIT_ELEMENT_PREFIX",
    "CARD_VERSION",
    "COMMAND_KIND",
    "SCHEMA_URL",
    "SUBMIT_KIND",
    "SUBMIT_VERSION",
    "Card",
    "adaptive_card",
    "card_element_id",
    "card_header",
    "command_data",
    "fact_set",
    "field_facts",
    "one_line",
    "proposal_header",
    "text_block",
    "text_lines",
]

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


def card_element_id(tool_call_id: str) -> str:
    """The element ``id`` on every card about one proposal (approval, outcome, moved).

    The proposal id is internal, so no card shows it; it stays in the card's data: the
    buttons' submit data, and this id on the card's header (Teams renders it as the
    element's DOM id, so a client or a test can find the card of a proposal by it).
    """
    return f"proposal-{tool_call_id}"


AUDIT_ELEMENT_PREFIX = "audit-"
"""Prefix of the element ``id`` that carries an executed write's audit record number."""


def text_block(text: str, **props: Any) -> Card:
    return {"type": "TextBlock", "text": text, "wrap": True, **props}


def text_lines(text: str, **props: Any) -> list[Card]:
    """Multi-line text as one TextBlock per line (Teams collapses single newlines)."""
    blocks: list[Card] = []
    gap = False
    for line in text.splitlines():
        if not line.strip():
            gap = True
            continue
        spacing = "Medium" if gap else "None"
        blocks.append(text_block(line, spacing=spacing if blocks else "Small", **props))
        gap = False
    return blocks or [text_block("—", **props)]


def fact_set(pairs: list[tuple[str, str]]) -> Card:
    return {"type": "FactSet", "facts": [{"title": t, "value": v} for t, v in pairs]}


def adaptive_card(body: list[Card], actions: list[Card] | None = None, *, fallback: str = "") -> Card:
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


def card_header(
    kicker: str,
    title: str,
    subtitle: str | None = None,
    *,
    style: str = "emphasis",
    element_id: str | None = None,
) -> Card:
    items = [
        text_block(kicker, size="Small", isSubtle=True, spacing="None"),
        text_block(title, size="Medium", weight="Bolder", spacing="Small"),
    ]
    if subtitle:
        items.append(text_block(subtitle, spacing="Small"))
    header: Card = {"type": "Container", "style": style, "bleed": True, "items": items}
    if element_id:
        header["id"] = element_id
    return header


def proposal_header(proposal: Proposal, kicker: str, *, style: str = "emphasis") -> Card:
    """The header of every card about one proposal (approval, outcome, moved): ``kicker``, the
    tool in plain words and the target record, with the proposal's :func:`card_element_id`."""
    return card_header(
        kicker,
        write_title(proposal.tool),
        target_line(proposal),
        style=style,
        element_id=card_element_id(proposal.tool_call_id),
    )


def field_facts(
    proposal: Proposal,
    values: Mapping[str, Any],
    names: Iterable[str],
    *,
    currency: Any,
    locale: str | None,
    zone: dt.tzinfo | None,
) -> Card:
    """One fact row per field in ``names``: its label and its value in ``values`` as the rep
    reads it (a record id by the record's name; amounts, dates and times in the rep's
    ``locale`` and ``zone``), set apart from the block above."""
    pairs = [
        (
            field_label(name),
            format_value(
                record_name(proposal, values[name]), field=name, currency=currency, locale=locale, zone=zone
            ),
        )
        for name in names
    ]
    return {"type": "Container", "separator": True, "items": [fact_set(pairs)]}


def one_line(text: str, limit: int = 120) -> str:
    """One line of a long value (a note, a draft body) for a list row; the card shows it all."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def command_data(text: str) -> dict[str, Any]:
    """The ``data`` of a button that sends ``text`` to the copilot as if the rep typed it."""
    return {"copilot": COMMAND_KIND, "text": text}
