"""The typed results insight reads keep beside their JSON (``copilot/views.py``): read
back from one run's tool messages for the bot's cards, round-tripped through JSON as a
checkpointer keeps them, and never confused with a write's outcome."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from copilot.insight.catchup import CatchUp, CatchUpItem
from copilot.insight.risk import DealRisk, RiskReport, Signal
from copilot.views import CatchUpView, RiskView, view_artifact, view_ids, views_in
from copilot.writes.types import WriteOutcome

REPORT = RiskReport(
    today=date(2026, 12, 9),
    checked=3,
    deals=(
        DealRisk(
            id="opp-1",
            name="Acme — Expansion",
            signals=(
                Signal(
                    kind="close_date_passed",
                    reason="close date passed",
                    text="close date passed [opp-1]",
                    cited=("opp-1",),
                ),
            ),
        ),
    ),
)
CATCH_UP = CatchUp(
    scope="Your deals",
    since=datetime(2026, 12, 4, tzinfo=UTC),
    until=datetime(2026, 12, 9, tzinfo=UTC),
    since_source="asked",
    deals=3,
    items=(
        CatchUpItem(
            kind="stage",
            text="Acme: stage Proposal → Negotiation [opp-2]",
            cited=("opp-2", "act-9"),
            at=datetime(2026, 12, 8, tzinfo=UTC),
            by="Alex Wilber",
        ),
    ),
)


def _tool(artifact: object, call: str) -> ToolMessage:
    return ToolMessage(content="{}", tool_call_id=call, name="t", artifact=artifact)


def test_a_runs_views_are_read_back_in_order_after_a_json_round_trip() -> None:
    stored = [
        json.loads(json.dumps(view_artifact(v)))
        for v in (RiskView(report=REPORT), CatchUpView(catch_up=CATCH_UP))
    ]
    views = views_in([HumanMessage("q"), AIMessage(""), _tool(stored[0], "a"), _tool(stored[1], "b")])
    assert views == [RiskView(report=REPORT), CatchUpView(catch_up=CATCH_UP)]


def test_a_writes_outcome_or_an_unreadable_artifact_is_not_a_view() -> None:
    outcome = WriteOutcome.done({"id": "x"}).model_dump(mode="json")
    assert views_in([_tool(outcome, "a"), _tool({"view": "risk", "report": {}}, "b"), _tool(None, "c")]) == []


def test_a_views_ids_are_every_record_its_card_cites() -> None:
    assert view_ids(RiskView(report=REPORT)) == {"opp-1"}
    assert view_ids(CatchUpView(catch_up=CATCH_UP)) == {"opp-2", "act-9"}
