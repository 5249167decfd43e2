"""Capture from dictation, end to end on both CRM profiles (issue 35).

The real ``CopilotService`` with the offline model, on a migrated PostgreSQL database, reaching
the sandbox over MCP/HTTP: the ``reference`` profile through its typed MCP tools, the
``dataverse`` profile through the Dataverse face (``read_query`` reads, Web API writes). What the
CRM holds afterwards is read back as the rep through the sandbox's own reference tools (both
faces keep one store), so the contact party, the deal and the due date are checked where they
were written.
"""

from __future__ import annotations

from typing import Any

import pytest

from copilot.crm.sql_schema import SCHEMAS
from copilot.settings import Settings
from offline_model import OfflineChatModel
from sandbox.dataverse.ids import guid_for
from tests.support.copilot_env import copilot_settings, prepare_database, service, sign_in
from tests.support.dataverse_env import dataverse_settings
from tests.support.moments import SEED_DAY, WEDNESDAY_AFTERNOON
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

DICTATION = (
    "just got off the phone with Sarah Chen at Acme - she confirmed budget for the fleet expansion, "
    "wants a proposal by the 15th. log it"
)
NEXT_15TH = "2026-12-15"
"""The next 15th from :data:`SEED_DAY` (Wednesday 9 December 2026)."""
TOMORROW = "2026-12-10"


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    """A sandbox of this module's own: its activities are this module's to count."""
    return pinned_sandbox


@pytest.fixture(params=["reference", "dataverse"])
async def profile(request: pytest.FixtureRequest, database_url: str, sandbox: SandboxProcess) -> Settings:
    from copilot.middleware.resilience import reset_breakers

    reset_breakers()
    SCHEMAS.clear()
    if request.param == "dataverse":
        settings = dataverse_settings(database_url, sandbox)
    else:
        settings = copilot_settings(database_url, sandbox)
    await prepare_database(settings)
    return settings


def _structured(sandbox: SandboxProcess, rep: str, tool: str, **args: Any) -> Any:
    result = sandbox.call(rep, tool, **args)
    assert result["isError"] is False, result
    return result["structuredContent"]


def _id(settings: Settings, kind: str, sandbox_id: str) -> str:
    """The id the copilot sees for a sandbox record on this profile."""
    return guid_for(kind, sandbox_id) if settings.crm_kind == "dataverse" else sandbox_id


def _contact(sandbox: SandboxProcess, first_name: str) -> dict[str, Any]:
    contacts = _structured(sandbox, "alex", "list_contacts", account_id="acc-acme")["items"]
    return next(c for c in contacts if c["name"].startswith(first_name))


def _activity(sandbox: SandboxProcess, tool_call_id: str) -> dict[str, Any]:
    """The activity the approved proposal wrote (its key ends with the proposal's id; the
    module's sandbox is shared by both profiles)."""
    items = _structured(sandbox, "alex", "list_activities", account_id="acc-acme", limit=100)["items"]
    found = [a for a in items if str(a["external_id"]).endswith(f":{tool_call_id}")]
    assert len(found) == 1, [a["subject"] for a in items]
    return dict(found[0])


async def test_dictation_proposes_the_call_and_its_follow_up_task_and_approving_both_writes_them(
    profile: Settings, sandbox: SandboxProcess
) -> None:
    sarah = _contact(sandbox, "Sarah")
    rep = await sign_in(profile, "alex")
    async with service(profile, OfflineChatModel(today=SEED_DAY), clock=lambda: WEDNESDAY_AFTERNOON) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, DICTATION)
        assert [(p.tool, p.args["type"]) for p in asked.proposals] == [
            ("log_activity", "call"),
            ("log_activity", "task"),
        ], asked.answer
        call, task = asked.proposals
        expansion = _id(profile, "opportunity", "opp-acme-expansion")
        assert call.args["contact_ids"] == [_id(profile, "contact", sarah["id"])]
        assert call.args["opportunity_id"] == expansion
        assert "Sarah Chen" in call.args["subject"]
        assert "budget" in call.args["notes"]
        assert "proposal by the 15th" in call.args["notes"]
        assert task.args["due_date"] == NEXT_15TH
        assert task.args["opportunity_id"] == expansion
        # Each is its own proposal, decided on its own (the task first, then the call).
        first = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": task.tool_call_id, "type": "approve"}],
        )
        second = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": call.tool_call_id, "type": "approve"}],
        )
    outcomes = [o for result in (first, second) for o in result.outcomes]
    assert [o["result"]["status"] for o in outcomes] == ["done", "done"], outcomes
    logged = _activity(sandbox, call.tool_call_id)
    assert logged["type"] == "call"
    assert logged["opportunity"]["id"] == "opp-acme-expansion"
    assert [c["id"] for c in logged["contacts"]] == [sarah["id"]]
    follow_up = _activity(sandbox, task.tool_call_id)
    assert follow_up["type"] == "task"
    assert follow_up["due_date"] == NEXT_15TH
    assert follow_up["opportunity"]["id"] == "opp-acme-expansion"


