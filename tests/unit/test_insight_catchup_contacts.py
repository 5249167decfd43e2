"""New contacts in a catch-up (``copilot/insight/catchup.py``): each cited by the contact and its
account, only those added in the window, and the honest note only when the CRM does not say when
a contact was added. Pure, at named moments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from copilot.evidence import Evidence
from copilot.insight.catchup import CONTACTS_SKIPPED, CatchUp, catch_up_reads, contact_item, render

SINCE = datetime(2026, 12, 7, tzinfo=UTC)
UNTIL = SINCE + timedelta(days=2)


class _Crm:
    """Just the reads an account's catch-up makes."""

    def __init__(self, contacts: list[dict[str, Any]]) -> None:
        self._contacts = contacts

    async def account(self, account_id: str) -> dict[str, Any]:
        return {"id": account_id, "name": "Acme"}

    async def open_opportunities(self, **_: Any) -> list[dict[str, Any]]:
        return []

    async def closed_opportunities(self, **_: Any) -> list[dict[str, Any]]:
        return []

    async def activities(self, **_: Any) -> list[dict[str, Any]]:
        return []

    async def contacts(self, account_id: str) -> list[dict[str, Any]]:
        return self._contacts


def test_a_contact_item_cites_the_contact_and_its_account():
    item = contact_item(
        {
            "id": "con-9",
            "name": "Nova N",
            "title": "CFO",
            "account_id": "acc-1",
            "created_at": "2026-12-08T10:00:00Z",
        },
        {"acc-1": "Acme"},
    )
    assert item is not None
    assert item.kind == "new_contact"
    assert item.cited == ("con-9", "acc-1")
    assert item.text.startswith("New contact: Nova N, CFO at Acme, added 2026-12-08 10:00 UTC")
    assert contact_item({"id": "con-9", "name": "Nova N", "created_at": None}, {}) is None


async def test_only_contacts_added_in_the_window_are_listed_and_no_note_when_the_crm_says():
    crm = _Crm(
        [
            {"id": "con-new", "name": "New", "account_id": "acc-1", "created_at": "2026-12-08T10:00:00Z"},
            {"id": "con-old", "name": "Old", "account_id": "acc-1", "created_at": "2026-12-01T10:00:00Z"},
        ]
    )
    scope, deals, items, skipped = await catch_up_reads(Evidence(crm), SINCE, UNTIL, account_id="acc-1")  # type: ignore[arg-type]
    assert [i.cited for i in items] == [("con-new", "acc-1")]
    assert skipped == []
    text = render(
        CatchUp(scope=scope, since=SINCE, until=UNTIL, since_source="asked", deals=deals, items=tuple(items))
    )
    assert "New contacts:\n  - New contact: New at Acme, added 2026-12-08 10:00 UTC [con-new] [acc-1]" in text


async def test_a_crm_that_does_not_say_when_a_contact_was_added_gets_the_honest_note():
    crm = _Crm([{"id": "con-1", "name": "Someone", "account_id": "acc-1"}])
    _, _, items, skipped = await catch_up_reads(Evidence(crm), SINCE, UNTIL, account_id="acc-1")  # type: ignore[arg-type]
    assert items == []
    assert skipped == [CONTACTS_SKIPPED]
