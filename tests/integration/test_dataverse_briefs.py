"""Briefs, the digest and the stats hierarchy on the ``dataverse`` profile: the same code as the
reference profile's, reading through the connector's typed reads, here the Dataverse Web API with
the rep's on-behalf-of token, against the sandbox's Dataverse face over real HTTPS.

The expectations are the sandbox's own (its export and permission rules, mapped to Dataverse ids
with ``sandbox.dataverse.ids.guid_for``), not product code's: every cited record id is a GUID of
a record alex may read, and nothing carries an email address or a phone number.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta

import pytest

from copilot.analytics.team import read_me
from copilot.briefs.digest import digest_at
from copilot.briefs.service import briefs_at
from copilot.briefs.types import SECTIONS
from copilot.identity import RepIdentity
from copilot.persistence.database import connect
from copilot.redaction import detect_phone_numbers, redact_pii
from copilot.settings import Settings
from copilot.turns import Proposal
from sandbox.dataverse.ids import guid_for
from sandbox.directory import find_user
from tests.integration.test_briefs import (
    EMAIL,
    MANAGERS_ONLY,
    _event,
    _export,
    _hidden_account,
    _ingest_library,
    _readable_crm_ids,
    _start,
    _traces_of,
)
from tests.integration.test_digest import _expected_deals, _expected_meetings, _moment
from tests.support.copilot_env import prepare_database, sign_in
from tests.support.dataverse_env import dataverse_settings
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

GUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
KINDS = ("account", "contact", "opportunity", "activity")


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    """This module's sandbox is seeded from a named day (``tests/support/moments.py``)."""
    return pinned_sandbox


@pytest.fixture
async def dv_settings(database_url: str, sandbox: SandboxProcess) -> AsyncIterator[Settings]:
    from copilot.middleware.resilience import reset_breakers

    reset_breakers()
    settings = dataverse_settings(database_url, sandbox)
    await prepare_database(settings)
    yield settings
    sandbox.admin("PUT", "/admin/knobs", {})


def _guids(sandbox_ids: set[str]) -> dict[str, str]:
    """Dataverse id → sandbox id, for every kind a brief cites (the emulator's deterministic ids)."""
    return {guid_for(kind, i): i for i in sandbox_ids for kind in KINDS}


class NothingWaiting:
    """The runner's waiting proposals, for a rep with no threads (the digest's fourth section)."""

    async def waiting(self, identity: RepIdentity, thread_id: str) -> Sequence[Proposal]:
        return ()


