"""``undo_write`` against the sandbox: real PostgreSQL, the CRM over MCP, the Graph-shaped
mailbox over HTTP, a scripted model naming the exact calls."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from copilot.persistence import audit, threads
from copilot.persistence.database import connect
from copilot.settings import Settings
from copilot.writes import WriteOutcome
from tests.support.copilot_env import Rep, service, sign_in
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls

pytestmark = pytest.mark.integration

FIELDS = ("stage", "close_date", "amount", "next_step", "probability", "currency", "name")


def _opportunity(sandbox: SandboxProcess, opportunity_id: str) -> dict[str, Any]:
    found: dict[str, Any] = sandbox.call("alex", "get_opportunity", opportunity_id=opportunity_id)[
        "structuredContent"
    ]
    return found


async def _write(
    settings: Settings, rep: Rep, tool_call: dict[str, Any], thread_id: str | None = None
) -> tuple[str, WriteOutcome]:
    """Propose ``tool_call`` through the copilot and approve it; the thread and the outcome."""
    async with service(settings, ScriptedChatModel(steps=[calls(tool_call)], final="Done.")) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, thread_id, "do it")
        [proposal] = asked.proposals
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": proposal.tool_call_id, "type": "approve"}],
        )
    return asked.thread_id, done.writes[proposal.tool_call_id]


async def _undo(settings: Settings, rep: Rep, audit_id: int, thread_id: str | None = None) -> WriteOutcome:
    _, outcome = await _write(settings, rep, call("undo_write", audit_id=audit_id), thread_id)
    return outcome


async def _row(settings: Settings, audit_id: int) -> audit.StoredAuditEntry:
    async with connect(settings) as conn:
        found = await audit.get_entry(conn, audit_id)
    assert found is not None
    return found


async def test_undo_of_an_update_restores_exactly_the_prior_values(copilot_settings, sandbox):
    before = _opportunity(sandbox, "opp-acme-expansion")
    rep = await sign_in(copilot_settings, "alex")
    _, changed = await _write(
        copilot_settings,
        rep,
        call(
            "update_opportunity",
            opportunity_id="opp-acme-expansion",
            stage="Negotiation",
            amount=before["amount"] + 1000,
            close_date="2027-03-31",
            next_step="Kick-off",
        ),
    )
    assert changed.status == "done"
    assert changed.audit_id is not None
    assert _opportunity(sandbox, "opp-acme-expansion")["stage"] == "Negotiation"

    # The approval card shows the values now next to the values the undo puts back.
    async with service(
        copilot_settings, ScriptedChatModel(steps=[calls(call("undo_write", audit_id=changed.audit_id))])
    ) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "undo my last change")
        [proposal] = asked.proposals
        record = proposal.record or {}
        assert record["restored"] == {
            "stage": before["stage"],
            "amount": before["amount"],
            "next_step": before["next_step"],
            "close_date": before["close_date"],
        }
        assert record["current"]["stage"] == "Negotiation"
        assert record["target"]["id"] == "opp-acme-expansion"
        undone = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": proposal.tool_call_id, "type": "approve"}],
        )
    outcome = undone.writes[proposal.tool_call_id]
    assert outcome.status == "done", outcome
    after = _opportunity(sandbox, "opp-acme-expansion")
    assert {k: after[k] for k in FIELDS} == {k: before[k] for k in FIELDS}
    assert after["version"] == before["version"] + 2


async def test_undo_after_another_users_change_is_a_conflict_and_overwrites_nothing(
    copilot_settings, sandbox
):
    rep = await sign_in(copilot_settings, "alex")
    _, changed = await _write(
        copilot_settings,
        rep,
        call("update_opportunity", opportunity_id="opp-acme-analytics", next_step="Send order form"),
    )
    assert changed.status == "done"
    assert changed.audit_id is not None
    produced = _opportunity(sandbox, "opp-acme-analytics")
    # The manager changes the record after the rep's write.
    manager = sandbox.call(
        "nestor",
        "update_opportunity",
        opportunity_id="opp-acme-analytics",
        expected_version=produced["version"],
        changes={"next_step": "Manager: call legal"},
    )
    assert manager["isError"] is False
    outcome = await _undo(copilot_settings, rep, changed.audit_id)
    assert outcome.status == "conflict"
    assert (outcome.current or {})["next_step"] == "Manager: call legal"
    now = _opportunity(sandbox, "opp-acme-analytics")
    assert now["next_step"] == "Manager: call legal"
    assert now["version"] == produced["version"] + 1
    async with connect(copilot_settings) as conn:
        assert await audit.undone_by(conn, changed.audit_id) is None


async def test_undo_of_an_activity_voids_it(copilot_settings, sandbox):
    rep = await sign_in(copilot_settings, "alex")
    _, logged = await _write(
        copilot_settings,
        rep,
        call("log_activity", type="call", subject="Undo me", notes="Wrong account", account_id="acc-acme"),
    )
    assert logged.status == "done"
    assert logged.audit_id is not None
    activity_id = logged.data["activity"]["id"]
    outcome = await _undo(copilot_settings, rep, logged.audit_id)
    assert outcome.status == "done", outcome
    [stored] = [a for a in sandbox.admin("GET", "/admin/export")["activities"] if a["id"] == activity_id]
    assert stored["voided_at"] is not None
    assert stored["voided_by"] == "u-alex"


async def test_undo_of_a_draft_deletes_it_and_a_sent_draft_is_refused(copilot_settings, sandbox):
    rep = await sign_in(copilot_settings, "alex")

    def drafts(subject: str) -> list[dict[str, Any]]:
        return [d for d in sandbox.admin("GET", "/admin/export")["drafts"] if d["subject"] == subject]

    _, saved = await _write(
        copilot_settings,
        rep,
        call("draft_followup_email", contact_id="con-0001", subject="Undo draft", body="Hi"),
    )
    assert saved.status == "done"
    assert saved.audit_id is not None
    assert len(drafts("Undo draft")) == 1
    deleted = await _undo(copilot_settings, rep, saved.audit_id)
    assert deleted.status == "done", deleted
    assert drafts("Undo draft") == []

    _, sent = await _write(
        copilot_settings,
        rep,
        call("draft_followup_email", contact_id="con-0001", subject="Sent draft", body="Hi"),
    )
    assert sent.audit_id is not None
    sandbox.admin("POST", f"/admin/drafts/{sent.data['draft']['id']}/sent")
    refused = await _undo(copilot_settings, rep, sent.audit_id)
    assert refused.status == "refused"
    assert refused.code == "already_sent"
    assert "already sent" in refused.message
    assert len(drafts("Sent draft")) == 1


async def test_undo_twice_is_refused_and_an_undo_cannot_be_undone(copilot_settings, sandbox):
    rep = await sign_in(copilot_settings, "alex")
    _, logged = await _write(
        copilot_settings, rep, call("log_activity", type="task", subject="Twice", account_id="acc-acme")
    )
    assert logged.audit_id is not None
    first = await _undo(copilot_settings, rep, logged.audit_id)
    assert first.status == "done"
    assert first.audit_id is not None
    again = await _undo(copilot_settings, rep, logged.audit_id)
    assert (again.status, again.code) == ("refused", "already_undone")
    loop = await _undo(copilot_settings, rep, first.audit_id)
    assert (loop.status, loop.code) == ("refused", "not_undoable")
    async with connect(copilot_settings) as conn:
        undos = [r for r in await audit.list_entries(conn) if r.entry.undoes_audit_id == logged.audit_id]
    assert [r.id for r in undos] == [first.audit_id]


async def test_another_rep_cannot_undo_but_a_delegate_of_the_thread_can(copilot_settings, sandbox):
    rep = await sign_in(copilot_settings, "alex")
    thread_id, logged = await _write(
        copilot_settings, rep, call("log_activity", type="call", subject="Not yours", account_id="acc-acme")
    )
    assert logged.audit_id is not None
    # Megan (a peer) and Nestor (Alex's manager, who may void Alex's activities in the CRM)
    # are both refused: neither made the write or was given its thread.
    for handle in ("megan", "nestor"):
        other = await sign_in(copilot_settings, handle)
        refused = await _undo(copilot_settings, other, logged.audit_id)
        assert (refused.status, refused.code) == ("refused", "not_found"), handle
    activity_id = logged.data["activity"]["id"]
    [stored] = [a for a in sandbox.admin("GET", "/admin/export")["activities"] if a["id"] == activity_id]
    assert stored["voided_at"] is None

    async with connect(copilot_settings) as conn:
        await threads.grant_delegation(
            conn,
            thread_id=thread_id,
            owner_tenant_id=rep.identity.tenant_id,
            owner_aad_id=rep.identity.aad_object_id,
            delegate_aad_id=(await sign_in(copilot_settings, "nestor")).identity.aad_object_id,
        )
    delegate = await sign_in(copilot_settings, "nestor")
    allowed = await _undo(copilot_settings, delegate, logged.audit_id)
    assert allowed.status == "done", allowed


async def test_the_audit_chain_still_verifies_and_the_undos_row_links_the_original(copilot_settings, sandbox):
    rep = await sign_in(copilot_settings, "alex")
    _, logged = await _write(
        copilot_settings, rep, call("log_activity", type="email", subject="Chain", account_id="acc-acme")
    )
    assert logged.audit_id is not None
    undone = await _undo(copilot_settings, rep, logged.audit_id)
    assert undone.audit_id is not None
    row = await _row(copilot_settings, undone.audit_id)
    assert row.entry.tool == "undo_write"
    assert row.entry.undoes_audit_id == logged.audit_id
    assert row.entry.target_record_id == logged.data["activity"]["id"]
    async with connect(copilot_settings) as conn:
        report = await audit.assert_intact(conn, config=audit.audit_config(copilot_settings))
        assert report.ok
        assert report.rows_checked >= 2
        # The link is part of the row's HMAC: changing it is found.
        await conn.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
        await conn.execute("UPDATE audit_log SET undoes_audit_id = NULL WHERE id = %s", (undone.audit_id,))
        tampered = await audit.verify(conn, config=audit.audit_config(copilot_settings))
    assert not tampered.ok
    assert tampered.first_bad_id == undone.audit_id


async def test_an_undo_outside_the_window_is_refused(copilot_settings, sandbox):
    rep = await sign_in(copilot_settings, "alex")
    _, logged = await _write(
        copilot_settings, rep, call("log_activity", type="call", subject="Too late", account_id="acc-acme")
    )
    assert logged.audit_id is not None
    row = await _row(copilot_settings, logged.audit_id)
    assert row.entry.executed_at > dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    closed = copilot_settings.model_copy(update={"undo_window_hours": 0.0})
    refused = await _undo(closed, rep, logged.audit_id)
    assert (refused.status, refused.code) == ("refused", "undo_window_passed")
    activity_id = logged.data["activity"]["id"]
    [stored] = [a for a in sandbox.admin("GET", "/admin/export")["activities"] if a["id"] == activity_id]
    assert stored["voided_at"] is None


async def test_a_rep_who_says_undo_the_acme_stage_change_gets_that_undo_proposed_by_the_offline_model(
    copilot_settings, sandbox
):
    rep = await sign_in(copilot_settings, "alex")
    before = _opportunity(sandbox, "opp-acme-renewal")
    _, staged = await _write(
        copilot_settings,
        rep,
        call("update_opportunity", opportunity_id="opp-acme-renewal", stage="Negotiation"),
    )
    _, logged = await _write(
        copilot_settings, rep, call("log_activity", type="call", subject="Newest", account_id="acc-acme")
    )
    assert staged.audit_id is not None
    assert logged.audit_id is not None
    async with service(copilot_settings) as svc:
        last = await svc.run_turn(rep.identity, rep.broker, None, "undo my last change")
        assert [(p.tool, p.args) for p in last.proposals] == [("undo_write", {"audit_id": logged.audit_id})]
        named = await svc.run_turn(rep.identity, rep.broker, None, "undo the Acme stage change")
        [proposal] = named.proposals
        assert (proposal.tool, proposal.args) == ("undo_write", {"audit_id": staged.audit_id})
        assert (proposal.record or {})["restored"] == {"stage": before["stage"]}
        done = await svc.decide(
            rep.identity,
            rep.broker,
            named.thread_id,
            [{"tool_call_id": proposal.tool_call_id, "type": "approve"}],
        )
    assert done.writes[proposal.tool_call_id].status == "done"
    assert done.answer is not None
    assert "Undone" in done.answer
    assert _opportunity(sandbox, "opp-acme-renewal")["stage"] == before["stage"]


async def test_undo_by_name_picks_the_change_to_the_named_record_and_asks_when_two_match(
    copilot_settings, sandbox
):
    """ "undo the change I made to the Acme fleet expansion" is the deal's change, not a newer
    unsent draft whose text mentions the expansion; two changes to that deal: the rep is asked
    which, and nothing is proposed until they say."""
    rep = await sign_in(copilot_settings, "alex")
    _, moved = await _write(
        copilot_settings,
        rep,
        call("update_opportunity", opportunity_id="opp-acme-expansion", next_step="Send the pilot plan"),
    )
    _, drafted = await _write(
        copilot_settings,
        rep,
        call(
            "draft_followup_email",
            contact_id="con-0001",
            subject="Acme fleet expansion: next steps",
            body="Thanks for confirming budget for the Acme fleet expansion.",
        ),
    )
    assert moved.audit_id is not None
    assert drafted.audit_id is not None
    async with service(copilot_settings) as svc:
        named = await svc.run_turn(
            rep.identity, rep.broker, None, "undo the change I made to the Acme fleet expansion"
        )
        assert len(named.proposals) == 1, named.answer
        [proposal] = named.proposals
        assert (proposal.tool, proposal.args) == ("undo_write", {"audit_id": moved.audit_id})
        await svc.decide(
            rep.identity,
            rep.broker,
            named.thread_id,
            [{"tool_call_id": proposal.tool_call_id, "type": "reject", "reason": "just checking"}],
        )
    # A stage the deal does not have now (other tests on this sandbox may have moved it).
    current = next(
        o["stage"]
        for o in sandbox.admin("GET", "/admin/export")["opportunities"]
        if o["id"] == "opp-acme-expansion"
    )
    stage = "Negotiation" if current == "Proposal" else "Proposal"
    _, staged = await _write(
        copilot_settings,
        rep,
        call("update_opportunity", opportunity_id="opp-acme-expansion", stage=stage),
    )
    async with service(copilot_settings) as svc:
        asked = await svc.run_turn(
            rep.identity, rep.broker, None, "undo my change to the Acme fleet expansion"
        )
        assert asked.proposals == []
        assert asked.notice is None, asked.answer
        assert asked.answer is not None
        assert "which one" in asked.answer
        assert asked.answer.count("[opp-acme-expansion]") == 2
        assert asked.answer.index(f"stage → {stage}") < asked.answer.index("next step → Send the pilot plan")
        precise = await svc.run_turn(
            rep.identity, rep.broker, None, "undo the stage change on the Acme fleet expansion"
        )
        [undo] = precise.proposals
        assert undo.args == {"audit_id": staged.audit_id}
