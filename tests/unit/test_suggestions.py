"""Suggestions derived from a brief's or the digest's reads (pure), and which proposals act on them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from langchain_core.messages import ToolMessage

from copilot.briefs.compose import AccountReads, compose_brief
from copilot.briefs.digest import DigestReads, compose_digest
from copilot.briefs.ledger import kinds_changed_by
from copilot.briefs.suggestions import MOVE_BY_DAYS, close_date_passed, for_brief, for_digest
from copilot.briefs.types import SUGGESTED_CHANGES, SUGGESTION_KINDS, Meeting
from copilot.citations import cited_ids

DAY = dt.date(2026, 12, 3)


def deal(
    record_id: str, close: str, *, version: Any = 2, owner: str = "u-alex", **extra: Any
) -> dict[str, Any]:
    return {
        "id": record_id,
        "name": f"Deal {record_id} [draft]",
        "close_date": close,
        "version": version,
        "owner": {"id": owner, "name": owner},
        **extra,
    }


def test_an_open_deal_whose_close_date_passed_is_suggested_with_its_record_its_version_and_a_new_date():
    [suggestion] = close_date_passed([deal("opp-1", "2026-11-27T00:00:00Z", version=5)], DAY)
    assert suggestion.kind == "close_date_passed"
    assert (suggestion.record_id, suggestion.record_version) == ("opp-1", 5)
    # Free text loses its square brackets: only the suggestion's own citation reads as one.
    assert suggestion.text == "The close date of Deal opp-1 (draft) [opp-1] passed 6 days ago: move it?"
    assert suggestion.cited == ("opp-1",)
    assert cited_ids(suggestion.text) == ["opp-1"]
    assert suggestion.value == (DAY + dt.timedelta(days=MOVE_BY_DAYS)).isoformat() == "2026-12-17"


def test_a_close_date_of_the_day_or_later_or_unreadable_gives_no_suggestion_and_one_day_is_singular():
    deals = [
        deal("opp-today", "2026-12-03"),
        deal("opp-later", "2027-01-10"),
        deal("opp-none", ""),
        deal("opp-bad", "soon"),
        deal("opp-yesterday", "2026-12-02"),
    ]
    [suggestion] = close_date_passed(deals, DAY)
    assert suggestion.record_id == "opp-yesterday"
    assert "passed 1 day ago" in suggestion.text


def test_a_deal_without_an_integer_version_or_an_id_is_not_suggested_and_a_repeat_is_suggested_once():
    deals = [
        deal("opp-noversion", "2026-11-01", version=None),
        deal("opp-boolversion", "2026-11-01", version=True),
        {"name": "no id", "close_date": "2026-11-01", "version": 1},
        deal("opp-twice", "2026-11-01"),
        deal("opp-twice", "2026-11-01"),
    ]
    assert [s.record_id for s in close_date_passed(deals, DAY)] == ["opp-twice"]


def test_a_brief_suggests_only_the_reps_own_deals_and_the_digest_its_overdue_ones():
    reads = AccountReads(
        account={"id": "acc-1", "name": "Acme"},
        contacts=[],
        opportunities=[deal("opp-mine", "2026-11-01"), deal("opp-theirs", "2026-11-01", owner="u-megan")],
        activities=[],
        playbooks={},
    )
    assert [s.record_id for s in for_brief([reads], "u-alex", DAY)] == ["opp-mine"]
    assert for_brief([reads], "u-nobody", DAY) == ()
    assert [s.record_id for s in for_digest([deal("opp-late", "2026-12-01")], DAY)] == ["opp-late"]


def test_every_kind_names_the_write_it_asks_for():
    assert set(SUGGESTED_CHANGES) == set(SUGGESTION_KINDS)


def test_a_proposal_acts_on_a_suggestion_only_with_its_kinds_tool_record_and_field():
    assert kinds_changed_by(
        "update_opportunity", {"opportunity_id": "opp-1", "close_date": "2026-12-20"}
    ) == (("close_date_passed", "opp-1"),)
    assert kinds_changed_by("update_opportunity", {"opportunity_id": "opp-1", "stage": "Proposal"}) == ()
    assert kinds_changed_by("log_activity", {"opportunity_id": "opp-1", "close_date": "2026-12-20"}) == ()
    assert kinds_changed_by("update_opportunity", {"close_date": "2026-12-20"}) == ()


def _read(payload: str) -> ToolMessage:
    return ToolMessage(content=payload, name="list_opportunities", tool_call_id="brief-read-1")


def test_a_briefs_and_a_digests_suggestions_end_their_text_and_pass_the_citation_check():
    overdue = deal("opp-1", "2026-11-27")
    suggestions = close_date_passed([overdue], DAY)
    reads = [_read('{"items": [{"id": "opp-1"}, {"id": "acc-1"}]}')]
    meeting = Meeting(
        id="evt-1",
        subject="Review",
        start=dt.datetime(2026, 12, 3, 15, tzinfo=dt.UTC),
        end=dt.datetime(2026, 12, 3, 16, tzinfo=dt.UTC),
    )
    account = AccountReads(
        account={"id": "acc-1", "name": "Acme"},
        contacts=[],
        opportunities=[overdue],
        activities=[],
        playbooks={},
    )
    brief = compose_brief(meeting, [account], 0, reads, suggestions)
    at = dt.datetime(2026, 12, 3, 7, 30, tzinfo=dt.UTC)
    digest = compose_digest(
        "alex",
        at,
        dt.UTC,
        DigestReads(meetings=[], closing_quiet=[], overdue=[overdue], waiting=[]),
        0,
        reads,
        suggestions,
    )
    for composed in (brief, digest):
        assert composed.suggestions == suggestions
        assert composed.text.endswith(f"Suggestions:\n  - {suggestions[0].text}"), composed.text
        assert composed.citation_check.unverified == ()
        assert "opp-1" in composed.citation_check.cited
    bare = compose_brief(meeting, [account], 0, reads)
    assert bare.suggestions == ()
    assert "Suggestions" not in bare.text
