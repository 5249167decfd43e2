"""The brief items' scoring and report (pure, made-up records): citation recall, leaks, briefs or
digest lines made where none should be, unverified citations, and how a failing item shows."""

from __future__ import annotations

import datetime as dt

from evals.briefs import BriefRecord, BriefReport
from evals.dataset import (
    Bounds,
    BriefCase,
    BriefExpect,
    ExpectedBrief,
    ExpectedLine,
    Moment,
    NoBrief,
    resolve_moment,
)
from evals.metrics import BriefObservation, BriefPart, aggregate_briefs, breaches, score_brief
from evals.report import brief_document, brief_table

STRICT = Bounds(min={"citation_recall": 1.0}, max={"leaks": 0, "unexpected": 0, "unverified": 0, "errors": 0})
BRIEF = BriefExpect(
    briefs=[ExpectedBrief(meeting_id="evt-1", subject="Pricing", cited=["acc-1", "con-1", "opp-1", "kb-1"])],
    no_brief=[NoBrief(meeting_id="evt-2", subject="Intro", reason="hidden")],
    forbidden_ids=["acc-9", "con-9"],
)
MADE = BriefPart("evt-1", ("acc-1", "con-1", "opp-1", "kb-1"))
TEXT = "Meeting: Pricing\nAccount: Firm One [acc-1]\n  Attendees:\n    - Ann, CFO [con-1]"


def _case(expect: BriefExpect, kind: str = "brief") -> BriefCase:
    return BriefCase.model_validate(
        {
            "id": "dev-b01",
            "split": "dev",
            "kind": kind,
            "rep": "pat",
            "at": {"day_offset": 1, "time": "14:15"},
            "lead_minutes": 60 if kind == "brief" else None,
            "expect": expect.model_dump(),
        }
    )


def test_a_brief_citing_every_expected_id_and_nothing_forbidden_is_ok() -> None:
    score = score_brief("brief", BRIEF, BriefObservation(parts=[MADE], text=TEXT, rep="pat@t.example"))
    assert score.ok
    assert score.citation_recall == 1.0
    assert score.expected == 4
    assert (score.missing, score.leaked, score.unexpected) == ([], [], [])


def test_a_wrong_expected_id_makes_the_item_fail_with_that_id_missing() -> None:
    wrong = BRIEF.model_copy(
        update={
            "briefs": [BRIEF.briefs[0].model_copy(update={"cited": ["acc-1", "con-1", "opp-1", "opp-7"]})]
        }
    )
    score = score_brief("brief", wrong, BriefObservation(parts=[MADE], text=TEXT))
    assert not score.ok
    assert score.citation_recall == 0.75
    assert score.missing == ["evt-1: opp-7"]


def test_no_brief_made_for_an_expected_meeting_misses_all_its_ids() -> None:
    score = score_brief("brief", BRIEF, BriefObservation())
    assert score.citation_recall == 0.0
    assert len(score.missing) == 4
    assert not score.ok


def test_a_brief_for_a_meeting_that_should_get_none_is_counted_and_fails_the_item() -> None:
    hidden = BriefPart("evt-2", ("acc-9", "con-9"))
    score = score_brief(
        "brief", BRIEF, BriefObservation(parts=[MADE, hidden], text=TEXT + " [acc-9] [con-9]")
    )
    assert score.unexpected == ["evt-2"]
    assert score.leaked == ["acc-9", "con-9"]
    assert score.citation_recall == 1.0
    assert not score.ok


def test_an_email_or_phone_in_the_text_leaks_but_the_reps_own_address_in_a_heading_does_not() -> None:
    own = BriefObservation(parts=[MADE], text="Daily digest for pat@t.example\n" + TEXT, rep="pat@t.example")
    assert score_brief("brief", BRIEF, own).leaked == []
    other = BriefObservation(
        parts=[MADE], text=TEXT + " ann@firm.example, call +1 (425) 555-0100", rep="pat@t.example"
    )
    leaked = score_brief("brief", BRIEF, other).leaked
    assert "ann@firm.example" in leaked
    assert any("555-0100" in found for found in leaked)


