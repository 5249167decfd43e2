"""The "copilot stats" command in Teams: a manager gets their reports' figures, a rep their own.

Through the aiohttp dev server and the fake Bot Connector, against real PostgreSQL (a seeded
approval history written with the product's own ``audit.append`` / ``rejections.record``)
and the sandbox CRM over MCP, whose ``get_me`` names each asker's direct reports.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from bot.handler import PRIVATE_ONLY
from copilot.persistence import audit, rejections
from copilot.persistence.audit import AuditEntry
from copilot.settings import Settings
from copilot.writes import title
from sandbox.directory import CONTOSO, FABRIKAM, User, find_user
from tests.support.adaptive_cards import validate_cards, walk
from tests.support.fake_connector import card_of
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import Teams, running_bot

pytestmark = pytest.mark.integration

UPDATE, LOG = "update_opportunity", "log_activity"
STRANGER = "aad-not-in-the-crm"
NOW = datetime.now(UTC)


def _user(handle: str) -> User:
    user = find_user(handle)
    assert user is not None
    return user


@dataclass
class History:
    """Who decided what (``decisions``: tool, ``approve`` / ``edit`` / ``reject``, reason)."""

    tenant: str
    aad: str
    decisions: list[tuple[str, str, str]]
    thumbs: list[str]


HISTORY = [
    # Nestor's reports.
    History(
        CONTOSO.id,
        _user("alex").aad_object_id,
        [
            (UPDATE, "approve", ""),
            (UPDATE, "approve", ""),
            (UPDATE, "edit", ""),
            (LOG, "reject", "Wrong account."),
        ],
        ["like"],
    ),
    History(
        CONTOSO.id,
        _user("megan").aad_object_id,
        [(LOG, "approve", ""), (UPDATE, "reject", "Duplicate entry")],
        [],
    ),
    # Not Nestor's reports: Nestor himself, someone of the tenant the CRM does not know, and
    # Taylor's team in the other tenant.
    History(CONTOSO.id, _user("nestor").aad_object_id, [(UPDATE, "approve", "")] * 4, ["dislike"]),
    History(CONTOSO.id, STRANGER, [(UPDATE, "approve", "")] * 7, ["dislike"]),
    History(
        FABRIKAM.id,
        _user("priya").aad_object_id,
        [(LOG, "reject", "Priya's own words")] * 3 + [(UPDATE, "approve", "")] * 5,
        ["like", "like"],
    ),
]


async def _seed(settings: Settings, database_url: str) -> None:
    conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    try:
        audit.bind(conn, audit.audit_config(settings))
        n = 0
        for person in HISTORY:
            thread = f"thread-{person.aad[-12:]}"
            for tool, decision, reason in person.decisions:
                n += 1
                args = (
                    {"opportunity_id": f"opp-{n}", "amount": 100} if tool == UPDATE else {"subject": f"s{n}"}
                )
                if decision == "reject":
                    await rejections.record(
                        conn,
                        tenant_id=person.tenant,
                        rep_aad_id=person.aad,
                        thread_id=thread,
                        tool_call_id=f"call-{n}",
                        tool=tool,
                        args=args,
                        reason=reason,
                    )
                    continue
                await audit.append(
                    conn,
                    AuditEntry(
                        tenant_id=person.tenant,
                        rep_aad_id=person.aad,
                        thread_id=thread,
                        tool_call_id=f"call-{n}",
                        tool=tool,
                        target_record_id=None,
                        record_version_read=1,
                        original_args=args,
                        edited_args={**args, "amount": 150} if decision == "edit" else None,
                        decision=decision,
                        crm_response={"status": "done"},
                        proposed_at=NOW,
                        decided_at=NOW,
                        executed_at=NOW,
                    ),
                )
            for rating in person.thumbs:
                await conn.execute(
                    "INSERT INTO answer_feedback (conversation_id, tenant_id, aad_object_id, rating)"
                    " VALUES ('conv-seed', %s, %s, %s)",
                    (person.tenant, person.aad, rating),
                )
    finally:
        await conn.close()


@pytest.fixture
async def teams(
    copilot_settings: Settings, database_url: str, sandbox: SandboxProcess
) -> AsyncIterator[Teams]:
    await _seed(copilot_settings, database_url)
    async with running_bot(copilot_settings) as running:
        yield running


async def _ask(teams: Teams, handle: str, text: str) -> dict[str, Any]:
    user = _user(handle)
    activity = teams.activity(user.aad_object_id, text=text)
    activity["conversation"] = {**activity["conversation"], "tenantId": user.tenant_id}
    activity["channelData"] = {"tenant": {"id": user.tenant_id}}
    assert await teams.send(activity) in (200, 201, 202)
    return card_of(teams.connector.messages()[-1])


def _facts(node: dict[str, Any]) -> dict[str, str]:
    return {f["title"]: f["value"] for f in node["facts"]}


def _summary(card: dict[str, Any]) -> dict[str, str]:
    return next(
        _facts(n) for n, _ in walk(card) if n.get("type") == "FactSet" and "Decided proposals" in _facts(n)
    )


def _per_tool(card: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each tool section's first FactSet (proposals, approved, edited, rejected), by tool title."""
    found = {}
    for node, _ in walk(card):
        items = node.get("items") or []
        if node.get("type") == "Container" and items and items[0].get("type") == "TextBlock":
            facts = [i for i in items if i.get("type") == "FactSet"]
            if facts and "Proposals" in _facts(facts[0]):
                found[items[0]["text"]] = _facts(facts[0])
    return found


