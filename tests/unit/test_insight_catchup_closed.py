"""Deals won or lost in a catch-up (``copilot/insight/catchup.py``): the close is a stage movement
with who and when from the deal's history, a deal closed before the window is left out whatever
changed on it since, and a CRM that keeps no history still has the close listed from the deal's
``closed_at``, with the honest note. Pure, at named moments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from copilot.errors import CrmCallError
from copilot.evidence import Evidence
from copilot.insight.catchup import catch_up_reads, closed_items

SINCE = datetime(2026, 12, 7, 9, tzinfo=UTC)
UNTIL = SINCE + timedelta(days=2)
WON = {"id": "opp-7", "name": "Fleet", "stage": "Closed Won", "closed_at": "2026-12-08T10:00:00Z"}


def _close(at: str, by: str = "Nestor Wilke", old: str = "Negotiation") -> dict[str, Any]:
    return {
        "at": at,
        "by": {"id": "u-1", "name": by},
        "operation": "update",
        "changes": [{"field": "stage", "old": old, "new": "Closed Won"}],
    }


def test_a_close_in_the_window_is_a_stage_movement_with_who_and_when_cited_by_the_deal():
    items = closed_items(WON, [_close("2026-12-08T10:00:00Z")], SINCE, UNTIL)
    assert [(i.kind, i.field, i.by, i.cited) for i in items] == [
        ("stage", "stage", "Nestor Wilke", ("opp-7",))
    ]
    assert items[0].at == datetime(2026, 12, 8, 10, tzinfo=UTC)
    assert (
        items[0].text == "Fleet: stage Negotiation → Closed Won by Nestor Wilke, 2026-12-08 10:00 UTC [opp-7]"
    )


def test_a_deal_closed_before_the_window_is_left_out_though_it_changed_since():
    history = [
        _close("2026-12-01T10:00:00Z"),
        {
            "at": "2026-12-08T10:00:00Z",
            "by": {"name": "Alex Wilber"},
            "operation": "update",
            "changes": [{"field": "next_step", "old": "", "new": "Thank-you note"}],
        },
    ]
    assert closed_items({**WON, "closed_at": "2026-12-01T10:00:00Z"}, history, SINCE, UNTIL) == []


def test_without_a_close_in_its_history_the_deal_is_dated_by_closed_at_even_a_bare_day():
    items = closed_items({**WON, "closed_at": "2026-12-07"}, None, SINCE, UNTIL)
    assert [(i.kind, i.by, i.cited) for i in items] == [("stage", "", ("opp-7",))]
    assert items[0].text == "Fleet: closed as Closed Won, 2026-12-07 [opp-7]"
    assert closed_items({**WON, "closed_at": "2026-12-06"}, None, SINCE, UNTIL) == []
    assert closed_items({**WON, "closed_at": None}, None, SINCE, UNTIL) == []


class _Crm:
    """The reads of an account's catch-up, with one won deal whose history the CRM refuses."""

    async def account(self, account_id: str) -> dict[str, Any]:
        return {"id": account_id, "name": "Acme"}

    async def open_opportunities(self, **_: Any) -> list[dict[str, Any]]:
        return []

    async def closed_opportunities(self, **_: Any) -> list[dict[str, Any]]:
        # The CRM may return one closed before the window (by the day, or a later change).
        return [WON, {**WON, "id": "opp-8", "closed_at": "2026-11-20T10:00:00Z"}]

    async def history(self, kind: str, record_id: str) -> list[dict[str, Any]]:
        raise CrmCallError("not_supported", "auditing is off")

    async def activities(self, **_: Any) -> list[dict[str, Any]]:
        return []

    async def contacts(self, account_id: str) -> list[dict[str, Any]]:
        return []


async def test_an_accounts_closes_are_listed_from_closed_at_with_the_honest_note_when_the_crm_keeps_no_history():
    _, deals, items, skipped = await catch_up_reads(Evidence(_Crm()), SINCE, UNTIL, account_id="acc-1")  # type: ignore[arg-type]
    assert deals == 0
    assert [i.cited for i in items] == [("opp-7",)]
    assert items[0].text == "Fleet: closed as Closed Won, 2026-12-08 10:00 UTC [opp-7]"
    assert skipped == ["The CRM gave no change history for 1 of 1 deals: their field changes are not listed."]
