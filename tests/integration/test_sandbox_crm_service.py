"""The sandbox CRM service against a real SQLite file: permissions, idempotency, versions, seed."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sandbox import db
from sandbox.crm import OPEN_STAGES, STAGES, CrmService, stages
from sandbox.directory import USERS, User, find_user
from sandbox.errors import CrmError

pytestmark = pytest.mark.integration


def user(handle: str) -> User:
    found = find_user(handle)
    assert found is not None
    return found


@pytest.fixture
def crm(tmp_path: Path) -> CrmService:
    """A fresh, seeded database per test (writes must not leak between tests)."""
    return CrmService(tmp_path / "crm.sqlite3")


@pytest.fixture(scope="module")
def read_crm(tmp_path_factory: pytest.TempPathFactory) -> CrmService:
    """One seeded database shared by read-only tests."""
    return CrmService(tmp_path_factory.mktemp("crm-read") / "crm.sqlite3")


def error_of(call: Any, *args: Any, **kwargs: Any) -> CrmError:
    with pytest.raises(CrmError) as info:
        call(*args, **kwargs)
    return info.value


def all_items(page_call: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """Follow next_cursor to the end."""
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = page_call(*args, limit=100, cursor=cursor, **kwargs)
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


def east_account_not_shared_with_alex(crm: CrmService) -> str:
    state = db.export_state(crm.db_path)
    shared = {s["record_id"] for s in state["shares"] if s["user_id"] == "u-alex"}
    return next(
        a["id"]
        for a in state["accounts"]
        if a["territory"] == "East" and a["owner_id"] != "u-alex" and a["id"] not in shared
    )


# --- seed --------------------------------------------------------------------------------


def test_seed_has_enough_accounts_opportunities_and_activities(read_crm: CrmService):
    state = db.export_state(read_crm.db_path)
    assert len(state["accounts"]) >= 60
    assert len(state["opportunities"]) >= 150
    assert len(state["activities"]) >= 300
    for tenant in {u.tenant_id for u in USERS}:
        assert sum(1 for a in state["activities"] if a["tenant_id"] == tenant) >= 100


def test_seed_gives_every_rep_accounts_in_their_territory(read_crm: CrmService):
    accounts = db.export_state(read_crm.db_path)["accounts"]
    for rep in (u for u in USERS if u.role == "rep"):
        assert any(a["owner_id"] == rep.id and a["territory"] == rep.territory for a in accounts), rep.handle


def test_seed_records_have_stable_prefixed_ids_commission_and_realistic_contacts(read_crm: CrmService):
    state = db.export_state(read_crm.db_path)
    assert all(a["id"].startswith("acc-") for a in state["accounts"])
    assert all(o["id"].startswith("opp-") and o["commission"] > 0 for o in state["opportunities"])
    assert all(a["id"].startswith("act-") for a in state["activities"])
    assert all(a["external_id"].startswith("seed-act-") for a in state["activities"])
    for contact in state["contacts"]:
        first, last = contact["name"].lower().split(" ", 1)
        assert contact["email"].startswith(f"{first}.{last}@")
        assert contact["phone"].startswith("+1 ")


def test_seed_gives_alex_the_acme_book(read_crm: CrmService):
    alex = user("alex")
    account = read_crm.get_account(alex, "acc-acme")
    assert account["name"] == "Acme Corporation"
    assert account["owner"]["id"] == "u-alex"
    assert account["contacts"] >= 3
    opps = read_crm.list_opportunities(alex, account_id="acc-acme")["items"]
    assert len(opps) >= 3
    renewal = next(o for o in opps if "Renewal" in o["name"])
    assert renewal["stage"] == "Proposal"
    days_to_close = (date.fromisoformat(renewal["close_date"]) - datetime.now(UTC).date()).days
    assert 30 <= days_to_close <= 60
    two_weeks_ago = (datetime.now(UTC) - timedelta(days=14)).date().isoformat()
    recent = read_crm.list_activities(alex, account_id="acc-acme", since=two_weeks_ago)
    assert recent["total"] >= 3


def test_seed_is_deterministic(tmp_path: Path):
    first = CrmService(tmp_path / "a.sqlite3")
    second = CrmService(tmp_path / "b.sqlite3")
    assert json.dumps(db.export_state(first.db_path)) == json.dumps(db.export_state(second.db_path))


def test_concurrent_ensure_schema_seeds_exactly_once(tmp_path: Path):
    path = tmp_path / "crm.sqlite3"
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda _: db.ensure_schema(path), range(4)))
    reference = db.export_state(CrmService(tmp_path / "reference.sqlite3").db_path)
    assert db.export_state(path) == reference


def test_processes_racing_to_create_the_database_seed_it_once(tmp_path: Path):
    path = tmp_path / "crm.sqlite3"
    code = "import sys; from pathlib import Path; from sandbox import db; db.ensure_schema(Path(sys.argv[1]))"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path)]) for _ in range(3)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    assert len(db.export_state(path)["accounts"]) == len(
        db.export_state(CrmService(tmp_path / "r.db").db_path)["accounts"]
    )


def test_reset_restores_the_seed(crm: CrmService):
    before = db.export_state(crm.db_path)
    crm.upsert_activity(user("alex"), "ext-reset", "call", "Call", account_id="acc-acme")
    db.reset(crm.db_path)
    assert db.export_state(crm.db_path) == before


def test_database_runs_in_wal_mode(read_crm: CrmService):
    conn = sqlite3.connect(read_crm.db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


# --- reads and permissions ---------------------------------------------------------------


def test_rep_cannot_read_unshared_account_in_another_territory(read_crm: CrmService):
    account_id = east_account_not_shared_with_alex(read_crm)
    assert error_of(read_crm.get_account, user("alex"), account_id).code == "permission_denied"
    assert error_of(read_crm.list_contacts, user("alex"), account_id).code == "permission_denied"
    assert error_of(read_crm.list_activities, user("alex"), account_id=account_id).code == "permission_denied"


def test_rep_can_read_account_shared_with_them_and_accounts_in_their_territory(read_crm: CrmService):
    alex = user("alex")
    assert read_crm.get_account(alex, "acc-globex")["territory"] == "East"
    visible = all_items(read_crm.search_accounts, alex)
    assert {a["territory"] for a in visible} == {"West", "East"}
    assert [a["id"] for a in visible if a["territory"] == "East"] == ["acc-globex"]
    megan_west = next(a for a in visible if a["owner"] == "Megan Bowen")
    assert read_crm.get_account(alex, megan_west["id"])["id"] == megan_west["id"]


def test_search_matches_name_industry_and_city_case_insensitively(read_crm: CrmService):
    alex = user("alex")
    assert [a["id"] for a in read_crm.search_accounts(alex, "acme corp")["items"]] == ["acc-acme"]
    assert all(a["city"] == "Seattle" for a in read_crm.search_accounts(alex, "SEATTLE")["items"])
    assert read_crm.search_accounts(alex, "manufacturing")["total"] >= 1


def test_other_tenant_gets_not_found_and_search_returns_none_of_the_records(read_crm: CrmService):
    priya = user("priya")
    assert error_of(read_crm.get_account, priya, "acc-acme").code == "not_found"
    assert error_of(read_crm.get_opportunity, priya, "opp-acme-renewal").code == "not_found"
    assert error_of(read_crm.list_contacts, priya, "acc-acme").code == "not_found"
    assert error_of(read_crm.void_activity, priya, "act-0001", "nope").code == "not_found"
    assert (
        error_of(read_crm.update_opportunity, priya, "opp-acme-renewal", 1, {"stage": "Closed Lost"}).code
        == "not_found"
    )
    contoso_ids = {
        a["id"] for a in db.export_state(read_crm.db_path)["accounts"] if a["owner_id"] == "u-alex"
    }
    found = {a["id"] for a in all_items(read_crm.search_accounts, priya)}
    assert found
    assert not (found & contoso_ids)
    assert read_crm.search_accounts(priya, "Acme")["total"] == 0
    opp_accounts = {
        o["account"]["id"] for o in all_items(read_crm.list_opportunities, priya, open_only=False)
    }
    assert not (opp_accounts & contoso_ids)


def test_unknown_record_is_not_found(read_crm: CrmService):
    assert error_of(read_crm.get_account, user("alex"), "acc-nope").code == "not_found"
    assert error_of(read_crm.get_opportunity, user("alex"), "opp-nope").code == "not_found"


def test_rep_never_sees_commission_and_manager_does(read_crm: CrmService):
    alex, nestor = user("alex"), user("nestor")
    rep_results: list[Any] = [
        read_crm.get_opportunity(alex, "opp-acme-renewal"),
        all_items(read_crm.list_opportunities, alex, open_only=False),
        read_crm.pipeline_summary(alex),
        read_crm.list_activities(alex),
    ]
    assert "commission" not in json.dumps(rep_results)
    assert "commission" in read_crm.get_opportunity(nestor, "opp-acme-renewal")
    assert all("commission" in o for o in read_crm.list_opportunities(nestor)["items"])


def test_manager_reads_reports_accounts_across_territories(read_crm: CrmService):
    territories = {a["territory"] for a in all_items(read_crm.search_accounts, user("nestor"))}
    assert territories == {"West", "East"}


def test_list_opportunities_filters_by_owner_stage_and_close_window(read_crm: CrmService):
    alex = user("alex")
    mine = all_items(read_crm.list_opportunities, alex, owner="me")
    assert mine
    assert all(o["owner"]["id"] == "u-alex" and o["stage"] in OPEN_STAGES for o in mine)
    proposals = all_items(read_crm.list_opportunities, alex, stage="Proposal")
    assert proposals
    assert all(o["stage"] == "Proposal" for o in proposals)
    today = datetime.now(UTC).date()
    window = all_items(
        read_crm.list_opportunities,
        alex,
        closing_after=today.isoformat(),
        closing_before=(today + timedelta(days=60)).isoformat(),
    )
    assert "opp-acme-renewal" in {o["id"] for o in window}
    assert all(
        today.isoformat() <= o["close_date"] <= (today + timedelta(days=60)).isoformat() for o in window
    )
    won = all_items(read_crm.list_opportunities, alex, stage="Closed Won")
    assert "opp-acme-renewal-2026" in {o["id"] for o in won}


def test_pagination_walks_every_item_once(read_crm: CrmService):
    alex = user("alex")
    total = read_crm.list_activities(alex, limit=1)["total"]
    seen: list[str] = []
    cursor = None
    while True:
        page = read_crm.list_activities(alex, limit=7, cursor=cursor)
        seen += [a["id"] for a in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == total


def test_activities_are_newest_first_and_only_readable(read_crm: CrmService):
    alex = user("alex")
    items = all_items(read_crm.list_activities, alex)
    stamps = [a["occurred_at"] for a in items]
    assert stamps == sorted(stamps, reverse=True)
    hidden = east_account_not_shared_with_alex(read_crm)
    assert hidden not in {a["account"]["id"] for a in items}


def test_pipeline_summary_defaults_to_this_quarter_and_cites_opportunities(read_crm: CrmService):
    alex = user("alex")
    summary = read_crm.pipeline_summary(alex)
    start, end = date.fromisoformat(summary["period"]["start"]), date.fromisoformat(summary["period"]["end"])
    assert start <= datetime.now(UTC).date() <= end
    assert [s["stage"] for s in summary["by_stage"]] == list(OPEN_STAGES)
    assert sum(s["count"] for s in summary["by_stage"]) == len(summary["opportunity_ids"])
    assert summary["total_amount"] == pytest.approx(sum(s["amount"] for s in summary["by_stage"]))
    for opp_id in summary["opportunity_ids"]:
        assert read_crm.get_opportunity(alex, opp_id)["owner"]["id"] == "u-alex"
    team = read_crm.pipeline_summary(user("nestor"), scope="team")
    owners = {read_crm.get_opportunity(user("nestor"), o)["owner"]["id"] for o in team["opportunity_ids"]}
    assert owners <= {"u-nestor", "u-alex", "u-megan", "u-diego", "u-lidia", "u-adele"}
    assert len(owners) > 1


@pytest.mark.parametrize(
    ("method", "kwargs"),
    [
        ("search_accounts", {"limit": 0}),
        ("search_accounts", {"limit": 101}),
        ("search_accounts", {"cursor": "abc"}),
        ("list_opportunities", {"stage": "Won"}),
        ("list_opportunities", {"owner": "someone"}),
        ("list_opportunities", {"closing_after": "next week"}),
        ("list_activities", {"since": "yesterday"}),
        ("pipeline_summary", {"scope": "everyone"}),
        ("pipeline_summary", {"period_start": "2026-13-01"}),
        ("upsert_activity", {"external_id": "x", "type": "lunch", "subject": "s", "account_id": "acc-acme"}),
        ("upsert_activity", {"external_id": "x", "type": "call", "subject": " ", "account_id": "acc-acme"}),
        ("upsert_activity", {"external_id": "x", "type": "call", "subject": "No regarding record"}),
        ("upsert_activity", {"external_id": "x", "type": "call", "subject": "s", "account_id": "acc-acme",
                             "occurred_at": "soon"}),
    ],
)  # fmt: skip
def test_bad_arguments_are_validation_errors(read_crm: CrmService, method: str, kwargs: dict[str, Any]):
    assert error_of(getattr(read_crm, method), user("alex"), **kwargs).code == "validation"


def test_stages_lists_open_stages_first():
    assert stages() == list(STAGES)
    assert STAGES[:4] == OPEN_STAGES


# --- activity upserts --------------------------------------------------------------------


def test_upserting_the_same_activity_twice_stores_one_record(crm: CrmService):
    alex = user("alex")
    args: dict[str, Any] = {
        "external_id": "thread-1:call-1",
        "type": "call",
        "subject": "Discussed renewal",
        "notes": "Wants 3 years",
        "occurred_at": "2026-01-05T10:00:00+01:00",
        "opportunity_id": "opp-acme-renewal",
    }
    first = crm.upsert_activity(alex, **args)
    second = crm.upsert_activity(alex, **args)
    assert first["created"] is True
    assert second["created"] is False
    assert first["activity"] == second["activity"]
    assert first["activity"]["occurred_at"] == "2026-01-05T09:00:00Z"
    assert first["activity"]["account"]["id"] == "acc-acme"
    rows = [a for a in db.export_state(crm.db_path)["activities"] if a["external_id"] == "thread-1:call-1"]
    assert len(rows) == 1


def test_retry_without_occurred_at_returns_the_stored_activity(crm: CrmService):
    alex = user("alex")
    first = crm.upsert_activity(alex, "ext-now", "task", "Send deck", account_id="acc-acme")
    again = crm.upsert_activity(alex, "ext-now", "task", "Send deck", account_id="acc-acme")
    assert again == {"activity": first["activity"], "created": False}


def test_same_key_with_different_fields_is_an_idempotency_mismatch(crm: CrmService):
    alex = user("alex")
    stored = crm.upsert_activity(alex, "ext-1", "call", "Call Maria", account_id="acc-acme")
    err = error_of(crm.upsert_activity, alex, "ext-1", "call", "Call Kevin", account_id="acc-acme")
    assert err.code == "idempotency_mismatch"
    assert err.details["existing"]["id"] == stored["activity"]["id"]
    assert err.details["differing_fields"] == ["subject"]


def test_fifty_concurrent_identical_upserts_create_exactly_one_row(crm: CrmService):
    alex = user("alex")
    barrier = threading.Barrier(50)

    def upsert(_: int) -> dict[str, Any]:
        barrier.wait()
        return crm.upsert_activity(
            alex, "ext-race", "meeting", "QBR", occurred_at="2026-02-01T15:00:00Z", account_id="acc-acme"
        )

    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(upsert, range(50)))
    assert len({r["activity"]["id"] for r in results}) == 1
    assert sum(r["created"] for r in results) == 1
    rows = [a for a in db.export_state(crm.db_path)["activities"] if a["external_id"] == "ext-race"]
    assert len(rows) == 1


def test_logging_an_activity_needs_read_access_on_the_regarding_records(crm: CrmService):
    alex = user("alex")
    hidden = east_account_not_shared_with_alex(crm)
    assert (
        error_of(crm.upsert_activity, alex, "e1", "call", "s", account_id=hidden).code == "permission_denied"
    )
    assert crm.upsert_activity(alex, "e2", "call", "s", account_id="acc-globex")["created"] is True
    foreign = error_of(crm.upsert_activity, user("priya"), "e3", "call", "s", account_id="acc-acme")
    assert foreign.code == "not_found"


def test_opportunity_must_belong_to_the_given_account(crm: CrmService):
    err = error_of(
        crm.upsert_activity,
        user("alex"),
        "e1",
        "call",
        "s",
        account_id="acc-globex",
        opportunity_id="opp-acme-renewal",
    )
    assert err.code == "validation"


def test_voiding_is_owner_or_manager_only_and_idempotent(crm: CrmService):
    alex = user("alex")
    activity = crm.upsert_activity(alex, "ext-v", "call", "Wrong account", account_id="acc-acme")["activity"]
    assert error_of(crm.void_activity, user("megan"), activity["id"], "mine now").code == "permission_denied"
    voided = crm.void_activity(user("nestor"), activity["id"], "Logged on the wrong account")
    assert voided["voided"] is True
    assert voided["version"] == activity["version"] + 1
    assert voided["voided_by"]["id"] == "u-nestor"
    assert voided["void_reason"] == "Logged on the wrong account"
    assert crm.void_activity(alex, activity["id"], "again") == voided
    listed = {a["id"] for a in all_items(crm.list_activities, alex, account_id="acc-acme")}
    assert activity["id"] not in listed
    with_voided = all_items(crm.list_activities, alex, account_id="acc-acme", include_voided=True)
    assert activity["id"] in {a["id"] for a in with_voided}


# --- opportunity updates -----------------------------------------------------------------


def test_owner_updates_opportunity_with_version_bump_and_previous_values(crm: CrmService):
    alex = user("alex")
    before = crm.get_opportunity(alex, "opp-acme-renewal")
    result = crm.update_opportunity(
        alex, "opp-acme-renewal", before["version"], {"stage": "Negotiation", "next_step": "Send MSA"}
    )
    updated = result["opportunity"]
    assert updated["stage"] == "Negotiation"
    assert updated["next_step"] == "Send MSA"
    assert updated["version"] == before["version"] + 1
    assert updated["modified_by"]["id"] == "u-alex"
    assert result["previous"] == {"stage": "Proposal", "next_step": before["next_step"]}
    assert "commission" not in updated


def test_rep_cannot_update_an_opportunity_they_do_not_own(crm: CrmService):
    megan = user("megan")
    assert crm.get_opportunity(megan, "opp-acme-renewal")["owner"]["id"] == "u-alex"
    err = error_of(crm.update_opportunity, megan, "opp-acme-renewal", 1, {"stage": "Negotiation"})
    assert err.code == "permission_denied"


def test_manager_of_the_owner_can_update_and_set_probability(crm: CrmService):
    result = crm.update_opportunity(user("nestor"), "opp-acme-renewal", 1, {"probability": 65})
    assert result["opportunity"]["probability"] == 65
    assert result["previous"] == {"probability": 50}
    assert "commission" in result["opportunity"]


def test_rep_cannot_change_protected_fields_and_unknown_fields_are_invalid(crm: CrmService):
    alex = user("alex")
    for protected in ({"probability": 90}, {"commission": 1}, {"owner_id": "u-megan"}, {"name": "x"}):
        assert (
            error_of(crm.update_opportunity, alex, "opp-acme-renewal", 1, protected).code
            == "permission_denied"
        )
    for bad in (
        {},
        {"colour": "red"},
        {"stage": "Won"},
        {"close_date": "31/12/2026"},
        {"amount": -5},
        {"amount": "lots"},
        {"next_step": "x" * 501},
    ):
        assert error_of(crm.update_opportunity, alex, "opp-acme-renewal", 1, bad).code == "validation"
    assert crm.get_opportunity(alex, "opp-acme-renewal")["version"] == 1


def test_stale_expected_version_is_a_conflict_with_current_values(crm: CrmService):
    alex = user("alex")
    crm.update_opportunity(alex, "opp-acme-renewal", 1, {"amount": 250000})
    err = error_of(crm.update_opportunity, alex, "opp-acme-renewal", 1, {"amount": 260000})
    assert err.code == "conflict"
    assert err.details["current"]["version"] == 2
    assert err.details["current"]["amount"] == 250000
    assert "commission" not in err.details["current"]


def test_closing_an_opportunity_sets_probability(crm: CrmService):
    alex = user("alex")
    won = crm.update_opportunity(alex, "opp-acme-renewal", 1, {"stage": "Closed Won"})
    assert won["opportunity"]["probability"] == 100
    assert won["previous"] == {"stage": "Proposal", "probability": 50}
    lost = crm.update_opportunity(alex, "opp-acme-expansion", 1, {"stage": "Closed Lost"})
    assert lost["opportunity"]["probability"] == 0


def test_closed_since_lists_the_deals_closed_from_that_moment_with_when_their_history_closed_them(
    crm: CrmService,
):
    alex = user("alex")
    won = crm.update_opportunity(alex, "opp-acme-renewal", 1, {"stage": "Closed Won"})
    closed_at = won["opportunity"]["modified_at"]
    after = (datetime.fromisoformat(closed_at.replace("Z", "+00:00")) + timedelta(seconds=1)).isoformat()

    found = all_items(crm.list_opportunities, alex, owner="me", closed_since=closed_at)
    assert [(o["id"], o["stage"], o["closed_at"]) for o in found] == [
        ("opp-acme-renewal", "Closed Won", closed_at)
    ]
    assert all_items(crm.list_opportunities, alex, owner="me", closed_since=after) == []
    # A deal the seed closed long ago carries the moment its history closed it, in any listing.
    seeded = next(
        o
        for o in all_items(crm.list_opportunities, alex, owner="me", open_only=False)
        if o["id"] == "opp-acme-renewal-2026"
    )
    history = crm.get_record_history(alex, "opportunity", "opp-acme-renewal-2026")["items"]
    closing = [h["changed_at"] for h in history if any(c["field"] == "stage" for c in h["changes"])]
    assert seeded["closed_at"] == closing[-1] < closed_at
    assert crm.get_opportunity(alex, "opp-acme-renewal")["closed_at"] == closed_at
    assert "closed_at" not in crm.get_opportunity(alex, "opp-acme-expansion")


def test_concurrent_updates_with_the_same_version_let_exactly_one_win(crm: CrmService):
    alex = user("alex")
    barrier = threading.Barrier(20)

    def update(i: int) -> str:
        barrier.wait()
        try:
            crm.update_opportunity(alex, "opp-acme-renewal", 1, {"next_step": f"step {i}"})
        except CrmError as err:
            return err.code
        return "ok"

    with ThreadPoolExecutor(max_workers=20) as pool:
        outcomes = list(pool.map(update, range(20)))
    assert outcomes.count("ok") == 1
    assert outcomes.count("conflict") == 19
    assert crm.get_opportunity(alex, "opp-acme-renewal")["version"] == 2


# --- mailbox drafts and request log ------------------------------------------------------


def test_drafts_round_trip_per_owner(crm: CrmService):
    tenant = user("alex").tenant_id
    draft = db.create_draft(
        crm.db_path,
        tenant_id=tenant,
        owner_id="u-alex",
        subject="Renewal",
        body_content_type="text",
        body="Hi Maria",
        to_recipients=["maria.gonzalez@acme.example"],
    )
    assert draft["id"].startswith("draft-")
    assert draft["to_recipients"] == ["maria.gonzalez@acme.example"]
    assert db.get_draft(crm.db_path, draft_id=draft["id"]) == draft
    assert db.list_drafts(crm.db_path, tenant_id=tenant, owner_id="u-alex") == [draft]
    assert db.list_drafts(crm.db_path, tenant_id=tenant, owner_id="u-megan") == []
    assert db.get_draft(crm.db_path, draft_id="draft-nope") is None


def test_request_log_appends_in_order(crm: CrmService):
    tenant = user("alex").tenant_id
    db.log_request(crm.db_path, tenant_id=tenant, caller_id="u-alex", tool="get_account",
                   record_ids=["acc-acme"], outcome="ok")  # fmt: skip
    db.log_request(crm.db_path, tenant_id=tenant, caller_id="u-alex", tool="get_account",
                   record_ids=["acc-x"], outcome="not_found")  # fmt: skip
    log = db.read_request_log(crm.db_path)
    assert [(r["record_ids"], r["outcome"]) for r in log] == [(["acc-acme"], "ok"), (["acc-x"], "not_found")]
    assert db.export_state(crm.db_path)["request_log"] == log
