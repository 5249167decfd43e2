"""The "copilot stats" card: valid, phone-friendly, counts and field names only (pure)."""

from __future__ import annotations

import pytest

from bot.cards import ALLOWED_ACTIONS, ALLOWED_ELEMENTS, STATS_COMMANDS, help_card
from bot.stats_card import stats_card
from copilot.analytics.report import AnalyticsReport, FieldRates, Reason, ToolRates
from copilot.analytics.team import ApprovalStats, CrmMe, CrmPerson, scope_of
from copilot.identity import RepIdentity
from copilot.writes import title
from tests.support.adaptive_cards import all_text, elements, validate_cards


def _report(*, reasons: list[Reason], tools: bool = True) -> AnalyticsReport:
    tool_rates = [
        ToolRates(
            tool="update_opportunity",
            proposals=4,
            approved=2,
            edited=1,
            rejected=1,
            not_executed=0,
            conflicts=0,
            approve_rate=0.5,
            edit_rate=0.25,
            reject_rate=0.25,
        ),
        ToolRates(
            tool="log_activity",
            proposals=3,
            approved=1,
            edited=0,
            rejected=1,
            not_executed=1,
            conflicts=1,
            approve_rate=1 / 3,
            edit_rate=0.0,
            reject_rate=1 / 3,
        ),
    ]
    fields = [
        FieldRates(
            tool="update_opportunity",
            field="amount",
            proposals=3,
            kept=1,
            edited=1,
            rejected=1,
            added_by_rep=0,
            removed_by_rep=0,
            edit_rate=1 / 3,
            reject_rate=1 / 3,
        )
    ]
    return AnalyticsReport(
        since=None,
        tenant="t",
        decided=7 if tools else 0,
        tools=tool_rates if tools else [],
        fields=fields if tools else [],
        edit_deltas=[],
        top_rejection_reasons=reasons,
        conflicts=1 if tools else 0,
        undo=0.0,
        model_call_limit_hits="not recorded",
        fallbacks="not recorded",
        feedback={"like": 3, "dislike": 1},
    )


TEAM = ApprovalStats(
    scope="team",
    covers=["Alex Wilber", "Megan Bowen"],
    not_linked=["Adele Vance"],
    report=_report(reasons=[]),
    reason_counts=[2, 1],
)
OWN = ApprovalStats(
    scope="own",
    covers=["Alex Wilber"],
    not_linked=[],
    report=_report(reasons=[Reason(reason="wrong stage", count=2, tools=["update_opportunity"])]),
    reason_counts=[2],
)
EMPTY = ApprovalStats(
    scope="own",
    covers=["Alex Wilber"],
    not_linked=[],
    report=_report(reasons=[], tools=False),
    reason_counts=[],
)
CARDS = {"team": stats_card(TEAM), "own": stats_card(OWN), "empty": stats_card(EMPTY)}


@pytest.mark.parametrize("name", list(CARDS))
def test_the_stats_card_passes_the_official_validator_and_keeps_to_teams_mobile_elements(name: str):
    card = CARDS[name]
    assert validate_cards([card]) == [{"errors": [], "warnings": []}]
    assert card["version"] == "1.5"
    used = {n["type"] for n in elements(card)}
    assert used <= ALLOWED_ELEMENTS | ALLOWED_ACTIONS
    assert "ColumnSet" not in used  # one column at 390 px
    assert all(n.get("wrap") is True for n in elements(card) if n["type"] == "TextBlock")


def test_a_managers_card_names_the_reports_and_counts_reasons_without_their_words():
    text = all_text(CARDS["team"])
    assert "Alex Wilber, Megan Bowen" in text
    assert "Adele Vance" in text  # named as not counted
    assert "given 2, 1 times" in text
    assert "wrong stage" not in text
    assert title("update_opportunity") in text
    assert "2 (50 %)" in text
    assert "1 (1 conflicts)" in text
    assert "3 👍 · 1 👎" in text


def test_a_reps_card_shows_their_own_reasons_and_field_rates():
    text = all_text(CARDS["own"])
    assert "2 × wrong stage" in text
    assert "Amount" in text
    assert "3 · 33 % · 33 %" in text


def test_an_empty_history_says_so():
    card = CARDS["empty"]
    assert "No decided proposals yet." in all_text(card)
    [summary] = [n for n in elements(card) if n["type"] == "FactSet"]
    assert {f["title"]: f["value"] for f in summary["facts"]}["Decided proposals"] == "0"


def test_someone_with_direct_reports_counts_their_linked_reports_and_not_themselves():
    me = CrmMe(
        id="u-m",
        name="Manager",
        aad_object_id="aad-m",
        direct_reports=[
            CrmPerson(id="u-a", name="A", aad_object_id="aad-a"),
            CrmPerson(id="u-b", name="B", aad_object_id=None),
        ],
    )
    scope, reps, covers, not_linked = scope_of(me, RepIdentity("t", "aad-m"))
    assert (scope, reps, covers, not_linked) == ("team", frozenset({"aad-a"}), ["A"], ["B"])
    alone = CrmMe(id="u-r", name="Rep", aad_object_id="aad-r")
    assert scope_of(alone, RepIdentity("t", "aad-r")) == ("own", frozenset({"aad-r"}), ["Rep"], [])


def test_the_help_card_tells_people_how_to_ask_for_stats():
    assert STATS_COMMANDS[0] in all_text(help_card())
