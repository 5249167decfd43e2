"""What changed since the rep last looked (``copilot/insight/catchup.py``), against the real
sandbox: a change another user makes through the CRM appears in the rep's next catch-up with who
made it and when, cited; the stored last catch-up moves forward; both CRM profiles; a contact
added after the moment appears (cited by its id and its account's), one added before does not; a
hidden account's records never appear.

The service's "now" is pinned to the change's own moment as the CRM recorded it (never to the
wall clock): the CRM stamps its history itself.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from copilot.errors import CrmCallError
from copilot.insight.catchup import CONTACTS_SKIPPED, CatchUp, catch_up_at, last_catch_up, mark_caught_up
from copilot.persistence.database import connect
from copilot.settings import Settings
from sandbox.dataverse.ids import guid_for
from tests.support.copilot_env import prepare_database, sign_in
from tests.support.dataverse import east_account_of_diego
from tests.support.dataverse_env import dataverse_settings
from tests.support.moments import SEED_MIDNIGHT, SEED_MORNING
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

DEAL = "opp-acme-renewal"


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    return pinned_sandbox


def _update(sandbox: SandboxProcess, handle: str, deal_id: str, **changes: Any) -> datetime:
    """Change a deal as ``handle`` through the CRM's own tool; the moment the CRM recorded."""
    current = sandbox.call(handle, "get_opportunity", opportunity_id=deal_id)["structuredContent"]
    result = sandbox.call(
        handle,
        "update_opportunity",
        opportunity_id=deal_id,
        expected_version=current["version"],
        changes=changes,
    )
    assert result["isError"] is False, result
    history = [
        h for h in sandbox.admin("GET", "/admin/export")["record_history"] if h["record_id"] == deal_id
    ]
    return datetime.fromisoformat(history[-1]["changed_at"].replace("Z", "+00:00"))


async def _catch_up(settings: Settings, handle: str, now: datetime, **scope: Any) -> CatchUp:
    rep = await sign_in(settings, handle)
    async with connect(settings) as conn:
        result = await catch_up_at(settings, rep.identity, rep.broker, conn, now=now, **scope)
    assert result.citation_check is not None
    assert result.citation_check.unverified == ()
    return result


async def test_a_change_by_another_user_appears_in_the_next_catch_up_with_who_and_when_and_the_mark_moves_forward(
    sandbox: SandboxProcess, copilot_settings: Settings
):
    # Nestor (alex's manager) changes alex's deal.
    changed_at = _update(
        sandbox, "nestor", DEAL, next_step="Nestor: bring legal in early", stage="Negotiation"
    )
    now = changed_at + timedelta(hours=1)

    first = await _catch_up(copilot_settings, "alex", now)
    assert first.since_source == "default"
    assert first.since == now - timedelta(days=7)
    mine = [i for i in first.items if DEAL in i.cited and i.by == "Nestor Wilke"]
    kinds = {i.kind for i in mine}
    assert kinds == {"stage", "field"}, first.text
    stage = next(i for i in mine if i.kind == "stage")
    assert "Proposal → Negotiation" in stage.text
    assert f"{changed_at:%Y-%m-%d %H:%M} UTC" in stage.text
    assert stage.at == changed_at
    assert "Nestor: bring legal in early" in first.text
    assert CONTACTS_SKIPPED not in first.skipped  # the CRM says when each contact was added
    rep = await sign_in(copilot_settings, "alex")
    async with connect(copilot_settings) as conn:
        assert await last_catch_up(conn, rep.identity) == now

    later = now + timedelta(hours=1)
    second = await _catch_up(copilot_settings, "alex", later)
    assert second.since_source == "last_catch_up"
    assert second.since == now
    assert not [i for i in second.items if i.by == "Nestor Wilke"]
    async with connect(copilot_settings) as conn:
        assert await last_catch_up(conn, rep.identity) == later
        await mark_caught_up(conn, rep.identity, now - timedelta(days=3))
        assert await last_catch_up(conn, rep.identity) == later

    # An explicit moment is read as asked, and an account's catch-up leaves the stored mark alone.
    account = await _catch_up(copilot_settings, "alex", later, since=changed_at, account_id="acc-acme")
    assert account.since_source == "asked"
    assert any(DEAL in i.cited and i.by == "Nestor Wilke" for i in account.items)
    async with connect(copilot_settings) as conn:
        assert await last_catch_up(conn, rep.identity) == later


async def test_on_dataverse_the_change_comes_from_the_audit_history_cited_by_guid(
    sandbox: SandboxProcess, database_url: str
):
    settings = dataverse_settings(database_url, sandbox)
    await prepare_database(settings)
    changed_at = _update(sandbox, "nestor", "opp-acme-expansion", amount=150000)
    result = await _catch_up(
        settings,
        "alex",
        changed_at + timedelta(minutes=5),
        opportunity_id=guid_for("opportunity", "opp-acme-expansion"),
    )
    deal = guid_for("opportunity", "opp-acme-expansion")
    amount = [i for i in result.items if i.kind == "field" and "amount" in i.text]
    assert amount, result.text
    assert amount[0].cited == (deal,)
    assert amount[0].by == "Nestor Wilke"
    assert "USD 180,000 → USD 150,000" in amount[0].text


