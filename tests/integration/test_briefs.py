"""Meeting prep briefs: the sandbox's Graph-shaped calendar, and briefs composed from the rep's
own reads, every fact cited with an id the rep may read (checked here against the sandbox's
export and permission rules, not by product code).

Real sandbox over HTTP (Graph calendar, identity provider, CRM over MCP), real PostgreSQL for
the knowledge store, the CLI as a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from copilot.briefs.service import briefs_at
from copilot.briefs.types import SECTIONS, BriefRun
from copilot.knowledge.acl import Acl, parse_acl
from copilot.knowledge.ingest import ingest_files
from copilot.knowledge.sources import local_files
from copilot.persistence.database import connect
from copilot.redaction import detect_phone_numbers, redact_pii
from copilot.settings import Settings
from sandbox.directory import CONTOSO, find_user
from sandbox.permissions import can_read_account, can_read_activity, can_read_opportunity
from tests.support.copilot_env import sign_in
from tests.support.sandbox_process import PROJECT_ROOT, SandboxProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    """This module's sandbox is seeded from a named day (``tests/support/moments.py``)."""
    return pinned_sandbox


LIBRARY = PROJECT_ROOT / "sandbox" / "knowledge"
MANAGERS_ONLY = "pricing-guide-managers"
EMAIL = re.compile(r"[^\s@\[\]()]+@[^\s@\[\]()]+\.[a-z]{2,}", re.IGNORECASE)


# --- what the sandbox says the rep may read (test-side, from its export and its rules) -------


def _export(sandbox: SandboxProcess) -> dict[str, list[dict[str, Any]]]:
    state: dict[str, list[dict[str, Any]]] = sandbox.admin("GET", "/admin/export")
    return state


def _event(state: dict[str, list[dict[str, Any]]], subject: str) -> dict[str, Any]:
    return next(e for e in state["events"] if e["subject"] == subject)


def _start(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["start_at"].replace("Z", "+00:00"))


def _readable_crm_ids(state: dict[str, list[dict[str, Any]]], handle: str) -> set[str]:
    user = find_user(handle)
    assert user is not None
    shared: dict[tuple[str, str], set[str]] = {}
    for share in state["shares"]:
        shared.setdefault((share["record_type"], share["record_id"]), set()).add(share["user_id"])
    accounts = {
        a["id"]
        for a in state["accounts"]
        if can_read_account(user, a, shared.get(("account", a["id"]), set()))
    }
    opportunities = {
        o["id"]
        for o in state["opportunities"]
        if can_read_opportunity(
            user, o, o["account_id"] in accounts, shared.get(("opportunity", o["id"]), set())
        )
    }
    contacts = {c["id"] for c in state["contacts"] if c["account_id"] in accounts}
    activities = {
        a["id"]
        for a in state["activities"]
        if can_read_activity(
            user, a["tenant_id"], a["account_id"] in accounts, a["opportunity_id"] in opportunities
        )
    }
    return accounts | opportunities | contacts | activities


async def _ingest_library(settings: Settings) -> dict[str, set[str]]:
    """The sandbox library for Contoso, the managers' pricing guide for managers only; returns
    the chunk ids per document."""
    files = local_files(LIBRARY)
    async with connect(settings) as conn:
        await ingest_files(
            conn, [f for f in files if f.document_id != MANAGERS_ONLY], Acl(tenant_id=CONTOSO.id)
        )
        await ingest_files(
            conn,
            [f for f in files if f.document_id == MANAGERS_ONLY],
            parse_acl(CONTOSO.id, ["role:manager"]),
        )
        cur = await conn.execute("SELECT document_id, chunk_id FROM knowledge_chunks")
        chunks: dict[str, set[str]] = {}
        for row in await cur.fetchall():
            chunks.setdefault(row["document_id"], set()).add(row["chunk_id"])
    return chunks