async def test_a_brief_on_dataverse_has_every_section_and_cites_only_guids_alex_may_read(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    chunks = await _ingest_library(dv_settings)
    state = _export(sandbox)
    meeting = _event(state, "Acme renewal pricing review")
    rep = await sign_in(dv_settings, "alex")
    async with connect(dv_settings) as conn:
        run = await briefs_at(
            dv_settings,
            rep.identity,
            rep.broker,
            conn,
            at=_start(meeting) - timedelta(minutes=30),
            lead_minutes=60,
        )

    assert [b.meeting_id for b in run.briefs] == [meeting["id"]]
    brief = run.briefs[0]
    assert [a.account_id for a in brief.accounts] == [guid_for("account", "acc-acme")]
    assert {item.section for item in brief.accounts[0].items} == set(SECTIONS), brief.text
    attendees = [i.text for i in brief.accounts[0].items if i.section == "attendee"]
    assert any("Maria Gonzalez, VP Operations" in a for a in attendees)
    assert any("Kevin Park, Procurement Manager" in a for a in attendees)

    # Every citation was read in this run, and each CRM one is the GUID of a record alex may read.
    assert brief.citation_check.unverified == ()
    playbook = set().union(*(ids for doc, ids in chunks.items() if doc != MANAGERS_ONLY))
    crm = [c for c in brief.citations if c not in playbook]
    assert crm
    assert all(GUID.match(c) for c in crm), brief.citations
    readable = _readable_crm_ids(state, "alex")
    by_guid = _guids(readable)
    assert {c for c in crm if c not in by_guid} == set()
    # The deals are Acme's open ones, as the CRM holds them.
    deals = {c for i in brief.accounts[0].items if i.section == "deal" for c in i.cited}
    expected = {
        guid_for("opportunity", o["id"])
        for o in state["opportunities"]
        if o["account_id"] == "acc-acme"
        and o["id"] in readable
        and o["stage"] not in ("Closed Won", "Closed Lost")
    }
    assert deals == expected
    # The last activities are Acme's three newest (of the account or its deals, voided ones left
    # out), newest first, as the reference CRM lists them.
    newest = sorted(
        (
            a
            for a in state["activities"]
            if a["account_id"] == "acc-acme" and a["id"] in readable and not a.get("voided_at")
        ),
        key=lambda a: (a["occurred_at"], a["id"]),
        reverse=True,
    )[:3]
    activities = [c for i in brief.accounts[0].items if i.section == "activity" for c in i.cited]
    assert activities == [guid_for("activity", a["id"]) for a in newest]
    # No email address or phone number at all.
    assert not EMAIL.search(brief.text), brief.text
    assert detect_phone_numbers(brief.text) == [], brief.text
    assert redact_pii(brief.text) == brief.text
    assert not [c for c in state["contacts"] if c["email"] in brief.text or c["phone"] in brief.text]


async def test_on_dataverse_a_hidden_accounts_meeting_gets_no_brief_and_leaks_nothing(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    state = _export(sandbox)
    first = min(_start(e) for e in state["events"]).replace(hour=0, minute=0)
    rep = await sign_in(dv_settings, "alex")
    async with connect(dv_settings) as conn:
        run = await briefs_at(dv_settings, rep.identity, rep.broker, conn, at=first, lead_minutes=5 * 24 * 60)

    subjects = {b.subject for b in run.briefs}
    assert {"Acme renewal pricing review", "Globex co-sell sync", "Fleet rollout workshop"} <= subjects
    for no_brief in ("West pipeline review", "1:1 Alex / Nestor", "Introduction call"):
        assert no_brief not in subjects
    hidden = _hidden_account(state)
    traces = _traces_of(state, hidden)
    traces += [guid_for(kind, t) for t in traces for kind in KINDS]
    output = json.dumps(run.model_dump(mode="json"))
    assert [t for t in traces if t in output] == []
    for brief in run.briefs:
        assert brief.citation_check.unverified == ()


async def test_the_digest_on_dataverse_lists_alexs_day_cited_with_guids(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    state = _export(sandbox)
    at = _moment(state)
    rep = await sign_in(dv_settings, "alex")
    async with connect(dv_settings) as conn:
        digest = await digest_at(dv_settings, rep.identity, rep.broker, conn, NothingWaiting(), at=at)

    assert digest.citation_check.unverified == ()
    meetings = [i for i in digest.items if i.section == "meeting"]
    assert len(meetings) == len(_expected_meetings(state, at)) > 0
    quiet, overdue = _expected_deals(state, at)
    opportunity = {guid_for("opportunity", o): o for o in quiet + overdue}
    assert sorted(opportunity[i.cited[0]] for i in digest.items if i.section == "closing_quiet") == quiet
    assert sorted(opportunity[i.cited[0]] for i in digest.items if i.section == "overdue") == overdue
    assert quiet or overdue  # the seeded day has deals to show, so the test compares something
    assert digest.citations
    assert all(GUID.match(c) for c in digest.citations), digest.citations
    # No contact's address or phone number: the only address is the rep's own sign-in name in the
    # heading ("Daily digest for alex@…"), as on the reference profile.
    body = digest.text.replace(rep.identity.username, "")
    assert not EMAIL.search(body), digest.text
    assert detect_phone_numbers(digest.text) == [], digest.text
    assert not [c for c in state["contacts"] if c["email"] in digest.text or c["phone"] in digest.text]


async def test_the_manager_hierarchy_on_dataverse_is_the_systemusers_with_their_entra_ids(
    dv_settings: Settings,
) -> None:
    nestor = await sign_in(dv_settings, "nestor")

    me = await read_me(dv_settings, nestor.broker)

    user = find_user("nestor")
    assert user is not None
    assert me.id == guid_for("systemuser", user.id)
    assert me.name == user.name
    reports = {p.name: p.aad_object_id for p in me.direct_reports}
    for handle in ("alex", "megan", "diego", "lidia"):
        report = find_user(handle)
        assert report is not None
        assert reports[report.name] == report.aad_object_id