async def test_a_hidden_accounts_changes_never_appear(sandbox: SandboxProcess, copilot_settings: Settings):
    hidden = east_account_of_diego(sandbox)
    state = sandbox.admin("GET", "/admin/export")
    hidden_ids = (
        {hidden["id"]}
        | {o["id"] for o in state["opportunities"] if o["account_id"] == hidden["id"]}
        | {a["id"] for a in state["activities"] if a["account_id"] == hidden["id"]}
    )
    deal = sorted(
        o["id"]
        for o in state["opportunities"]
        if o["account_id"] == hidden["id"] and not o["stage"].startswith("Closed")
    )[0]
    changed_at = _update(sandbox, "diego", deal, next_step="Secret East plan")
    now = changed_at + timedelta(minutes=5)
    result = await _catch_up(copilot_settings, "alex", now, since=now - timedelta(days=90))
    assert not hidden_ids & set(result.cited)
    assert "Secret East plan" not in result.text
    with pytest.raises(CrmCallError):
        await _catch_up(copilot_settings, "alex", now, account_id=hidden["id"])
    with pytest.raises(CrmCallError):
        await _catch_up(copilot_settings, "alex", now, opportunity_id=deal)


def _add_contact(sandbox: SandboxProcess, account_id: str, name: str, at: datetime) -> str:
    """Add a contact to an account through the sandbox's admin surface, created at ``at``."""
    added = sandbox.admin(
        "POST",
        "/admin/contacts",
        {"account_id": account_id, "name": name, "title": "CFO", "created_at": at.isoformat()},
    )
    assert added["created_at"] == f"{at:%Y-%m-%dT%H:%M:%SZ}"
    return str(added["id"])


@pytest.mark.parametrize("profile", ["reference", "dataverse"])
async def test_a_contact_added_since_the_moment_is_listed_cited_and_one_added_before_is_not(
    sandbox: SandboxProcess, copilot_settings: Settings, database_url: str, profile: str
):
    since = SEED_MIDNIGHT - timedelta(days=2)
    new = _add_contact(sandbox, "acc-acme", f"Nova Newcomb {profile}", SEED_MIDNIGHT - timedelta(hours=5))
    old = _add_contact(sandbox, "acc-acme", f"Olga Oldfield {profile}", since - timedelta(hours=1))
    settings, ids = copilot_settings, {new: new, old: old, "acc-acme": "acc-acme"}
    if profile == "dataverse":
        settings = dataverse_settings(database_url, sandbox)
        await prepare_database(settings)
        ids = {
            new: guid_for("contact", new),
            old: guid_for("contact", old),
            "acc-acme": guid_for("account", "acc-acme"),
        }

    for scope in ({"account_id": ids["acc-acme"]}, {}):
        result = await _catch_up(settings, "alex", SEED_MORNING, since=since, **scope)
        contacts = [i for i in result.items if i.kind == "new_contact"]
        mine = [i for i in contacts if ids[new] in i.cited]
        assert len(mine) == 1, result.text
        assert mine[0].cited == (ids[new], ids["acc-acme"])
        assert mine[0].at == SEED_MIDNIGHT - timedelta(hours=5)
        assert f"Nova Newcomb {profile}, CFO" in mine[0].text
        assert f"[{ids[new]}]" in mine[0].text
        assert not [i for i in result.items if ids[old] in i.cited]
        assert f"Olga Oldfield {profile}" not in result.text
        assert "New contacts:" in result.text
        assert CONTACTS_SKIPPED not in result.skipped


WON_BY_NESTOR = {"reference": "opp-0010", "dataverse": "opp-0012"}
"""An open deal of alex's per profile (Negotiation, each on an account of its own), for his manager
to win."""


@pytest.mark.parametrize("profile", ["reference", "dataverse"])
async def test_a_deal_won_by_another_user_in_the_window_appears_with_who_and_when_cited_and_not_in_a_window_after_it(
    sandbox: SandboxProcess, copilot_settings: Settings, database_url: str, profile: str
):
    deal = WON_BY_NESTOR[profile]
    state = sandbox.admin("GET", "/admin/export")
    account = next(o["account_id"] for o in state["opportunities"] if o["id"] == deal)
    won_at = _update(sandbox, "nestor", deal, stage="Closed Won")
    settings, deal_id, account_id = copilot_settings, deal, account
    if profile == "dataverse":
        settings = dataverse_settings(database_url, sandbox)
        await prepare_database(settings)
        deal_id, account_id = guid_for("opportunity", deal), guid_for("account", account)

    # The whole book (the rep's own deals won or lost), the deal's account, and the deal itself.
    for scope in ({}, {"account_id": account_id}, {"opportunity_id": deal_id}):
        result = await _catch_up(
            settings, "alex", won_at + timedelta(hours=1), since=won_at - timedelta(hours=1), **scope
        )
        mine = [i for i in result.items if deal_id in i.cited]
        assert mine, result.text
        assert {i.by for i in mine} == {"Nestor Wilke"}, result.text
        stage = [i for i in mine if i.kind == "stage"]
        assert len(stage) == 1, result.text
        assert stage[0].field == "stage"
        assert stage[0].at == won_at
        assert stage[0].cited == (deal_id,)
        assert "Negotiation → Closed Won by Nestor Wilke" in stage[0].text
        assert f"{won_at:%Y-%m-%d %H:%M} UTC [{deal_id}]" in stage[0].text
        assert "Stage movements:" in result.text
        assert not result.skipped, result.skipped

    # A window that starts after the close leaves the deal out, though it was the last change to
    # it (and Dataverse, keeping only the day it closed, still returns it among the closed deals).
    for scope in ({}, {"account_id": account_id}, {"opportunity_id": deal_id}):
        later = await _catch_up(
            settings, "alex", won_at + timedelta(hours=2), since=won_at + timedelta(minutes=1), **scope
        )
        assert not [i for i in later.items if deal_id in i.cited], later.text
