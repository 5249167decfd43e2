"""The daily digest: alex's day of customer meetings, quiet deals closing soon, overdue next
steps and waiting proposals, every line cited with an id alex may read (checked here against
the sandbox's export and permission rules, not by product code).

Real sandbox over HTTP (Graph calendar, identity provider, CRM over MCP), real PostgreSQL for
threads and checkpoints, the real service for a proposal, the CLI as a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from copilot.briefs.digest import HORIZON_DAYS, digest_at
from copilot.briefs.types import DIGEST_SECTIONS, Digest
from copilot.persistence.database import connect
from copilot.settings import Settings
from tests.integration.test_briefs import (
    _cli_env,
    _event,
    _export,
    _hidden_account,
    _readable_crm_ids,
    _start,
    _traces_of,
)
from tests.support.copilot_env import service, sign_in
from tests.support.sandbox_process import PROJECT_ROOT, SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls
from tests.support.working_hours import working_hours

pytestmark = pytest.mark.integration

State = dict[str, list[dict[str, Any]]]


def _moment(state: State) -> datetime:
    """07:30 UTC on the day of alex's "Acme renewal pricing review" (a day after seeding)."""
    return _start(_event(state, "Acme renewal pricing review")).replace(hour=7, minute=30)


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _expected_deals(state: State, at: datetime) -> tuple[list[str], list[str]]:
    """From the export: alex's open deals closing within 14 days with no activity regarding
    them in the 14 days before ``at``, and those whose close date has passed."""
    day = at.date()
    mine = [
        o
        for o in state["opportunities"]
        if o["owner_id"] == "u-alex" and o["stage"] not in ("Closed Won", "Closed Lost")
    ]
    recent = {
        a["opportunity_id"]
        for a in state["activities"]
        if a["opportunity_id"]
        and not a.get("voided_at")
        and at - timedelta(days=HORIZON_DAYS) <= _instant(a["occurred_at"]) <= at
    }
    quiet = [
        o["id"]
        for o in mine
        if day <= date.fromisoformat(o["close_date"]) <= day + timedelta(days=HORIZON_DAYS)
        and o["id"] not in recent
    ]
    overdue = [o["id"] for o in mine if date.fromisoformat(o["close_date"]) < day]
    return sorted(quiet), sorted(overdue)


def _expected_meetings(state: State, at: datetime) -> list[str]:
    """alex's meetings of that day with an attendee who is a contact of an account alex may read."""
    readable = _readable_crm_ids(state, "alex")
    visible = {c["email"] for c in state["contacts"] if c["id"] in readable}
    alex = "alex@contoso.example"
    return [
        e["id"]
        for e in state["events"]
        if _start(e).date() == at.date()
        and (e["organizer_id"] == "u-alex" or alex in {a["address"] for a in e["attendees"]})
        and {a["address"] for a in e["attendees"]} & visible
    ]


async def _last_active(conn: Any, thread_id: str) -> datetime:
    cur = await conn.execute("SELECT last_active_at FROM threads WHERE thread_id = %s", (thread_id,))
    row = await cur.fetchone()
    assert row is not None
    moment: datetime = row["last_active_at"]
    return moment


def _section_ids(digest: Digest, section: str) -> list[str]:
    return [i.cited[0] for i in digest.items if i.section == section]