async def test_a_reminder_is_a_task_due_tomorrow_regarding_the_person_and_their_account(
    profile: Settings, sandbox: SandboxProcess
) -> None:
    maria = _contact(sandbox, "Maria")
    rep = await sign_in(profile, "alex")
    async with service(profile, OfflineChatModel(today=SEED_DAY), clock=lambda: WEDNESDAY_AFTERNOON) as svc:
        # Alex's book has several Marias: the first name alone is asked about, naming each.
        which = await svc.run_turn(rep.identity, rep.broker, None, "remind me to call Maria tomorrow")
        assert which.proposals == []
        assert "Several contacts match 'Maria'" in (which.answer or "")
        assert _id(profile, "contact", maria["id"]) in which.citations
        asked = await svc.run_turn(
            rep.identity, rep.broker, None, "remind me to call Maria Gonzalez tomorrow"
        )
        assert [p.tool for p in asked.proposals] == ["log_activity"], asked.answer
        (task,) = asked.proposals
        assert task.args["type"] == "task"
        assert task.args["due_date"] == TOMORROW
        assert task.args["contact_ids"] == [_id(profile, "contact", maria["id"])]
        assert task.args["account_id"] == _id(profile, "account", "acc-acme")
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": task.tool_call_id, "type": "approve"}],
        )
    assert done.outcomes[0]["result"]["status"] == "done", done.outcomes
    stored = _activity(sandbox, task.tool_call_id)
    assert stored["type"] == "task"
    assert stored["due_date"] == TOMORROW
    assert stored["account"]["id"] == "acc-acme"
    assert [c["id"] for c in stored["contacts"]] == [maria["id"]]


def _unreadable_contact(sandbox: SandboxProcess) -> str:
    """A contact of an account Diego owns and Alex cannot read."""
    alex_sees = {
        a["id"] for a in _structured(sandbox, "alex", "search_accounts", query="", limit=100)["items"]
    }
    theirs = _structured(sandbox, "diego", "search_accounts", query="", limit=100)["items"]
    hidden = next(a["id"] for a in theirs if a["id"] not in alex_sees)
    return str(_structured(sandbox, "diego", "list_contacts", account_id=hidden)["items"][0]["id"])


@pytest.mark.parametrize("which", ["unreadable", "missing"])
async def test_a_contact_the_rep_cannot_read_is_refused_at_the_check_and_nothing_is_written(
    profile: Settings, sandbox: SandboxProcess, which: str
) -> None:
    stranger = _unreadable_contact(sandbox) if which == "unreadable" else "con-does-not-exist"
    contact_id = _id(profile, "contact", stranger) if which == "unreadable" else stranger
    if which == "missing" and profile.crm_kind == "dataverse":
        contact_id = "00000000-0000-4000-8000-00000000dead"
    before = _structured(sandbox, "alex", "list_activities", account_id="acc-acme", limit=100)["total"]
    rep = await sign_in(profile, "alex")
    async with service(profile, OfflineChatModel(today=SEED_DAY), clock=lambda: WEDNESDAY_AFTERNOON) as svc:
        asked = await svc.run_turn(
            rep.identity, rep.broker, None, "remind me to call Maria Gonzalez tomorrow"
        )
        (task,) = asked.proposals
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": task.tool_call_id, "type": "edit", "args": {"contact_ids": [contact_id]}}],
        )
    result = done.outcomes[0]["result"]
    assert result["status"] == "error", result
    assert result["code"] == ("permission_denied" if which == "unreadable" else "not_found")
    assert f"cannot name contact {contact_id}" in result["message"]
    assert result["message"].endswith("nothing was written")
    after = _structured(sandbox, "alex", "list_activities", account_id="acc-acme", limit=100)["total"]
    assert after == before


async def test_the_digest_after_the_due_date_lists_the_task_as_overdue_by_its_due_date(
    profile: Settings, sandbox: SandboxProcess
) -> None:
    from datetime import timedelta

    from copilot.briefs.digest import digest_at
    from copilot.persistence.database import connect

    rep = await sign_in(profile, "alex")
    async with service(profile, OfflineChatModel(today=SEED_DAY), clock=lambda: WEDNESDAY_AFTERNOON) as svc:
        asked = await svc.run_turn(
            rep.identity, rep.broker, None, "remind me to send Kevin Park the order form tomorrow"
        )
        (task,) = asked.proposals
        await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": task.tool_call_id, "type": "approve"}],
        )
        stored = _activity(sandbox, task.tool_call_id)
        async with connect(profile) as conn:
            digest = await digest_at(
                profile, rep.identity, rep.broker, conn, svc, at=WEDNESDAY_AFTERNOON + timedelta(days=3)
            )
    task_id = _id(profile, "activity", stored["id"])
    overdue = [i for i in digest.items if i.section == "overdue" and task_id in i.cited]
    assert len(overdue) == 1, digest.text
    assert overdue[0].text.startswith("Task “Send Kevin Park the order form” on Acme Corporation: ")
    assert f"due {TOMORROW}, 2 days ago" in overdue[0].text


async def test_an_approved_call_naming_a_contact_is_undone_by_voiding_it(
    profile: Settings, sandbox: SandboxProcess
) -> None:
    rep = await sign_in(profile, "alex")
    async with service(profile, OfflineChatModel(today=SEED_DAY), clock=lambda: WEDNESDAY_AFTERNOON) as svc:
        asked = await svc.run_turn(
            rep.identity,
            rep.broker,
            None,
            "spoke with Tom Becker at Acme, the pilot starts in January. log it",
        )
        (call,) = asked.proposals
        assert call.args["contact_ids"]
        await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": call.tool_call_id, "type": "approve"}],
        )
        logged = _activity(sandbox, call.tool_call_id)
        assert [c["name"] for c in logged["contacts"]] == ["Tom Becker"]
        undo = await svc.run_turn(rep.identity, rep.broker, asked.thread_id, "undo my last change")
        assert [p.tool for p in undo.proposals] == ["undo_write"], undo.answer
        done = await svc.decide(
            rep.identity,
            rep.broker,
            undo.thread_id,
            [{"tool_call_id": undo.proposals[0].tool_call_id, "type": "approve"}],
        )
    assert done.outcomes[0]["result"]["status"] == "done", done.outcomes
    items = _structured(sandbox, "alex", "list_activities", account_id="acc-acme", limit=100)["items"]
    assert logged["id"] not in {a["id"] for a in items}
