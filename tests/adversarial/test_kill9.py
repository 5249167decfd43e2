"""Kill -9 between proposal and audit commit: no duplicate, no lost approval, no unaudited change.

Each trial proposes one write (every write tool in turn), then approves or edits it
through a real ``python -m copilot resume`` (or the bot dev server) that SIGKILLs itself
at a named point of the write, or at a random moment, and then approves again. After
the retry the write must be done exactly once at its backend, audited exactly once, and
nothing may stay pending. CI runs a few trials per path; ``make soak`` runs 1,000.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from copilot.persistence import audit
from copilot.persistence.database import connect
from copilot.persistence.idempotency import idempotency_key
from copilot.settings import Settings
from tests.adversarial.counts import Tally, count, soak
from tests.adversarial.profiles import Profile, crm_id, process_env, suite_name
from tests.support.copilot_env import service, sign_in
from tests.support.fake_connector import FakeConnector, card_of, find_actions
from tests.support.sandbox_process import PROJECT_ROOT, SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls
from tests.support.teams_client import Teams

pytestmark = pytest.mark.integration

POINTS = ("after_begin", "after_backend", "in_audit", "after_done", "random")
TOOLS = ("log_activity", "update_opportunity", "draft_followup_email", "update_preferences")
OPPORTUNITY = "opp-acme-expansion"


def _env(settings: Settings, **extra: str) -> dict[str, str]:
    assert settings.database_url is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASH_")}
    env.update(
        {
            "DATABASE_URL": settings.database_url.get_secret_value(),
            "CRM_MCP_URL": settings.crm_mcp_url,
            "GRAPH_BASE_URL": settings.graph_base_url,
            "ENTRA_AUTHORITY": settings.entra_authority,
            "ENTRA_CA_BUNDLE": str(settings.entra_ca_bundle),
            "COPILOT_TOOL_RETRY_INITIAL_DELAY": "0.01",
            "COPILOT_TOOL_RETRY_MAX_DELAY": "0.05",
            **process_env(settings),
            **extra,
        }
    )
    return env


def _launch(*args: str) -> list[str]:
    return [sys.executable, "-m", "tests.adversarial.crash_launcher", *args]


def _subject(trial: int, profile: Profile = "reference") -> str:
    """The trial's own text (the drafts are counted by it; both profiles share one mailbox)."""
    return f"Kill trial {trial}" if profile == "reference" else f"Kill trial {trial} ({profile})"


def _proposal_call(tool: str, trial: int, profile: Profile = "reference") -> dict[str, Any]:
    subject = _subject(trial, profile)
    if tool == "log_activity":
        account = crm_id(profile, "account", "acc-acme")
        return call("log_activity", type="call", subject=subject, account_id=account)
    if tool == "update_opportunity":
        opportunity = crm_id(profile, "opportunity", OPPORTUNITY)
        return call("update_opportunity", opportunity_id=opportunity, next_step=subject)
    if tool == "draft_followup_email":
        contact = crm_id(profile, "contact", "con-0001")
        return call("draft_followup_email", contact_id=contact, subject=subject, body="Hello")
    return call("update_preferences", signature=subject)


def _backend_changes(
    sandbox: SandboxProcess,
    tool: str,
    key: str,
    trial: int,
    before_version: int,
    profile: Profile = "reference",
) -> int:
    """How many times the trial's write reached its backend."""
    state = sandbox.admin("GET", "/admin/export")
    if tool == "log_activity":
        return sum(1 for a in state["activities"] if a["external_id"] == key)
    if tool == "update_opportunity":
        opportunity = next(o for o in state["opportunities"] if o["id"] == OPPORTUNITY)
        return int(opportunity["version"]) - before_version
    if tool == "draft_followup_email":
        return sum(1 for d in state["drafts"] if d.get("subject") == _subject(trial, profile))
    return 1  # preferences live in our own store: idempotent by nature; audited below


def _opportunity_version(sandbox: SandboxProcess) -> int:
    state = sandbox.admin("GET", "/admin/export")
    return int(next(o for o in state["opportunities"] if o["id"] == OPPORTUNITY)["version"])