async def test_a_manager_gets_exactly_their_direct_reports_figures(teams: Teams, sandbox: SandboxProcess):
    log_before = len(sandbox.admin("GET", "/admin/request-log"))

    card = await _ask(teams, "nestor", "copilot stats")

    assert validate_cards([card]) == [{"errors": [], "warnings": []}]
    text = json.dumps(card, ensure_ascii=False)
    assert "Your direct reports" in text
    for report in ("Alex Wilber", "Megan Bowen", "Diego Siciliani", "Lidia Holloway"):
        assert report in text
    # Alex's 4 and Megan's 2; not Nestor's own 4, the stranger's 7 or Priya's 8.
    assert _summary(card) == {"Decided proposals": "6", "Conflicts": "0", "Answer feedback": "1 👍 · 0 👎"}
    assert _per_tool(card) == {
        title(LOG): {"Proposals": "2", "Approved": "1 (50 %)", "Edited": "0 (0 %)", "Rejected": "1 (50 %)"},
        title(UPDATE): {
            "Proposals": "4",
            "Approved": "2 (50 %)",
            "Edited": "1 (25 %)",
            "Rejected": "1 (25 %)",
        },
    }
    # The reasons are the reps' own words: a manager sees how often, not what.
    assert "given 1, 1 times" in text
    for words in ("wrong account", "duplicate entry", "Priya's own words"):
        assert words.lower() not in text.lower()
    # Who reports to Nestor was read from the CRM, as Nestor.
    calls = sandbox.admin("GET", "/admin/request-log")[log_before:]
    assert [(c["tool"], c["caller_id"]) for c in calls if c["tool"] == "get_me"] == [("get_me", "u-nestor")]


async def test_another_teams_manager_sees_only_their_own_team(teams: Teams):
    card = await _ask(teams, "taylor", "team stats")

    assert "Priya Raman" in json.dumps(card, ensure_ascii=False)
    assert _summary(card) == {"Decided proposals": "8", "Conflicts": "0", "Answer feedback": "2 👍 · 0 👎"}
    assert _per_tool(card) == {
        title(LOG): {"Proposals": "3", "Approved": "0 (0 %)", "Edited": "0 (0 %)", "Rejected": "3 (100 %)"},
        title(UPDATE): {
            "Proposals": "5",
            "Approved": "5 (100 %)",
            "Edited": "0 (0 %)",
            "Rejected": "0 (0 %)",
        },
    }
    assert "Alex Wilber" not in json.dumps(card, ensure_ascii=False)


async def test_a_rep_gets_only_their_own_figures_and_their_own_reasons(teams: Teams):
    card = await _ask(teams, "alex", "my stats")

    assert validate_cards([card]) == [{"errors": [], "warnings": []}]
    text = json.dumps(card, ensure_ascii=False)
    assert "Your own proposals" in text
    assert _summary(card) == {"Decided proposals": "4", "Conflicts": "0", "Answer feedback": "1 👍 · 0 👎"}
    assert _per_tool(card) == {
        title(LOG): {"Proposals": "1", "Approved": "0 (0 %)", "Edited": "0 (0 %)", "Rejected": "1 (100 %)"},
        title(UPDATE): {
            "Proposals": "3",
            "Approved": "2 (67 %)",
            "Edited": "1 (33 %)",
            "Rejected": "0 (0 %)",
        },
    }
    assert "1 × wrong account" in text
    assert "duplicate entry" not in text.lower()
    assert "Megan Bowen" not in text


async def test_stats_in_a_group_chat_get_the_private_only_nudge(teams: Teams, sandbox: SandboxProcess):
    log_before = len(sandbox.admin("GET", "/admin/request-log"))
    activity = teams.activity(_user("nestor").aad_object_id, text="copilot stats")
    activity["conversation"] = {**activity["conversation"], "conversationType": "groupChat"}

    assert await teams.send(activity) in (200, 201, 202)

    assert [m.body.get("text") for m in teams.connector.messages()] == [PRIVATE_ONLY]
    assert len(sandbox.admin("GET", "/admin/request-log")) == log_before


async def test_a_crm_outage_gets_a_clear_message_and_no_figures(teams: Teams, sandbox: SandboxProcess):
    sandbox.admin("PUT", "/admin/knobs", {"failure_rate": 1.0, "failure_kinds": ["503"]})
    try:
        await teams.say("copilot stats", aad=_user("nestor").aad_object_id)
    finally:
        sandbox.admin("PUT", "/admin/knobs", {})

    # Asked of the agent, the stats tool's read fails: the rep is told, and no card or figure.
    replies = teams.connector.messages()
    assert any("unavailable right now" in str(r.body.get("text")) for r in replies), replies
    assert not any(r.body.get("attachments") for r in replies)
