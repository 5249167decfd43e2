"""The "copilot stats" card: approval analytics for a manager's reports, or a rep's own (pure).

Counts, rates and field names only (``copilot.analytics.team`` leaves out record values,
edit deltas, and, on a manager's card, the reasons' text). Laid out for a phone (390 px):
one column, a FactSet per tool, every TextBlock wrapping, schema 1.5 like every card
(``bot.cards``).
"""

from __future__ import annotations

from typing import Any

from bot.cards.blocks import CARD_VERSION, SCHEMA_URL
from bot.cards.fields import field_label
from copilot.analytics.report import AnalyticsReport, ToolRates
from copilot.analytics.team import ApprovalStats
from copilot.writes import title as write_title

Card = dict[str, Any]
MAX_NAMES = 8
"""Names listed under the title; more are counted ("and 3 more")."""


def _text(text: str, **props: Any) -> Card:
    return {"type": "TextBlock", "text": text, "wrap": True, **props}


def _facts(pairs: list[tuple[str, str]], **props: Any) -> Card:
    return {"type": "FactSet", "facts": [{"title": t, "value": v} for t, v in pairs], **props}


def _pct(value: float) -> str:
    return f"{round(value * 100)} %"


def _share(part: int, rate: float) -> str:
    return f"{part} ({_pct(rate)})"


def _names(names: list[str]) -> str:
    if not names:
        return "no one"
    shown = ", ".join(names[:MAX_NAMES])
    more = len(names) - MAX_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


def _tool_section(tool: ToolRates, report: AnalyticsReport) -> Card:
    facts = [
        ("Proposals", str(tool.proposals)),
        ("Approved", _share(tool.approved, tool.approve_rate)),
        ("Edited", _share(tool.edited, tool.edit_rate)),
        ("Rejected", _share(tool.rejected, tool.reject_rate)),
    ]
    if tool.not_executed:
        facts.append(("Not written", f"{tool.not_executed} ({tool.conflicts} conflicts)"))
    items: list[Card] = [_text(write_title(tool.tool), weight="Bolder"), _facts(facts, spacing="Small")]
    fields = [f for f in report.fields if f.tool == tool.tool and f.proposals]
    if fields:
        items.append(_text("By field: proposed · edited · rejected", size="Small", isSubtle=True))
        items.append(
            _facts(
                [
                    (field_label(f.field), f"{f.proposals} · {_pct(f.edit_rate)} · {_pct(f.reject_rate)}")
                    for f in fields
                ],
                spacing="Small",
            )
        )
    return {"type": "Container", "separator": True, "spacing": "Medium", "items": items}


def _reasons(stats: ApprovalStats) -> list[Card]:
    if not stats.reason_counts:
        return []
    if stats.scope == "own":
        lines = [f"- {r.count} × {r.reason}" for r in stats.report.top_rejection_reasons]
        return [
            _text("Your top rejection reasons", weight="Bolder"),
            _text("\n".join(lines), spacing="Small"),
        ]
    counts = ", ".join(str(n) for n in stats.reason_counts)
    return [
        _text("Rejection reasons", weight="Bolder"),
        _text(
            f"{len(stats.reason_counts)} most frequent reasons, given {counts} times. Their words are "
            "each rep's own, so they are not shown here.",
            spacing="Small",
        ),
    ]


def stats_card(stats: ApprovalStats) -> Card:
    """One card with the approval figures ``stats`` holds (pure)."""
    report = stats.report
    if stats.scope == "team":
        kicker, heading = "Approval stats", "Your direct reports"
        subtitle = f"From the CRM: {_names(stats.covers)}."
    else:
        kicker, heading = "Approval stats", "Your own proposals"
        subtitle = None
    header_items = [
        _text(kicker, size="Small", isSubtle=True, spacing="None"),
        _text(heading, size="Medium", weight="Bolder", spacing="Small"),
    ]
    if subtitle:
        header_items.append(_text(subtitle, spacing="Small"))
    body: list[Card] = [{"type": "Container", "style": "emphasis", "bleed": True, "items": header_items}]
    if stats.not_linked:
        body.append(
            _text(
                f"Not counted (no Microsoft 365 account linked in the CRM): {_names(stats.not_linked)}.",
                size="Small",
                isSubtle=True,
            )
        )
    feedback = (
        "not recorded"
        if isinstance(report.feedback, str)
        else f"{report.feedback['like']} 👍 · {report.feedback['dislike']} 👎"
    )
    body.append(
        _facts(
            [
                ("Decided proposals", str(report.decided)),
                ("Conflicts", str(report.conflicts)),
                ("Answer feedback", feedback),
            ]
        )
    )
    if not report.tools:
        body.append(_text("No decided proposals yet.", isSubtle=True))
    body += [_tool_section(tool, report) for tool in report.tools]
    body += _reasons(stats)
    body.append(
        _text(
            "Counts and field names only: no record contents. Rates are shares of decided proposals.",
            size="Small",
            isSubtle=True,
            spacing="Medium",
        )
    )
    who = "your reports" if stats.scope == "team" else "you"
    return {
        "type": "AdaptiveCard",
        "$schema": SCHEMA_URL,
        "version": CARD_VERSION,
        "body": body,
        "fallbackText": f"Approval stats for {who}: {report.decided} decided proposals.",
    }
