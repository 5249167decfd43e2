"""The "deals at risk" and "what changed" cards (pure): compact, cited, for a phone.

One column of stacked TextBlocks that wrap (no ColumnSet, no table), schema 1.5 like every card
(:mod:`bot.cards`). Each deal or change is one short block whose line ends with the ``[id]``
citations of the records behind it, and a "Sources" section lists every cited id (links with
``COPILOT_RECORD_URL_TEMPLATE``). Notes of what was not checked are said under the lines. Long
lists are cut, and the card says how many more there are, so a card stays well under Teams'
message size and a phone's scroll.
"""

from __future__ import annotations

from typing import Any, assert_never

from bot.cards.blocks import CARD_VERSION, SCHEMA_URL
from bot.cards.sources import sources_block
from bot.cards.suggestions import suggestion_block
from copilot.followthrough import FollowThrough
from copilot.insight.catchup import ITEM_TITLES, CatchUp
from copilot.insight.risk import RiskReport, report_text
from copilot.views import CatchUpView, RiskView

Card = dict[str, Any]
MAX_DEALS = 10
MAX_CHANGES = 15
VIEW_LEAD = "Here is what I found:"
"""Closes a turn's progress stream when its answer is a risk or catch-up card."""


def _text(text: str, **props: Any) -> Card:
    return {"type": "TextBlock", "text": text, "wrap": True, **props}


def _cites(ids: tuple[str, ...]) -> str:
    return " ".join(f"[{i}]" for i in ids)


def _card(body: list[Card], fallback: str) -> Card:
    return {
        "type": "AdaptiveCard",
        "$schema": SCHEMA_URL,
        "version": CARD_VERSION,
        "body": body,
        "fallbackText": fallback,
    }


FOLLOW_THROUGH_ELEMENT_PREFIX = "after-"
"""Prefix of the element ``id`` on a follow-through card's header (the meeting id follows)."""


def _header(kicker: str, title: str, subtitle: str, element_id: str | None = None) -> Card:
    return {
        **({"id": element_id} if element_id else {}),
        "type": "Container",
        "style": "emphasis",
        "bleed": True,
        "items": [
            _text(kicker, size="Small", isSubtle=True, spacing="None"),
            _text(title, size="Medium", weight="Bolder", spacing="Small"),
            _text(subtitle, spacing="Small"),
        ],
    }


def _notes(notes: tuple[str, ...] | list[str]) -> list[Card]:
    return [_text(note, size="Small", isSubtle=True, spacing="Small") for note in notes]


def risk_card(report: RiskReport, *, record_url_template: str | None = None) -> Card:
    """Each at-risk deal (name, stage, amount, close date) and its cited signals, riskiest first."""
    count = len(report.deals)
    body: list[Card] = [
        _header(
            "Deals at risk",
            f"{count} of {report.checked} open deal{'s' if report.checked != 1 else ''}",
            f"As of {report.today:%a %Y-%m-%d}",
        )
    ]
    if not report.deals:
        body.append(_text("None of your open deals shows a risk signal.", spacing="Medium"))
    for deal in report.deals[:MAX_DEALS]:
        facts = " · ".join(p for p in (deal.stage, deal.amount, f"closes {deal.close_date}") if p)
        items: list[Card] = [
            _text(f"{deal.name} [{deal.id}]", weight="Bolder", spacing="None"),
            _text(facts, size="Small", isSubtle=True, spacing="None"),
        ]
        items += [_text(f"- {s.reason} {_cites(s.cited)}", spacing="None") for s in deal.signals]
        body.append({"type": "Container", "separator": True, "spacing": "Medium", "items": items})
    if count > MAX_DEALS:
        body.append(_text(f"…and {count - MAX_DEALS} more.", isSubtle=True, spacing="Small"))
    body += _notes(report.skipped)
    cited = [i for d in report.deals[:MAX_DEALS] for s in d.signals for i in s.cited]
    if cited:
        body.append(sources_block(cited, {}, record_url_template))
    return _card(body, report_text(report))


def catch_up_card(catch_up: CatchUp, *, record_url_template: str | None = None) -> Card:
    """What changed since the moment, grouped (stage movements, field changes, new deals, new
    activities), newest first, each line cited."""
    shown = catch_up.items[:MAX_CHANGES]
    body: list[Card] = [
        _header(
            "What changed",
            f"Since {catch_up.since:%a %Y-%m-%d %H:%M} UTC",
            f"{catch_up.scope or 'Your deals'}: {len(catch_up.items)} change{'s' if len(catch_up.items) != 1 else ''}",
        )
    ]
    if not catch_up.items:
        body.append(_text("Nothing changed.", spacing="Medium"))
    for kind, title in ITEM_TITLES.items():
        lines = [i for i in shown if i.kind == kind]
        if not lines:
            continue
        items: list[Card] = [_text(title, weight="Bolder", size="Small")]
        items += [_text(f"- {line.text}", spacing="None") for line in lines]
        body.append({"type": "Container", "separator": True, "spacing": "Medium", "items": items})
    if len(catch_up.items) > MAX_CHANGES:
        body.append(_text(f"…and {len(catch_up.items) - MAX_CHANGES} more.", isSubtle=True, spacing="Small"))
    body += _notes(catch_up.skipped)
    cited = [i for item in shown for i in item.cited]
    if cited:
        body.append(sources_block(cited, {}, record_url_template))
    return _card(body, catch_up.text)


def view_card(view: RiskView | CatchUpView, *, record_url_template: str | None = None) -> Card:
    """The card of what an insight read computed (:mod:`copilot.views`)."""
    match view:
        case RiskView(report=report):
            return risk_card(report, record_url_template=record_url_template)
        case CatchUpView(catch_up=catch_up):
            return catch_up_card(catch_up, record_url_template=record_url_template)
        case _:
            assert_never(view)


def follow_through_card(follow: FollowThrough, *, record_url_template: str | None = None) -> Card:
    """ "How did it go?" after a meeting: the meeting, the deal it was about, and each suggestion
    with its own button (which asks in chat, so each change is proposed on its own approval card)
    and "Not now" (declined: not offered again while the deal stays as it is)."""
    end = follow.end
    body: list[Card] = [
        _header(
            "How did it go?",
            follow.subject or "(no subject)",
            f"Ended {end:%a %Y-%m-%d %H:%M} UTC",
            element_id=f"{FOLLOW_THROUGH_ELEMENT_PREFIX}{follow.meeting_id}",
        ),
        _text(
            f"{follow.account_name} [{follow.account_id}]"
            + (f" · {follow.deal_name} [{follow.deal_id}]" if follow.deal_id else "")
            + (f" · with {', '.join(follow.contacts)}" if follow.contacts else ""),
            spacing="Medium",
        ),
    ]
    if not follow.suggestions:
        body.append(
            _text(
                "Nothing to suggest: which deal the meeting was about is not clear, or you said "
                "not now to each suggestion.",
                isSubtle=True,
                spacing="Small",
            )
        )
    body += suggestion_block(follow.suggestions)
    cited = [follow.account_id, *([follow.deal_id] if follow.deal_id else [])]
    cited += [i for s in follow.suggestions for i in s.cited]
    body.append(sources_block(cited, {}, record_url_template))
    return _card(body, follow.text)