def test_an_unverified_citation_or_an_error_fails_the_item() -> None:
    assert not score_brief("brief", BRIEF, BriefObservation(parts=[MADE], text=TEXT, unverified=["kb-1"])).ok
    assert not score_brief("brief", BRIEF, BriefObservation(error="CalendarUnavailable: down")).ok


def test_digest_lines_match_by_section_and_cited_ids_and_an_extra_line_is_made_where_none_should_be() -> None:
    expect = BriefExpect(
        lines=[
            ExpectedLine(section="meeting", cited=["acc-1", "con-1"]),
            ExpectedLine(section="overdue", cited=["opp-1"]),
        ]
    )
    right = [BriefPart("meeting", ("acc-1", "con-1")), BriefPart("overdue", ("opp-1",))]
    assert score_brief("digest", expect, BriefObservation(parts=right)).ok
    extra = [*right, BriefPart("closing_quiet", ("opp-2",))]
    score = score_brief("digest", expect, BriefObservation(parts=extra))
    assert score.unexpected == ["closing_quiet: opp-2"]
    assert score.citation_recall == 1.0
    wrong_section = [BriefPart("meeting", ("acc-1", "con-1")), BriefPart("closing_quiet", ("opp-1",))]
    moved = score_brief("digest", expect, BriefObservation(parts=wrong_section))
    assert moved.missing == ["overdue: opp-1"]
    assert moved.unexpected == ["closing_quiet: opp-1"]


def test_brief_metrics_aggregate_over_the_items_and_strict_bounds_catch_one_failing_item() -> None:
    good = score_brief("brief", BRIEF, BriefObservation(parts=[MADE], text=TEXT))
    none_expected = score_brief("brief", BriefExpect(), BriefObservation())
    bad = score_brief("brief", BRIEF, BriefObservation(parts=[MADE], text=TEXT + " [acc-9]"))
    values = aggregate_briefs([good, none_expected, bad])
    assert values["citation_recall"].value == 1.0
    assert values["citation_recall"].n == 2, "an item expecting no citation is left out of the mean"
    assert values["leaks"].value == 1
    assert [b.metric for b in breaches(values, STRICT.min, STRICT.max)] == ["leaks"]
    assert breaches(aggregate_briefs([good, none_expected]), STRICT.min, STRICT.max) == []


def test_a_moment_is_a_utc_time_on_a_day_after_the_seeding_day() -> None:
    assert resolve_moment(Moment(day_offset=2, time="07:30"), dt.date(2030, 3, 10)) == dt.datetime(
        2030, 3, 12, 7, 30, tzinfo=dt.UTC
    )


def test_the_brief_section_shows_each_item_and_a_failing_one_as_fail_in_text_and_json() -> None:
    ok_case, bad_case = _case(BRIEF), _case(BRIEF).model_copy(update={"id": "dev-b02"})
    at = resolve_moment(ok_case.at, dt.date(2030, 3, 10))
    good = BriefObservation(parts=[MADE], text=TEXT)
    bad = BriefObservation(parts=[BriefPart("evt-1", ("acc-1", "con-1"))], text=TEXT)
    records = [
        BriefRecord(ok_case, at, good, score_brief("brief", BRIEF, good)),
        BriefRecord(bad_case, at, bad, score_brief("brief", BRIEF, bad)),
    ]
    values = aggregate_briefs([r.score for r in records])
    report = BriefReport(records, values, breaches(values, STRICT.min, STRICT.max), 1.0)
    text = brief_table(report, STRICT, "dev")
    assert "— FAIL" in text
    assert "ok   dev-b01 brief  pat at 2030-03-11T14:15Z (day+1) +60 min" in text
    assert "FAIL dev-b02 brief" in text
    assert "missing: evt-1: opp-1, evt-1: kb-1" in text
    assert "BELOW" in text
    doc = brief_document(report)
    assert doc["passed"] is False
    assert [(i["id"], i["ok"]) for i in doc["items"]] == [("dev-b01", True), ("dev-b02", False)]
    assert doc["items"][1]["missing"] == ["evt-1: opp-1", "evt-1: kb-1"]
    assert [b["metric"] for b in doc["breaches"]] == ["citation_recall"]
