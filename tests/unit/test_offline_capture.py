"""The offline model's reading of dictation and reminders (:mod:`offline_model.capture_parse`),
and the proposals it plans from them against canned CRM answers."""

from __future__ import annotations

import datetime as dt

import pytest

from copilot.writes import WRITE_TOOL_SCHEMAS
from offline_model.capture_parse import parse_capture
from tests.support.moments import SEED_DAY
from tests.unit.test_offline_model import _ask, _calls

DICTATION = (
    "just got off the phone with Sarah Chen at Acme - she confirmed budget for the fleet expansion, "
    "wants a proposal by the 15th. log it"
)


def test_dictation_ending_in_log_it_is_a_call_with_the_person_the_account_and_a_follow_up_due_the_next_15th() -> (
    None
):
    spec = parse_capture(DICTATION, SEED_DAY)
    assert spec is not None
    assert spec.type == "call"
    assert spec.people == ("Sarah Chen",)
    assert spec.account == "Acme"
    assert spec.summary == "she confirmed budget for the fleet expansion"
    assert "log it" not in spec.notes
    assert spec.notes.startswith("Just got off the phone with Sarah Chen")
    assert spec.follow_up is not None
    assert spec.follow_up.due == dt.date(2026, 12, 15)
    assert "proposal" in spec.follow_up.what
    assert not spec.reminder


@pytest.mark.parametrize(
    ("text", "kind", "people", "account", "due"),
    [
        (
            "Met with Kevin Park and Tom Becker from Acme yesterday: they liked the demo, need pricing "
            "by next Tuesday. capture this",
            "meeting",
            ("Kevin Park", "Tom Becker"),
            "Acme",
            dt.date(2026, 12, 15),
        ),
        (
            "talked to Dana Lee at Globex about onboarding, all good. log that",
            "call",
            ("Dana Lee",),
            "Globex",
            None,
        ),
        (
            "spoke with Tom Becker at Acme, the pilot starts in January. log it",
            "call",
            ("Tom Becker",),
            "Acme",
            None,
        ),
        (
            "quick call with Maria, she needs the SOW before Friday - log it please",
            "call",
            ("Maria",),
            None,
            dt.date(2026, 12, 11),
        ),
        (
            "spoke with Sarah Chen, send the contract by 2027-01-04. record it",
            "call",
            ("Sarah Chen",),
            None,
            dt.date(2027, 1, 4),
        ),
    ],
)
def test_other_dictations_are_read_by_their_grammar(
    text: str, kind: str, people: tuple[str, ...], account: str | None, due: dt.date | None
) -> None:
    spec = parse_capture(text, SEED_DAY)
    assert spec is not None
    assert (spec.type, spec.people, spec.account) == (kind, people, account)
    assert (spec.follow_up.due if spec.follow_up else None) == due


def test_a_dictated_past_day_is_when_it_happened() -> None:
    spec = parse_capture("Met with Kevin Park from Acme yesterday, all fine. log it", SEED_DAY)
    assert spec is not None
    assert spec.occurred_on == dt.date(2026, 12, 8)


@pytest.mark.parametrize(
    ("text", "what", "due", "people"),
    [
        ("remind me to call Maria tomorrow", "Call Maria", dt.date(2026, 12, 10), ("Maria",)),
        (
            "remind me to send Kevin Park the order form on Friday",
            "Send Kevin Park the order form",
            dt.date(2026, 12, 11),
            ("Kevin Park",),
        ),
        (
            "please remind me to email Sarah Chen next Tuesday",
            "Email Sarah Chen",
            dt.date(2026, 12, 15),
            ("Sarah Chen",),
        ),
        (
            "remind me to chase Tom Becker 2027-01-04",
            "Chase Tom Becker",
            dt.date(2027, 1, 4),
            ("Tom Becker",),
        ),
    ],
)
def test_a_reminder_is_a_task_with_the_day_it_names(
    text: str, what: str, due: dt.date, people: tuple[str, ...]
) -> None:
    spec = parse_capture(text, SEED_DAY)
    assert spec is not None
    assert spec.reminder
    assert spec.type == "task"
    assert spec.follow_up is not None
    assert (spec.follow_up.what, spec.follow_up.due) == (what, due)
    assert spec.people == people


@pytest.mark.parametrize(
    "text",
    [
        "log a call with Acme — discussed pricing",
        "what should I log it as?",
        "remind me what Maria said",
        "summarise Acme",
        "log it",
    ],
)
def test_messages_that_are_not_dictation_or_a_dated_reminder_are_left_to_the_other_readers(text: str) -> None:
    assert parse_capture(text, SEED_DAY) is None


def test_the_model_proposes_the_call_with_contact_and_deal_and_the_task_beside_it() -> None:
    produced, _ = _ask(
        "just got off the phone with Kevin Park at Acme - he confirmed budget for the fleet expansion, "
        "wants a proposal by the 15th. log it",
        today=SEED_DAY,
    )
    proposals = [c for m in produced for c in _calls(m) if c[0] == "log_activity"]
    assert len(proposals) == 2
    (_, call), (_, task) = proposals
    assert call["type"] == "call"
    assert call["contact_ids"] == ["con-0001"]
    assert call["opportunity_id"] == "opp-acme-expansion"
    assert call["subject"].startswith("Call with Kevin Park (Acme Corporation): he confirmed budget")
    assert task["type"] == "task"
    assert task["due_date"] == "2026-12-15"
    assert task["opportunity_id"] == "opp-acme-expansion"
    for args in (call, task):
        WRITE_TOOL_SCHEMAS["log_activity"].model_validate(args)


def test_a_reminder_finds_the_person_among_every_account_and_regards_their_contact_and_account() -> None:
    produced, _ = _ask("remind me to call Maria tomorrow", today=SEED_DAY)
    assert _calls(produced[0]) == [("search_accounts", {"query": ""})]
    ((_tool, args),) = [c for m in produced for c in _calls(m) if c[0] == "log_activity"]
    assert args == {
        "type": "task",
        "subject": "Call Maria Gonzalez",
        "notes": "Remind me to call Maria tomorrow",
        "account_id": "acc-acme",
        "due_date": "2026-12-10",
        "contact_ids": ["con-0002"],
    }


def test_a_month_or_weekday_in_the_dictation_is_a_time_not_a_person() -> None:
    spec = parse_capture(
        "spoke with Tom Becker at Acme yesterday, the pilot starts in January. log it", SEED_DAY
    )
    assert spec is not None
    assert spec.people == ("Tom Becker",)
