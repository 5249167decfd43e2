"""The daily digest's pure composition: sections in order, empty ones say so, citations checked."""

from __future__ import annotations

import json
from datetime import UTC, datetime

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
    assert waiting.cited == ("call_1",)
    # The proposal's id appeared in no read: the answers' citation check says so.
    assert digest.citation_check.unverified == ("call_1",)
    assert digest.citation_check.cited == ("opp-1",)