async def test_alexs_digest_has_every_section_each_line_cited_with_ids_alex_may_read(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    state = _export(sandbox)
    at = _moment(state)
    rep = await sign_in(copilot_settings, "alex")
    model = ScriptedChatModel(
        steps=[calls(call("update_opportunity", opportunity_id="opp-acme-renewal", amount=250000))],
        final="Proposed.",
    )
    async with service(copilot_settings, model) as svc:
        async with connect(copilot_settings) as conn:
            before = await digest_at(copilot_settings, rep.identity, rep.broker, conn, svc, at=at)
        proposed = await svc.run_turn(rep.identity, rep.broker, None, "raise the Acme renewal to 250k")
        assert len(proposed.proposals) == 1
        waiting_id = proposed.proposals[0].tool_call_id
        async with connect(copilot_settings) as conn:
            active = await _last_active(conn, proposed.thread_id)
            digest = await digest_at(copilot_settings, rep.identity, rep.broker, conn, svc, at=at)
            # Reading a thread's waiting proposals is no activity on it (expiry is unchanged).
            assert await _last_active(conn, proposed.thread_id) == active
            # The day alex meets a contact of an account he may not see.
            hidden_at = _start(_event(state, "Introduction call")).replace(hour=7, minute=30)
            hidden_day = await digest_at(copilot_settings, rep.identity, rep.broker, conn, svc, at=hidden_at)

    assert digest.day == at.date()
    assert digest.time_zone == "UTC"
    # Each section holds what the export says it should.
    quiet, overdue = _expected_deals(state, at)
    assert quiet, overdue
    assert overdue, quiet
    assert sorted(_section_ids(digest, "closing_quiet")) == quiet
    assert sorted(_section_ids(digest, "overdue")) == overdue
    meetings = _expected_meetings(state, at)
    assert meetings
    assert len([i for i in digest.items if i.section == "meeting"]) == len(meetings)
    assert any("Acme renewal pricing review" in i.text for i in digest.items if i.section == "meeting")
    # The waiting proposal: absent before it was made, listed (with its target) after.
    assert [i for i in before.items if i.section == "waiting"] == []
    waiting = [i for i in digest.items if i.section == "waiting"]
    assert [i.cited for i in waiting] == [("opp-acme-renewal",)], digest.text
    assert waiting_id not in digest.text  # cited by its record, not by the runner's tool call id
    assert {i.section for i in digest.items} == set(DIGEST_SECTIONS), digest.text

    # The answers' citation check, and every cited CRM id is one alex may read.
    assert digest.citation_check.unverified == ()
    assert set(digest.citation_check.cited) == set(digest.citations)
    assert set(digest.citations) <= _readable_crm_ids(state, "alex")
    for item in digest.items:
        assert all(f"[{c}]" in item.text for c in item.cited)
        assert item.text in digest.text
    # Nothing of the account alex may not see, though its contact attends one of his meetings.
    hidden = _hidden_account(state)
    output = json.dumps(digest.model_dump(mode="json")) + json.dumps(hidden_day.model_dump(mode="json"))
    assert hidden_day.day == _start(_event(state, "Introduction call")).date()
    assert hidden_day.meetings_without_customer >= 1
    assert "Introduction call" not in hidden_day.text
    assert hidden_day.citation_check.unverified == ()
    assert [t for t in _traces_of(state, hidden) if t in output] == []
    assert not [c for c in state["contacts"] if c["email"] in output or c["phone"] in output]


def _digest_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "copilot", "digest", *args],
        cwd=Path(PROJECT_ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


async def test_the_digest_cli_prints_the_digest_as_json(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    state = _export(sandbox)
    at = _moment(state).strftime("%Y-%m-%dT%H:%M:%SZ")
    with working_hours(sandbox, "alex", zone="UTC"):  # alex's day is the UTC day here
        _the_digest_cli_in_utc(copilot_settings, sandbox, state, at)


def _the_digest_cli_in_utc(copilot_settings: Settings, sandbox: SandboxProcess, state: Any, at: str) -> None:
    result = _digest_cli(_cli_env(copilot_settings, sandbox), "--rep", "alex", "--at", at, "--json")
    assert result.returncode == 0, result.stderr
    digest = json.loads(result.stdout)
    assert digest["rep"] == "alex@contoso.example"
    assert digest["day"] == at[:10]
    assert digest["citation_check"]["unverified"] == []
    _, overdue = _expected_deals(state, _instant(at))
    sections = {i["section"] for i in digest["items"]}
    assert {"meeting", "closing_quiet", "overdue"} <= sections
    assert set(digest["citations"]) <= _readable_crm_ids(state, "alex")
    assert sorted(i["cited"][0] for i in digest["items"] if i["section"] == "overdue") == overdue
    assert datetime.fromisoformat(digest["at"]).astimezone(UTC) == _instant(at)

    bad = _digest_cli(_cli_env(copilot_settings, sandbox), "--rep", "alex", "--at", "soon")
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: --at")

    text = _digest_cli(_cli_env(copilot_settings, sandbox), "--rep", "alex", "--at", at)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"Daily digest for alex@contoso.example, {_instant(at):%a %Y-%m-%d} (UTC)")
    assert text.stdout.rstrip().endswith(f"{len(digest['citations'])} checked, 0 unverified")


async def test_the_digest_cli_shows_the_reps_day_in_their_mailbox_zone_and_takes_now(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    """alex's mailbox settings name Pacific time: the CLI's digest is of his day there, as the
    Teams digest is. ``--at`` defaults to now and takes ``now``."""
    env = _cli_env(copilot_settings, sandbox)
    at = _moment(_export(sandbox))  # 07:30 UTC: still the day before in Los Angeles
    fixed = _digest_cli(env, "--rep", "alex", "--at", at.strftime("%Y-%m-%dT%H:%M:%SZ"), "--json")
    assert fixed.returncode == 0, fixed.stderr
    digest = json.loads(fixed.stdout)
    assert digest["time_zone"] == "America/Los_Angeles"
    assert digest["day"] == (at.date() - timedelta(days=1)).isoformat()
    for when in ("now", None):
        args = ["--rep", "alex", *(["--at", when] if when else [])]
        shown = _digest_cli(env, *args)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.startswith("Daily digest for alex@contoso.example, ")
        assert "(America/Los_Angeles)" in shown.stdout.splitlines()[0]
