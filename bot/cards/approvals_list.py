"""The "my approvals" card (pure): the rep's pending proposals, newest first, each with an
Open button that posts its own approval card."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.cards.blocks import (
    SUBMIT_VERSION,
    Card,
    adaptive_card,
    card_header,
    fact_set,
    one_line,
    text_block,
)
from bot.cards.fields import (
    field_label,
    format_value,
    record_name,
    shown_fields,
    target_line,
)
from bot.dates import DEFAULT_LOCALE, format_age
from copilot.writes import title as write_title

if TYPE_CHECKING:
    from copilot.turns import Proposal

__all__ = ["APPROVALS_SHOWN", "OPEN_KIND", "WaitingProposal", "approvals_card", "open_data"]

OPEN_KIND = "open_proposal"
"""``data.copilot`` of a "my approvals" row's button: post that proposal's approval card."""


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
    waiting: list[WaitingProposal],
    *,
    now: dt.datetime,
    locale: str | None = DEFAULT_LOCALE,
    zone: dt.tzinfo | None = None,
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
            card_header("My approvals", "Nothing waits for your decision."),
            text_block("When I propose a change, it waits here until you approve, edit or reject it."),
        ]
        return adaptive_card(body, fallback="My approvals: nothing waits for your decision.")
    heading = "1 proposal waits for your decision" if n == 1 else f"{n} proposals wait for your decision"
    body = [
        card_header("My approvals", heading, "Open one to approve, edit or reject it on its own card."),
    ]
    for row in rows[:APPROVALS_SHOWN]:
        proposal = row.proposal
        currency = ((proposal.record or {}).get("current") or {}).get("currency")
        pairs = [
            (
                field_label(name),
                one_line(
                    format_value(
                        record_name(proposal, proposal.args[name]),
                        field=name,
                        currency=currency,
                        locale=locale,
                        zone=zone,
                    )
                ),
            )
            for name in shown_fields(proposal.tool, proposal.args)
        ]
        items: list[Card] = [text_block(write_title(proposal.tool), weight="Bolder")]
        target = target_line(proposal)
        if target:
            items.append(text_block(target, spacing="None"))
        if pairs:
            items.append(fact_set(pairs))
        if row.on_behalf_of:
            items.append(text_block(f"For {row.on_behalf_of} (you are their delegate)", size="Small"))
        items.append(
            text_block(f"Proposed {format_age(row.proposed_at, now, locale)}", size="Small", isSubtle=True)
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
        body.append(text_block(f"…and {n - APPROVALS_SHOWN} older ones.", isSubtle=True, spacing="Medium"))
    return adaptive_card(body, fallback=f"My approvals: {heading}.")
