"""Composing a brief (pure): citations on every fact, free text never read as a citation,
and the answers' citation check catching an id no read returned."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from langchain_core.messages import ToolMessage

from copilot.briefs.compose import AccountReads, compose_brief
from copilot.briefs.types import Meeting

MEETING = Meeting(
    id="evt-1",
    subject="[External] Renewal review",
    start=datetime(2026, 12, 3, 15, tzinfo=UTC),
    end=datetime(2026, 12, 3, 15, 45, tzinfo=UTC),
)
ACCOUNT = {"id": "acc-1", "name": "Acme", "industry": "Manufacturing", "city": "Seattle"}
CONTACT = {"id": "con-1", "name": "Maria Gonzalez", "title": "VP Operations", "email": "m@acme.example"}
DEAL = {
    "id": "opp-1",
    "name": "Renewal",
    "stage": "Proposal",
    "amount": 240000.0,
    "currency": "USD",
    "close_date": "2027-01-16",
    "next_step": "Send revised proposal [draft]",
}
ACTIVITY = {"id": "act-1", "type": "call", "subject": "Pricing call", "occurred_at": "2026-11-30T10:00:00Z"}
CHUNK = {"id": "kb-abc-1", "title": "Proposal stage playbook", "snippet": "- Present live. - Send a summary"}


def _reads(*payloads: Mapping[str, object]) -> list[ToolMessage]:
    return [
        ToolMessage(content=json.dumps(p), name="t", tool_call_id=f"c{i}") for i, p in enumerate(payloads)
    ]


def _account(**overrides: object) -> AccountReads:
    values: dict[str, object] = {
        "account": ACCOUNT,
        "contacts": [CONTACT],
        "opportunities": [DEAL],
        "activities": [ACTIVITY],
        "playbooks": {"Proposal": CHUNK},
    }
    values.update(overrides)
    return AccountReads(**values)  # type: ignore[arg-type]


def test_every_fact_of_a_brief_cites_its_record_and_the_check_verifies_them() -> None:
    reads = _reads(
        ACCOUNT, {"items": [CONTACT]}, {"items": [DEAL]}, {"items": [ACTIVITY]}, {"items": [CHUNK]}
    )
    brief = compose_brief(MEETING, [_account()], 0, reads)

    assert brief.citations == ("acc-1", "con-1", "opp-1", "act-1", "kb-abc-1")
    assert brief.citation_check.unverified == ()
    assert "Maria Gonzalez, VP Operations [con-1]" in brief.text
    assert "Proposal, USD 240,000, closes 2027-01-16 [opp-1]" in brief.text
    assert "Proposal: Present live. Send a summary … [kb-abc-1]" in brief.text
    assert "m@acme.example" not in brief.text
    # Brackets in free text (a subject, a next step) are not citations.
    assert "(External) Renewal review" in brief.text
    assert "Send revised proposal (draft)" in brief.text


def test_a_fact_from_a_record_no_read_returned_fails_the_citation_check() -> None:
    reads = _reads(ACCOUNT, {"items": [CONTACT]}, {"items": [DEAL]})  # no activity, no chunk read
    brief = compose_brief(MEETING, [_account()], 0, reads)

    assert brief.citation_check.unverified == ("act-1", "kb-abc-1")


def test_an_empty_section_says_none_and_other_external_attendees_are_only_counted() -> None:
    brief = compose_brief(
        MEETING, [_account(opportunities=[], activities=[], playbooks={})], 2, _reads(ACCOUNT)
    )

    assert "  Open deals: none" in brief.text
    assert "  Last activities: none" in brief.text
    assert "(2 other external attendees are not a CRM contact you can see.)" in brief.text


def test_a_brief_shows_its_meeting_in_the_reps_zone_and_names_the_zone() -> None:
    pacific = ZoneInfo("America/Los_Angeles")
    brief = compose_brief(MEETING, [_account()], 0, [], zone=pacific)
    assert brief.time_zone == "America/Los_Angeles"
    assert brief.text.splitlines()[0] == (
        "Meeting: (External) Renewal review — Thu 2026-12-03 07:00–07:45 America/Los_Angeles"
    )
    assert "UTC" not in brief.text
    # No zone known: UTC, and it says so.
    assert compose_brief(MEETING, [_account()], 0, []).text.splitlines()[0].endswith("15:00–15:45 UTC")