async def _audited(settings: Settings, thread_id: str, tool_call_id: str) -> int:
    async with connect(settings) as conn:
        rows = await audit.list_entries(conn, thread_id=thread_id, limit=100)
    return sum(1 for r in rows if r.entry.tool_call_id == tool_call_id)


def _decision(tool_call_id: str, tool: str, rng: random.Random, trial: int) -> dict[str, Any]:
    if rng.random() < 0.5 or tool == "update_preferences":
        return {"tool_call_id": tool_call_id, "type": "approve"}
    field = {"log_activity": "notes", "update_opportunity": "next_step", "draft_followup_email": "body"}[tool]
    return {"tool_call_id": tool_call_id, "type": "edit", "args": {field: f"Edited in trial {trial}"}}


async def test_killing_the_cli_at_any_point_of_a_write_loses_nothing_and_duplicates_nothing(
    profile_settings: Settings, crm_profile: Profile, sandbox: SandboxProcess
):
    # On both CRM profiles: the reference CRM's MCP write tools, and Dataverse's Web API (the
    # alternate-key upsert, the key stamped on the opportunity and asked for before any ETag).
    copilot_settings = profile_settings
    rng = random.Random(20261201)
    tally = Tally(suite_name("kill9-cli", crm_profile))
    rep = await sign_in(copilot_settings, "alex")
    # Tools and points cycle independently (4 and 5 are coprime): CI's 10 trials hit every
    # point twice and every tool at least twice; the soak covers every pair many times.
    for trial in range(count(10, 800)):
        tool, point = TOOLS[trial % len(TOOLS)], POINTS[trial % len(POINTS)]
        before_version = _opportunity_version(sandbox)
        async with service(
            copilot_settings, ScriptedChatModel(steps=[calls(_proposal_call(tool, trial, crm_profile))])
        ) as svc:
            asked = await svc.run_turn(rep.identity, rep.broker, None, "propose")
        proposal = asked.proposals[0]
        decision = _decision(proposal.tool_call_id, tool, rng, trial)
        killed = await asyncio.to_thread(
            subprocess.run,
            _launch(
                "cli",
                "resume",
                "--rep",
                "alex",
                f"--thread={asked.thread_id}",
                "--json",
                "--decisions",
                json.dumps([decision]),
            ),
            env=_env(copilot_settings, CRASH_AT=point, CRASH_AFTER_MS=str(rng.randint(300, 2500))),
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        what = f"trial {trial} {tool} killed at {point} (rc {killed.returncode})"
        if killed.returncode not in (0, -9):
            tally.fail(f"{what}: {killed.stderr[-500:]}")
            continue
        async with service(copilot_settings, ScriptedChatModel(final="Done.")) as svc:
            pending = await svc.pending(rep.identity, asked.thread_id)
            outcome: dict[str, Any]
            if pending.proposals:
                retried = await svc.decide(rep.identity, rep.broker, asked.thread_id, [decision])
                outcome = next(
                    (o["result"] for o in retried.outcomes if o["tool_call_id"] == proposal.tool_call_id), {}
                )
                left = retried.proposals
            else:
                outcome, left = {"status": "done"}, []  # the killed process got as far as the answer
        key = idempotency_key(asked.thread_id, proposal.tool_call_id)
        changes = _backend_changes(sandbox, tool, key, trial, before_version, crm_profile)
        audited = await _audited(copilot_settings, asked.thread_id, proposal.tool_call_id)
        problems = []
        if outcome.get("status") != "done":
            problems.append(f"lost approval: {outcome}")
        if changes != 1:
            problems.append(f"backend changed {changes} times")
        if audited != 1:
            problems.append(f"{audited} audit rows")
        if left:
            problems.append("still pending")
        tally.record(not problems, f"{what}: {'; '.join(problems)}")
    tally.assert_clean()


# --- the bot dev server -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _bot(settings: Settings, port: int, crash_at: str = "", **env: str) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        _launch("bot", "serve", "--port", str(port)),
        env=_env(settings, CRASH_AT=crash_at, MicrosoftAppId="", **env),
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(
                    f"bot exited at start: {process.stderr.read() if process.stderr else ''}"
                )
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def _texts(value: Any) -> list[str]:
    """Every text a rep would read in these activities (message text, card text blocks)."""
    if isinstance(value, dict):
        own = [str(value[k]) for k in ("text", "title", "value") if isinstance(value.get(k), str)]
        return own + [t for k, v in value.items() if k not in ("data",) for t in _texts(v)]
    if isinstance(value, list):
        return [t for item in value for t in _texts(item)]
    return []


async def _post(teams: Teams, activity: dict[str, Any]) -> int | None:
    try:
        return await teams.send(activity)
    except httpx.HTTPError:
        return None  # the server died mid-request


async def test_a_bot_killed_mid_approval_finishes_the_write_when_approve_is_pressed_again(
    profile_settings: Settings, crm_profile: Profile, sandbox: SandboxProcess
):
    # Before: the card's claim outlived the process ("already decided" while still
    # pending), and the retry re-read the bumped version and said "not written".
    # On Dataverse the bot's model is a proposing stand-in (the offline model reads the
    # reference CRM's tools): it proposes logging the rep's message as a call on Acme.
    copilot_settings = profile_settings
    model_env = (
        {}
        if crm_profile == "reference"
        else {"CRASH_LOG_ACCOUNT": crm_id(crm_profile, "account", "acc-acme")}
    )
    tally = Tally(suite_name("kill9-bot", crm_profile))
    rng = random.Random(20261201)
    connector = FakeConnector()
    await connector.start()
    try:
        points = (
            (*POINTS, "before_card") * 40
            if soak()
            else ("after_backend", "in_audit", "before_card", "random")
        )
        for trial, point in enumerate(points):
            port = _free_port()
            teams = Teams(f"http://127.0.0.1:{port}/api/messages", connector)
            before = len(connector.cards())
            subject = uuid.uuid4().hex[:8]
            delay = {"CRASH_AFTER_MS": str(rng.randint(20, 1500))} if point == "random" else {}
            with _bot(copilot_settings, port, crash_at=point, **delay, **model_env):
                await teams.say(f"log a call with Acme — kill trial {subject}")
                cards = connector.cards()[before:]
                assert cards, "the proposal's card must arrive"
                card_activity = cards[-1]
                data = {**find_actions(card_of(card_activity), "Approve")[0]["data"]}
                activity = teams.activity(value=data, replyToId=card_activity.activity_id)
                first_calls = len(connector.calls)
                await _post(teams, activity)
                # A random kill may come after the approval finished: then the card already
                # shows the outcome, and "already decided" on the next click is right.
                shown_first = _texts([c.body for c in connector.calls[first_calls:]])
                approved_first = any("Approved" in t or "✓" in t for t in shown_first)
            with _bot(copilot_settings, port, **model_env):
                messages_before = len(connector.calls)
                status = await _post(teams, teams.activity(value=data, replyToId=card_activity.activity_id))
                replies = connector.calls[messages_before:]
            thread_id = data["thread_id"]
            activities = [
                a
                for a in sandbox.admin("GET", "/admin/export")["activities"]
                if str(a["external_id"]).startswith(f"{thread_id}:")
            ]
            audited = await _audited(copilot_settings, thread_id, data["tool_call_id"])
            shown = " | ".join(_texts([r.body for r in replies]))
            problems = []
            if status not in (200, 201, 202):
                problems.append(f"HTTP {status}")
            if len(activities) != 1:
                problems.append(f"{len(activities)} activities")
            if audited != 1:
                problems.append(f"{audited} audit rows")
            if "Not written" in shown or ("already decided" in shown and not approved_first):
                problems.append(f"the rep was told: {shown}")
            if "Approved" not in shown and "✓" not in shown and not approved_first:
                problems.append(f"no approved outcome shown: {shown[:300]}")
            tally.record(not problems, f"trial {trial} at {point}: {'; '.join(problems)}")
            await asyncio.sleep(0)
    finally:
        await connector.stop()
    tally.assert_clean()