async def _briefs(settings: Settings, handle: str, at: datetime, lead_minutes: int) -> BriefRun:
    rep = await sign_in(settings, handle)
    async with connect(settings) as conn:
        return await briefs_at(settings, rep.identity, rep.broker, conn, at=at, lead_minutes=lead_minutes)


def _hidden_account(state: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The account whose contact is the only external attendee of alex's "Introduction call"."""
    addresses = {a["address"] for a in _event(state, "Introduction call")["attendees"]}
    contact = next(c for c in state["contacts"] if c["email"] in addresses)
    return next(a for a in state["accounts"] if a["id"] == contact["account_id"])


def _traces_of(state: dict[str, list[dict[str, Any]]], account: dict[str, Any]) -> list[str]:
    """Every id, name and address of an account and its records."""
    found = [account["id"], account["name"]]
    for table in ("contacts", "opportunities", "activities"):
        for row in state[table]:
            if row.get("account_id") == account["id"]:
                found.append(row["id"])
                found += [row[k] for k in ("name", "email", "phone") if row.get(k)]
    return found


# --- the calendar ------------------------------------------------------------------------------


def _calendar(sandbox: SandboxProcess, token: str | None, **params: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(
        f"{sandbox.settings.http_base_url}/v1.0/me/calendarView", params=params, headers=headers, timeout=30
    )


def _graph_token(sandbox: SandboxProcess, handle: str, scopes: list[str]) -> str:
    return sandbox.token(handle, scopes=scopes, audience=sandbox.settings.graph_audience)


def test_the_calendar_view_is_graph_shaped_and_holds_only_the_callers_own_meetings(
    sandbox: SandboxProcess,
) -> None:
    state = _export(sandbox)
    first = min(_start(e) for e in state["events"])
    window = {
        "startDateTime": first.strftime("%Y-%m-%dT00:00:00Z"),
        "endDateTime": (first + timedelta(days=5)).strftime("%Y-%m-%dT00:00:00Z"),
    }
    token = _graph_token(sandbox, "alex", ["Calendars.Read"])
    response = _calendar(sandbox, token, **window, **{"$top": "3"})
    assert response.status_code == 200, response.text
    events = list(response.json()["value"])
    next_link = response.json().get("@odata.nextLink")
    assert len(events) == 3
    assert next_link
    while next_link:
        page = httpx.get(next_link, headers={"Authorization": f"Bearer {token}"}, timeout=30).json()
        events += page["value"]
        next_link = page.get("@odata.nextLink")

    alex = "alex@contoso.example"
    expected = [
        e["id"]
        for e in state["events"]
        if e["organizer_id"] == "u-alex" or alex in {a["address"] for a in e["attendees"]}
    ]
    assert sorted(e["id"] for e in events) == sorted(expected)
    assert len(expected) >= 7
    assert "East territory planning" not in {e["subject"] for e in events}  # lidia's and diego's only
    starts = [e["start"]["dateTime"] for e in events]
    assert starts == sorted(starts)
    for event in events:
        assert {"id", "subject", "start", "end", "attendees", "organizer", "isOnlineMeeting"} <= set(event)
        assert event["start"]["timeZone"] == "UTC"
        assert event["end"]["timeZone"] == "UTC"
        datetime.fromisoformat(event["start"]["dateTime"].partition(".")[0])
        assert set(event["organizer"]["emailAddress"]) == {"name", "address"}
        for attendee in event["attendees"]:
            assert attendee["type"] in ("required", "optional")
            assert set(attendee["emailAddress"]) == {"name", "address"}
    # Most meetings have external attendees; some have only colleagues.
    internal = [
        e
        for e in events
        if all(a["emailAddress"]["address"].endswith("@contoso.example") for a in e["attendees"])
    ]
    assert 2 <= len(internal) < len(events) / 2


def test_the_calendar_view_refuses_a_token_without_calendars_read_like_graph(
    sandbox: SandboxProcess,
) -> None:
    window = {"startDateTime": "2026-01-01T00:00:00Z", "endDateTime": "2026-01-02T00:00:00Z"}
    refused = _calendar(sandbox, _graph_token(sandbox, "alex", ["Mail.ReadWrite"]), **window)
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["code"] == "ErrorAccessDenied"
    assert "Calendars.Read" in error["message"]
    assert {"date", "request-id", "client-request-id"} <= set(error["innerError"])

    assert _calendar(sandbox, None, **window).status_code == 401
    no_window = _calendar(sandbox, _graph_token(sandbox, "alex", ["Calendars.Read"]))
    assert no_window.status_code == 400
    assert no_window.json()["error"]["code"] == "ErrorInvalidParameter"
    crm_token = sandbox.token("alex", scopes=["crm.read"])
    assert _calendar(sandbox, crm_token, **window).status_code == 401  # wrong audience


# --- the briefs --------------------------------------------------------------------------------


async def test_a_brief_for_a_meeting_with_a_visible_contact_has_every_section_each_fact_cited_readable(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    chunks = await _ingest_library(copilot_settings)
    state = _export(sandbox)
    meeting = _event(state, "Acme renewal pricing review")
    run = await _briefs(copilot_settings, "alex", _start(meeting) - timedelta(minutes=30), 60)

    assert [b.meeting_id for b in run.briefs] == [meeting["id"]]
    brief = run.briefs[0]
    assert [a.account_id for a in brief.accounts] == ["acc-acme"]
    sections = {item.section for item in brief.accounts[0].items}
    assert sections == set(SECTIONS), brief.text
    attendees = [i.text for i in brief.accounts[0].items if i.section == "attendee"]
    assert any("Maria Gonzalez, VP Operations" in a for a in attendees)
    assert any("Kevin Park, Procurement Manager" in a for a in attendees)
    assert brief.other_external_attendees == 0

    # The answers' citation check, and each cited id is one alex may read.
    assert brief.citation_check.unverified == ()
    assert set(brief.citation_check.cited) == set(brief.citations)
    readable = _readable_crm_ids(state, "alex") | set().union(
        *(ids for doc, ids in chunks.items() if doc != MANAGERS_ONLY)
    )
    assert brief.citations
    assert set(brief.citations) <= readable
    assert any(c in chunks["playbook-proposal"] for c in brief.citations)
    for item in brief.accounts[0].items:
        assert item.cited
        assert all(f"[{c}]" in item.text for c in item.cited)
        assert item.text in brief.text
    # No email address or phone number at all (by the copilot's own PII detectors, and the
    # contacts' actual values).
    assert not EMAIL.search(brief.text), brief.text
    assert detect_phone_numbers(brief.text) == [], brief.text
    assert redact_pii(brief.text) == brief.text
    assert not [c for c in state["contacts"] if c["email"] in brief.text or c["phone"] in brief.text]


async def test_internal_only_and_hidden_account_meetings_give_no_brief_and_nothing_of_the_hidden_account(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    await _ingest_library(copilot_settings)
    state = _export(sandbox)
    first = min(_start(e) for e in state["events"]).replace(hour=0, minute=0)
    run = await _briefs(copilot_settings, "alex", first, 5 * 24 * 60)

    subjects = {b.subject for b in run.briefs}
    assert {"Acme renewal pricing review", "Globex co-sell sync", "Fleet rollout workshop"} <= subjects
    for no_brief in ("West pipeline review", "1:1 Alex / Nestor", "Introduction call"):
        assert no_brief not in subjects
    assert run.meetings_without_brief == 3
    workshop = next(b for b in run.briefs if b.subject == "Fleet rollout workshop")
    assert workshop.other_external_attendees == 1  # the partner who is no CRM contact

    output = json.dumps(run.model_dump(mode="json"))
    hidden = _hidden_account(state)
    assert hidden["owner_id"] == "u-diego"
    assert hidden["id"] not in _readable_crm_ids(state, "alex")
    leaked = [t for t in _traces_of(state, hidden) if t in output]
    assert leaked == []
    readable = _readable_crm_ids(state, "alex")
    for brief in run.briefs:
        assert brief.citation_check.unverified == ()
        assert {c for c in brief.citations if not c.startswith("kb-")} <= readable


# --- the CLI -----------------------------------------------------------------------------------


def _cli_env(settings: Settings, sandbox: SandboxProcess) -> dict[str, str]:
    assert settings.database_url is not None
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": settings.database_url.get_secret_value(),
            "CRM_MCP_URL": sandbox.settings.mcp_url,
            "GRAPH_BASE_URL": f"{sandbox.settings.http_base_url}/v1.0",
            "ENTRA_AUTHORITY": sandbox.settings.idp_base_url,
            "ENTRA_CA_BUNDLE": str(sandbox.settings.ca_cert_path),
        }
    )
    return env


def _brief_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "copilot", "brief", *args],
        cwd=Path(PROJECT_ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


async def test_the_cli_prints_as_json_the_briefs_the_timer_would_post_at_a_fixed_moment(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    await _ingest_library(copilot_settings)
    env = _cli_env(copilot_settings, sandbox)
    state = _export(sandbox)
    meeting = _event(state, "Globex co-sell sync")
    at = (_start(meeting) - timedelta(minutes=45)).strftime("%Y-%m-%dT%H:%M:%SZ")

    result = _brief_cli(env, "--rep", "alex", "--at", at, "--json")
    assert result.returncode == 0, result.stderr
    run = json.loads(result.stdout)
    assert run["at"].startswith(at[:19])
    assert run["lead_minutes"] == 60
    assert [b["meeting_id"] for b in run["briefs"]] == [meeting["id"]]
    brief = run["briefs"][0]
    assert brief["accounts"][0]["account_id"] == "acc-globex"  # shared with alex
    assert brief["citation_check"]["unverified"] == []
    assert set(brief["citations"]) - {c for c in brief["citations"] if c.startswith("kb-")} <= (
        _readable_crm_ids(state, "alex")
    )

    narrow = _brief_cli(env, "--rep", "alex", "--at", at, "--lead-minutes", "10")
    assert narrow.returncode == 0, narrow.stderr
    assert "No brief" in narrow.stdout

    bad = _brief_cli(env, "--rep", "alex", "--at", "tomorrow-ish")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("error: --at")


async def test_the_brief_cli_shows_times_in_the_reps_mailbox_zone_and_takes_now(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    """alex's mailbox settings name Pacific time: the brief and its header say so, in local
    times, as the Teams card does. ``--at`` defaults to now and takes ``now``."""
    await _ingest_library(copilot_settings)
    env = _cli_env(copilot_settings, sandbox)
    meeting = _event(_export(sandbox), "Globex co-sell sync")
    start = _start(meeting)
    at = (start - timedelta(minutes=45)).strftime("%Y-%m-%dT%H:%M:%SZ")

    result = _brief_cli(env, "--rep", "alex", "--at", at)
    assert result.returncode == 0, result.stderr
    local = start.astimezone(ZoneInfo("America/Los_Angeles"))
    assert f"{local:%a %Y-%m-%d %H:%M}" in result.stdout
    assert "America/Los_Angeles" in result.stdout.splitlines()[0]
    assert " UTC" not in result.stdout
    as_json = json.loads(_brief_cli(env, "--rep", "alex", "--at", at, "--json").stdout)
    assert as_json["time_zone"] == "America/Los_Angeles"
    assert as_json["briefs"][0]["time_zone"] == "America/Los_Angeles"
    for when in ("now", None):
        shown = _brief_cli(env, "--rep", "alex", *(["--at", when] if when else []))
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.startswith("Briefs for alex@contoso.example at ")


async def test_a_rep_without_calendars_read_consent_gets_a_clear_error_naming_it(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    env = _cli_env(copilot_settings, sandbox)
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = _brief_cli(env, "--rep", "lidia", "--at", at)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    line = result.stderr.strip()
    assert line.count("\n") == 0
    assert line.startswith("error: consent missing")
    assert "Calendars.Read" in line
    assert result.stdout == ""
