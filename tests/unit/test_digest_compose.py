"""The daily digest's pure composition: sections in order, empty ones say so, citations checked."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from langchain_core.messages import ToolMessage

from copilot.briefs.digest import DigestReads, WaitingProposal, compose_digest
from copilot.briefs.types import DIGEST_TITLES

AT = datetime(2026, 12, 3, 7, 30, tzinfo=UTC)


def _read(payload: object) -> ToolMessage:
    return ToolMessage(content=json.dumps(payload), name="get_opportunity", tool_call_id="r1")


def test_an_empty_day_lists_every_section_as_none_and_cites_nothing() -> None:
    digest = compose_digest("alex", AT, UTC, DigestReads((), (), (), ()), 2, [])
    for title in DIGEST_TITLES.values():
        assert f"{title}: none" in digest.text
    assert digest.items == ()
    assert digest.citations == ()
    assert digest.meetings_without_customer == 2
    assert "(2 other meetings have no CRM contact you can see.)" in digest.text


def test_an_overdue_deal_says_how_late_and_a_missing_next_step_and_a_hidden_target_is_not_named() -> None:
    deal = {"id": "opp-1", "name": "Big [deal]", "stage": "Proposal", "close_date": "2026-12-02"}
    hidden = WaitingProposal(tool_call_id="call_1", tool="update_opportunity", target=None, proposed_at="")
    digest = compose_digest(
        "alex", AT, UTC, DigestReads((), (), (deal,), (hidden,)), 0, [_read({"id": "opp-1"})]
    )
    overdue, waiting = digest.items
    assert overdue.text == (
        "Big (deal) (Proposal): close date 2026-12-02 passed 1 day ago; no next step set [opp-1]"
    )
    # A proposal whose target the rep cannot read now is listed by its kind alone: it cites nothing.
    assert waiting.text == "Update an opportunity"
    assert waiting.cited == ()
    assert digest.citation_check.unverified == ()
    assert digest.citation_check.cited == ("opp-1",)


def test_a_waiting_proposal_cites_its_record_never_its_internal_tool_call_id() -> None:
    """A tool call id is the runner's, not the rep's: it is in no line, no Sources list, no choice."""
    target = {"id": "opp-1", "name": "Big deal"}
    shown = WaitingProposal(
        tool_call_id="call_3e6f0a9b",
        tool="update_opportunity",
        target=target,
        proposed_at="2026-12-02T09:00:00Z",
    )
    digest = compose_digest("alex", AT, UTC, DigestReads((), (), (), (shown,)), 0, [_read(target)])
    [waiting] = digest.items
    assert waiting.text == "Update an opportunity: Big deal (proposed 2026-12-02) [opp-1]"
    assert waiting.cited == ("opp-1",)
    assert "call_" not in digest.text
    assert digest.citations == ("opp-1",)
    assert digest.citation_check.unverified == ()


def test_a_waiting_proposals_day_is_the_reps_day() -> None:
    target = {"id": "opp-1", "name": "Big deal"}
    late = WaitingProposal(
        tool_call_id="call_9", tool="update_opportunity", target=target, proposed_at="2026-12-03T02:00:00Z"
    )
    pacific = ZoneInfo("America/Los_Angeles")
    digest = compose_digest("alex", AT, pacific, DigestReads((), (), (), (late,)), 0, [_read(target)])
    assert "(proposed 2026-12-02)" in digest.text  # 18:00 on the 2nd in Los Angeles


def test_an_open_task_past_its_due_date_is_overdue_by_its_own_date_citing_the_task_and_its_deal() -> None:
    deal = {"id": "opp-1", "name": "Big deal", "stage": "Proposal", "close_date": "2027-01-30"}
    task = {"id": "act-9", "type": "task", "subject": "Send the proposal", "due_date": "2026-12-01"}
    reads = DigestReads((), (), (), (), overdue_tasks=((task, deal),))
    digest = compose_digest("alex", AT, UTC, reads, 0, [_read(deal), _read(task)])
    [overdue] = digest.items
    assert overdue.section == "overdue"
    assert overdue.text == "Task “Send the proposal” on Big deal: due 2026-12-01, 2 days ago [act-9] [opp-1]"
    assert digest.citation_check.unverified == ()
