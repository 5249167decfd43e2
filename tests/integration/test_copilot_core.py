"""The copilot core against real PostgreSQL and the sandbox over MCP, with a scripted model.

The scripted model stands in for an LLM where a test needs exact tool calls; everything
else (checkpointer, HITL, write guard, MCP, OBO tokens, CRM) is the real thing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from copilot.citations import message_text
from copilot.errors import InvalidDecision, ThreadAccessDenied
from copilot.middleware.limits import LIMIT_MESSAGE
from copilot.persistence import audit
from copilot.persistence.database import connect
from copilot.persistence.threads import list_threads
from copilot.turns import TurnResult
from tests.support.copilot_env import service, sign_in
from tests.support.idn_emails import stored_contact_emails
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls

pytestmark = pytest.mark.integration


def _log(subject: str, account_id: str = "acc-acme", **extra: Any) -> dict[str, Any]:
    return call(
        "log_activity",
        type="call",
        subject=subject,
        notes="Discussed pricing",
        account_id=account_id,
        **extra,
    )


def _activities(sandbox: SandboxProcess, thread_id: str) -> list[dict[str, Any]]:
    return [
        a
        for a in sandbox.admin("GET", "/admin/export")["activities"]
        if str(a["external_id"]).startswith(f"{thread_id}:")
    ]


async def _audit_rows(settings) -> list[Any]:
    async with connect(settings) as conn:
        return await audit.list_entries(conn, limit=1000)


def _decide(result: TurnResult, *decisions: dict[str, Any]) -> list[dict[str, Any]]:
    return list(decisions)


def _approve(tool_call_id: str) -> dict[str, Any]:
    return {"tool_call_id": tool_call_id, "type": "approve"}


# --- invariant 1: no write without a decision --------------------------------------------------


async def test_writes_in_every_position_all_wait_for_a_decision_and_nothing_is_written(
    copilot_settings, sandbox
):
    model = ScriptedChatModel(
        steps=[
            calls(_log("alone")),
            calls(call("get_account", account_id="acc-acme"), _log("beside a read")),
            calls(_log("first"), _log("second"), call("list_contacts", account_id="acc-acme")),
            calls(
                call("update_opportunity", opportunity_id="opp-acme-renewal", stage="Negotiation"),
                call("update_preferences", email_tone="formal"),
                call(
                    "draft_followup_email",
                    contact_id="con-0001",
                    subject="Pricing",
                    body="Following up on pricing.",
                ),
            ),
        ]
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        first = await svc.run_turn(rep.identity, rep.broker, None, "do things")
        assert [p.tool for p in first.proposals] == ["log_activity"]
        assert first.answer is None
        # Rejecting keeps the model going; every later write is stopped again.
        second = await svc.decide(
            rep.identity,
            rep.broker,
            first.thread_id,
            [{"tool_call_id": first.proposals[0].tool_call_id, "type": "reject", "reason": "not yet"}],
        )
        assert [p.tool for p in second.proposals] == ["log_activity"]
        third = await svc.decide(
            rep.identity,
            rep.broker,
            first.thread_id,
            [{"tool_call_id": second.proposals[0].tool_call_id, "type": "reject", "reason": "no"}],
        )
        assert sorted(p.tool for p in third.proposals) == ["log_activity", "log_activity"]
        fourth = await svc.decide(
            rep.identity,
            rep.broker,
            first.thread_id,
            [{"tool_call_id": p.tool_call_id, "type": "reject", "reason": "no"} for p in third.proposals],
        )
        assert sorted(p.tool for p in fourth.proposals) == [
            "draft_followup_email",
            "update_opportunity",
            "update_preferences",
        ]
    assert _activities(sandbox, first.thread_id) == []
    assert await _audit_rows(copilot_settings) == []
    drafts = [
        d
        for d in sandbox.admin("GET", "/admin/export")["drafts"]
        if str(d.get("idempotency_key", "")).startswith(first.thread_id)
    ]
    assert drafts == []


async def test_a_question_asked_while_a_proposal_waits_is_answered_and_the_proposal_stays_resumable(
    copilot_settings, sandbox
):
    model = ScriptedChatModel(
        steps=[calls(_log("waiting")), calls(call("get_account", account_id="acc-acme")), _answer_acme],
        final="Logged.",
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        first = await svc.run_turn(rep.identity, rep.broker, None, "log it")
        waiting = first.proposals[0]
        asked = await svc.run_turn(rep.identity, rep.broker, first.thread_id, "summarise Acme")
        still = await svc.pending(rep.identity, first.thread_id)
        done = await svc.decide(rep.identity, rep.broker, first.thread_id, [_approve(waiting.tool_call_id)])
        side = await svc.saver.aget_tuple({"configurable": {"thread_id": f"{first.thread_id}~side"}})
        async with connect(copilot_settings) as conn:
            listed = await list_threads(
                conn, tenant_id=rep.identity.tenant_id, aad_id=rep.identity.aad_object_id, limit=50
            )
    assert asked.notice == "proposals_pending"
    assert asked.answer is not None
    assert "Acme Corporation" in asked.answer
    assert "acc-acme" in asked.citations
    assert asked.answer.splitlines()[-1] == "1 proposal still waits for your decision on its card."
    assert [p.tool_call_id for p in asked.proposals] == [waiting.tool_call_id]
    assert [p.interrupt_id for p in still.proposals] == [waiting.interrupt_id]
    assert done.writes[waiting.tool_call_id].status == "done"
    assert len(_activities(sandbox, first.thread_id)) == 1
    assert side is None, "the side thread is deleted once the question is answered"
    assert [t.thread_id for t in listed] == [first.thread_id], (
        "a question that proposed nothing leaves no thread"
    )


def _answer_acme(messages: list[BaseMessage]) -> AIMessage:
    return AIMessage(content="Acme Corporation is a customer [acc-acme].")


async def test_a_new_proposal_while_one_waits_is_made_on_its_own_thread_and_each_decides_once(
    copilot_settings, sandbox
):
    """No proposal blocks another: the second is proposed on a thread of its own (the first
    thread's checkpoint holds the first's interrupt, untouched), so each card resumes its own
    thread; decided in the other order, each executes exactly once; there is no approve-all."""
    model = ScriptedChatModel(
        steps=[calls(_log("first")), calls(_log("second")), calls(_log("third"))], final="Logged."
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        first = await svc.run_turn(rep.identity, rep.broker, None, "log it")
        [a] = first.proposals
        again = await svc.run_turn(rep.identity, rep.broker, first.thread_id, "log another")
        assert again.answer is not None
        assert "can't" not in again.answer
        assert again.thread_id == first.thread_id, "the conversation stays on its thread"
        assert [p.tool_call_id for p in again.proposals] == [a.tool_call_id, again.proposals[1].tool_call_id]
        b = again.proposals[1]
        assert a.thread_id in ("", first.thread_id)
        assert b.thread_id not in ("", first.thread_id), "the new proposal waits on a thread of its own"
        assert b.args["subject"] == "second"
        # Both wait, each on its own thread, and the rep's threads list both.
        assert [p.tool_call_id for p in (await svc.pending(rep.identity, first.thread_id)).proposals] == [
            a.tool_call_id
        ]
        assert [p.tool_call_id for p in (await svc.pending(rep.identity, b.thread_id)).proposals] == [
            b.tool_call_id
        ]
        # A third while two wait: a third thread.
        third = await svc.run_turn(rep.identity, rep.broker, first.thread_id, "and one more")
        c = third.proposals[-1]
        assert [p.tool_call_id for p in third.proposals[:-1]] == [a.tool_call_id]
        assert c.thread_id not in ("", first.thread_id, b.thread_id)
        # Decided in the other order: the newest first, each on its own thread.
        done_b = await svc.decide(rep.identity, rep.broker, b.thread_id, [_approve(b.tool_call_id)])
        rejected_c = await svc.decide(
            rep.identity,
            rep.broker,
            c.thread_id,
            [{"tool_call_id": c.tool_call_id, "type": "reject", "reason": "not needed"}],
        )
        done_a = await svc.decide(rep.identity, rep.broker, first.thread_id, [_approve(a.tool_call_id)])
        # Exactly once: a second decision of either is refused, and no thread decides another's.
        for thread_id, call_id in ((b.thread_id, b.tool_call_id), (first.thread_id, a.tool_call_id)):
            with pytest.raises(InvalidDecision):
                await svc.decide(rep.identity, rep.broker, thread_id, [_approve(call_id)])
        with pytest.raises(InvalidDecision):
            await svc.decide(rep.identity, rep.broker, first.thread_id, [_approve(c.tool_call_id)])
        other = ThreadAccessDenied
        nestor = await sign_in(copilot_settings, "nestor")
        with pytest.raises((other, InvalidDecision)):
            await svc.decide(nestor.identity, nestor.broker, c.thread_id, [_approve(c.tool_call_id)])
    assert done_b.writes[b.tool_call_id].status == "done"
    assert done_a.writes[a.tool_call_id].status == "done"
    assert c.tool_call_id in rejected_c.decided
    assert [r["subject"] for r in _activities(sandbox, first.thread_id)] == ["first"]
    assert [r["subject"] for r in _activities(sandbox, b.thread_id)] == ["second"]
    assert _activities(sandbox, c.thread_id) == []
    assert len(await _audit_rows(copilot_settings)) == 2
    # The JSON an `ask` prints names each proposal's thread, for `resume --thread`.
    shown = again.to_json()["proposals"]
    assert [p["thread_id"] for p in shown] == [first.thread_id, b.thread_id]


# --- invariant 3: exactly once ----------------------------------------------------------------


async def test_approval_executes_once_and_a_second_resume_is_refused(copilot_settings, sandbox):
    model = ScriptedChatModel(steps=[calls(_log("Exactly once"))], final="Logged.")
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call")
        call_id = asked.proposals[0].tool_call_id
        done = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])
        with pytest.raises(InvalidDecision, match="not waiting for a decision"):
            await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])

    assert done.outcomes[0]["result"]["status"] == "done"
    assert isinstance(done.outcomes[0]["result"]["audit_id"], int)
    rows = _activities(sandbox, asked.thread_id)
    assert len(rows) == 1
    assert rows[0]["external_id"] == f"{asked.thread_id}:{call_id}"
    assert len(await _audit_rows(copilot_settings)) == 1


async def test_two_concurrent_resumes_of_the_same_approval_write_once(copilot_settings, sandbox):
    model = ScriptedChatModel(steps=[calls(_log("Concurrent"))], final="Logged.")
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call")
    call_id = asked.proposals[0].tool_call_id

    async def resume_in_own_service() -> TurnResult | BaseException:
        async with service(copilot_settings, ScriptedChatModel(final="Logged.")) as other:
            try:
                return await other.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])
            except InvalidDecision as exc:
                return exc

    results = await asyncio.gather(resume_in_own_service(), resume_in_own_service())

    assert any(isinstance(r, TurnResult) for r in results)
    assert len(_activities(sandbox, asked.thread_id)) == 1
    assert len(await _audit_rows(copilot_settings)) == 1


async def test_a_crash_after_the_crm_committed_does_not_duplicate_on_retry(copilot_settings, sandbox):
    crashes = {"left": 1}

    def crash_once(key: str) -> None:
        if crashes["left"]:
            crashes["left"] -= 1
            raise RuntimeError("simulated crash after the CRM committed")

    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, ScriptedChatModel(steps=[calls(_log("Crash"))])) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call")
    call_id = asked.proposals[0].tool_call_id

    async with service(
        copilot_settings, ScriptedChatModel(final="Logged."), after_commit_hook=crash_once
    ) as svc:
        with pytest.raises(RuntimeError, match="simulated crash"):
            await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])
        assert len(_activities(sandbox, asked.thread_id)) == 1  # the CRM did commit
        retried = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])

    assert retried.outcomes[0]["result"]["created"] is False
    assert len(_activities(sandbox, asked.thread_id)) == 1
    assert len(await _audit_rows(copilot_settings)) == 1


@pytest.mark.parametrize("crashes_before_audit", [1, 2])
async def test_an_opportunity_update_applied_before_a_crash_is_completed_and_audited_not_a_conflict(
    copilot_settings, sandbox, crashes_before_audit
):
    # The old guard rolled its key back with the crash, re-read the record on retry, saw
    # the version its own write had bumped and stored "conflict: nothing was written".
    crashes = {"left": crashes_before_audit}

    def crash(key: str) -> None:
        if crashes["left"]:
            crashes["left"] -= 1
            raise RuntimeError("simulated crash after the CRM committed")

    before = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-expansion")["structuredContent"]
    model = ScriptedChatModel(
        # A next step of its own per parameter: proposing the value the record already has is not a proposal.
        steps=[
            calls(
                call(
                    "update_opportunity",
                    opportunity_id="opp-acme-expansion",
                    next_step=f"Crash test {crashes_before_audit}",
                )
            )
        ]
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "update it")
    call_id = asked.proposals[0].tool_call_id

    async with service(copilot_settings, ScriptedChatModel(final="Updated."), after_commit_hook=crash) as svc:
        for _ in range(crashes_before_audit):
            with pytest.raises(RuntimeError, match="simulated crash"):
                await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])
        retried = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])

    after = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-expansion")["structuredContent"]
    result = retried.outcomes[0]["result"]
    assert result["status"] == "done", result
    assert after["version"] == before["version"] + 1  # written once
    assert after["next_step"] == f"Crash test {crashes_before_audit}"
    rows = await _audit_rows(copilot_settings)
    assert [(r.entry.tool_call_id, r.entry.record_version_read) for r in rows] == [
        (call_id, before["version"])
    ]
    assert result["audit_id"] == rows[0].id


async def test_a_write_left_in_flight_by_a_dead_process_is_finished_by_asking_the_crm_by_key(
    copilot_settings, sandbox
):
    from copilot.persistence import idempotency

    before = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-expansion")["structuredContent"]
    model = ScriptedChatModel(
        steps=[calls(call("update_opportunity", opportunity_id="opp-acme-expansion", amount=123456))]
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "update it")
    call_id = asked.proposals[0].tool_call_id
    key = idempotency.idempotency_key(asked.thread_id, call_id)
    # What a process killed right after the CRM applied the write leaves behind: the CRM
    # holds the change under our key, and our key is in flight with no audit row.
    applied = sandbox.call(
        "alex",
        "update_opportunity",
        opportunity_id="opp-acme-expansion",
        expected_version=before["version"],
        changes={"amount": 123456.0},
        idempotency_key=key,
    )
    assert not applied.get("isError"), applied
    async with connect(copilot_settings) as conn:
        await conn.execute(
            "INSERT INTO idempotency_keys (key, tenant_id, rep_aad_id, thread_id, tool_call_id, tool,"
            " args_hash, status, plan) VALUES (%s, %s, %s, %s, %s, 'update_opportunity', %s, 'in_flight', %s)",
            (
                key,
                rep.identity.tenant_id,
                rep.identity.aad_object_id,
                asked.thread_id,
                call_id,
                idempotency.args_hash({"opportunity_id": "opp-acme-expansion", "amount": 123456.0}),
                psycopg.types.json.Jsonb({"expected_version": before["version"]}),
            ),
        )

    async with service(copilot_settings, ScriptedChatModel(final="Updated.")) as svc:
        retried = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])

    after = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-expansion")["structuredContent"]
    result = retried.outcomes[0]["result"]
    assert result["status"] == "done", result
    assert result["recovered"] is True  # the CRM answered by key, before any version check
    assert after["version"] == before["version"] + 1
    assert [r.entry.tool_call_id for r in await _audit_rows(copilot_settings)] == [call_id]


@pytest.mark.parametrize("second_tool", ["log_activity", "update_opportunity"])
async def test_two_tool_calls_sharing_one_id_become_two_proposals_and_approving_one_writes_only_it(
    copilot_settings, sandbox, second_tool
):
    benign = _log("Benign call")
    injected = (
        _log("INJECTED", account_id="acc-acme")
        if second_tool == "log_activity"
        else call("update_opportunity", opportunity_id="opp-acme-expansion", stage="Closed Lost")
    )
    injected["id"] = benign["id"]  # the model (or an adapter) chose one id for both
    before = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-expansion")["structuredContent"]
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, ScriptedChatModel(steps=[calls(benign, injected)])) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call")
        shown = {p.tool_call_id: p for p in asked.proposals}
        assert len(shown) == 2  # both are shown, each under its own id
        assert benign["id"] not in shown
        benign_id = next(i for i, p in shown.items() if p.args.get("subject") == "Benign call")
        resumed = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(benign_id)])
        assert [p.tool_call_id for p in resumed.proposals] == [i for i in shown if i != benign_id]

    activities = _activities(sandbox, asked.thread_id)
    assert [a["subject"] for a in activities] == ["Benign call"]
    after = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-expansion")["structuredContent"]
    assert after["version"] == before["version"]
    rows = await _audit_rows(copilot_settings)
    assert [(r.entry.tool_call_id, r.entry.decision, r.entry.original_args["subject"]) for r in rows] == [
        (benign_id, "approve", "Benign call")
    ]


async def test_a_tool_call_id_reused_from_an_earlier_turn_gets_an_id_of_its_own(copilot_settings, sandbox):
    first = _log("First turn")
    again = _log("Second turn")
    again["id"] = first["id"]
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, ScriptedChatModel(steps=[calls(first)])) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call")
        done = await svc.decide(
            rep.identity, rep.broker, asked.thread_id, [_approve(asked.proposals[0].tool_call_id)]
        )
    async with service(copilot_settings, ScriptedChatModel(steps=[calls(again)])) as svc:
        second = await svc.run_turn(rep.identity, rep.broker, asked.thread_id, "log another")
        assert second.proposals[0].tool_call_id != asked.proposals[0].tool_call_id
        final = await svc.decide(
            rep.identity, rep.broker, asked.thread_id, [_approve(second.proposals[0].tool_call_id)]
        )
    assert done.outcomes[0]["result"]["status"] == "done"
    assert final.outcomes[0]["result"]["status"] == "done"
    assert "replayed" not in final.outcomes[0]["result"]  # not the first write's stored result
    assert sorted(a["subject"] for a in _activities(sandbox, asked.thread_id)) == [
        "First turn",
        "Second turn",
    ]


async def test_a_decision_is_bound_to_the_arguments_shown_by_their_digest(copilot_settings, sandbox):
    from copilot.turns import args_digest

    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, ScriptedChatModel(steps=[calls(_log("Bound"))])) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call")
        shown = asked.to_json()["proposals"][0]
        assert shown["digest"] == args_digest(shown["args"])
        other = args_digest({**shown["args"], "subject": "Something else"})
        with pytest.raises(InvalidDecision, match="not the one you were shown"):
            await svc.decide(
                rep.identity,
                rep.broker,
                asked.thread_id,
                [{"tool_call_id": shown["tool_call_id"], "type": "approve", "digest": other}],
            )
        assert _activities(sandbox, asked.thread_id) == []
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": shown["tool_call_id"], "type": "approve", "digest": shown["digest"]}],
        )
    assert done.outcomes[0]["result"]["status"] == "done"


# --- invariant 5: edits are new input ----------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"stage": "Daydreaming"}, "stage"),
        ({"amount": -10}, "amount"),
        ({"amount": float("inf")}, "amount|finite"),  # what JSON's 1e400 parses to
        ({"amount": float("nan")}, "amount|finite"),
        ({"amount": 1e13}, "amount"),
        ({"colour": "red"}, "colour"),
    ],
)
async def test_invalid_edits_are_refused_clearly_and_write_nothing(copilot_settings, sandbox, edit, message):
    before = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-expansion")["structuredContent"]
    model = ScriptedChatModel(
        steps=[
            calls(
                call(
                    "update_opportunity",
                    opportunity_id="opp-acme-expansion",
                    next_step="Call CFO about the edit",
                )
            )
        ]
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "update it")
        call_id = asked.proposals[0].tool_call_id
        with pytest.raises(InvalidDecision, match=message):
            await svc.decide(
                rep.identity,
                rep.broker,
                asked.thread_id,
                [{"tool_call_id": call_id, "type": "edit", "args": edit}],
            )
        still = await svc.pending(rep.identity, asked.thread_id)
    assert [p.tool_call_id for p in still.proposals] == [call_id]
    after = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-expansion")["structuredContent"]
    assert after["version"] == before["version"]


async def test_an_out_of_range_amount_edit_leaves_the_proposal_open_for_a_corrected_edit(
    copilot_settings, sandbox
):
    model = ScriptedChatModel(
        steps=[
            calls(
                call(
                    "update_opportunity",
                    opportunity_id="opp-acme-expansion",
                    next_step="Call CFO about the amount",
                )
            )
        ]
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "update it")
        call_id = asked.proposals[0].tool_call_id
        with pytest.raises(InvalidDecision, match=r"amount|finite"):
            await svc.decide(
                rep.identity,
                rep.broker,
                asked.thread_id,
                json.loads(
                    '[{"tool_call_id": "CALL", "type": "edit", "args": {"amount": 1e400}}]'.replace(
                        "CALL", call_id
                    )
                ),
            )
        fixed = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": call_id, "type": "edit", "args": {"amount": 140000}}],
        )
    assert fixed.outcomes[0]["result"]["status"] == "done"
    after = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-expansion")["structuredContent"]
    assert after["amount"] == 140000


async def test_an_edit_that_changes_the_tool_is_refused(copilot_settings):
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, ScriptedChatModel(steps=[calls(_log("Tool swap"))])) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log it")
        with pytest.raises(InvalidDecision, match="cannot be changed"):
            await svc.decide(
                rep.identity,
                rep.broker,
                asked.thread_id,
                [
                    {
                        "tool_call_id": asked.proposals[0].tool_call_id,
                        "type": "edit",
                        "tool": "update_opportunity",
                        "args": {"subject": "x"},
                    }
                ],
            )


async def test_an_edit_pointing_at_a_record_the_rep_cannot_write_is_refused(copilot_settings, sandbox):
    state = sandbox.admin("GET", "/admin/export")
    megans = next(o for o in state["opportunities"] if o["owner_id"] == "u-megan")
    before = sandbox.call("nestor", "get_opportunity", opportunity_id=megans["id"])["structuredContent"]
    model = ScriptedChatModel(
        steps=[
            calls(
                call(
                    "update_opportunity",
                    opportunity_id="opp-acme-expansion",
                    next_step="Call CFO about access",
                )
            )
        ],
        final="Done.",
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "update it")
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [
                {
                    "tool_call_id": asked.proposals[0].tool_call_id,
                    "type": "edit",
                    "args": {"opportunity_id": megans["id"]},
                }
            ],
        )
    assert done.outcomes[0]["result"].get("code") == "permission_denied", done.outcomes
    after = sandbox.call("nestor", "get_opportunity", opportunity_id=megans["id"])["structuredContent"]
    assert after["version"] == before["version"]
    assert await _audit_rows(copilot_settings) == []


# --- rejections ---------------------------------------------------------------------------------


async def test_a_rejection_reaches_the_agent_is_recorded_and_the_agent_can_propose_again(
    copilot_settings, sandbox
):
    def repropose(messages: list[BaseMessage]) -> AIMessage:
        rejected = next(m for m in reversed(messages) if isinstance(m, ToolMessage))
        assert "wrong account" in message_text(rejected)
        return calls(_log("Second try"))

    model = ScriptedChatModel(steps=[calls(_log("First try")), repropose])
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log it")
        again = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": asked.proposals[0].tool_call_id, "type": "reject", "reason": "wrong account"}],
        )
    assert [p.args["subject"] for p in again.proposals] == ["Second try"]
    assert _activities(sandbox, asked.thread_id) == []
    assert copilot_settings.database_url is not None
    async with await psycopg.AsyncConnection.connect(
        copilot_settings.database_url.get_secret_value()
    ) as conn:
        cur = await conn.execute("SELECT tool_call_id, reason FROM rejections")
        assert await cur.fetchall() == [(asked.proposals[0].tool_call_id, "wrong account")]


async def test_a_rejection_needs_a_reason(copilot_settings):
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, ScriptedChatModel(steps=[calls(_log("x"))])) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log it")
        with pytest.raises(InvalidDecision, match="reason"):
            await svc.decide(
                rep.identity,
                rep.broker,
                asked.thread_id,
                [{"tool_call_id": asked.proposals[0].tool_call_id, "type": "reject"}],
            )


# --- invariant 4: no blind overwrite -------------------------------------------------------------


async def test_a_stale_proposal_becomes_a_conflict_then_a_fresh_approval_without_overwriting(
    copilot_settings, sandbox
):
    def repropose_with_current(messages: list[BaseMessage]) -> AIMessage:
        conflict = json.loads(message_text(next(m for m in reversed(messages) if isinstance(m, ToolMessage))))
        assert conflict["status"] == "conflict"
        return calls(call("update_opportunity", opportunity_id=conflict["current"]["id"], stage="Proposal"))

    model = ScriptedChatModel(
        steps=[
            # The seed has it in Negotiation: a move to another stage is a real change.
            calls(call("update_opportunity", opportunity_id="opp-acme-analytics", stage="Proposal")),
            repropose_with_current,
        ],
        final="Moved to Proposal.",
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "move analytics to proposal")
        assert asked.proposals[0].record is not None
        read_version = int(asked.proposals[0].record["version"] or 0)
        # Someone else (the manager) changes the record while the proposal waits.
        manager_change = sandbox.call(
            "nestor",
            "update_opportunity",
            opportunity_id="opp-acme-analytics",
            expected_version=read_version,
            changes={"next_step": "Manager: confirm budget"},
        )
        assert manager_change["isError"] is False
        conflicted = await svc.decide(
            rep.identity, rep.broker, asked.thread_id, [_approve(asked.proposals[0].tool_call_id)]
        )
        assert conflicted.outcomes[0]["result"]["status"] == "conflict"
        fresh = conflicted.proposals[0]
        assert fresh.tool_call_id != asked.proposals[0].tool_call_id
        assert fresh.record is not None
        assert fresh.record["version"] == read_version + 1
        done = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(fresh.tool_call_id)])

    assert done.outcomes[0]["result"]["status"] == "done"
    final = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-analytics")["structuredContent"]
    assert final["stage"] == "Proposal"
    assert final["next_step"] == "Manager: confirm budget"
    assert final["version"] == read_version + 2


# --- three proposals, decided one by one ---------------------------------------------------------


async def test_three_proposals_are_approved_edited_and_rejected_separately(copilot_settings, sandbox):
    model = ScriptedChatModel(steps=[calls(_log("One"), _log("Two"), _log("Three"))], final="Done.")
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log three calls")
        by_subject = {p.args["subject"]: p.tool_call_id for p in asked.proposals}
        assert set(by_subject) == {"One", "Two", "Three"}

        after_one = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(by_subject["One"])])
        assert {p.args["subject"] for p in after_one.proposals} == {"Two", "Three"}
        after_two = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": by_subject["Two"], "type": "edit", "args": {"subject": "Two (edited)"}}],
        )
        assert {p.args["subject"] for p in after_two.proposals} == {"Three"}
        await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": by_subject["Three"], "type": "reject", "reason": "duplicate"}],
        )

    subjects = sorted(a["subject"] for a in _activities(sandbox, asked.thread_id))
    assert subjects == ["One", "Two (edited)"]
    rows = await _audit_rows(copilot_settings)
    edited = next(r.entry for r in rows if r.entry.decision == "edit")
    assert edited.original_args["subject"] == "Two"
    assert edited.edited_args is not None
    assert edited.edited_args["subject"] == "Two (edited)"
    assert sorted(r.entry.decision for r in rows) == ["approve", "edit"]


# --- invariant 8: grounded answers ---------------------------------------------------------------


async def test_an_answer_citing_an_id_no_tool_returned_is_flagged(copilot_settings):
    model = ScriptedChatModel(
        steps=[calls(call("get_account", account_id="acc-acme"))],
        final="Acme [acc-acme] is doing well; see also [opp-invented-999].",
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "how is acme")
    assert result.citations == ["acc-acme"]
    assert result.unverified_citations == ["opp-invented-999"]
    assert result.answer is not None
    assert "[opp-invented-999]" not in result.answer
    assert "could not be verified" in result.answer


# --- invariant 9: PII --------------------------------------------------------------------------


async def test_no_contact_email_or_phone_reaches_the_model(copilot_settings, sandbox):
    contacts = sandbox.call("alex", "list_contacts", account_id="acc-acme")["structuredContent"]["items"]
    secrets = [c["email"] for c in contacts] + [c["phone"] for c in contacts]
    model = ScriptedChatModel(
        steps=[
            calls(
                call("list_contacts", account_id="acc-acme"),
                call("get_contact", contact_id=contacts[0]["id"]),
            )
        ],
        final="Listed.",
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        await svc.run_turn(
            rep.identity, rep.broker, None, f"who is at acme? my email is {contacts[0]['email']}"
        )
    seen = "\n".join(message_text(m) for batch in model.received for m in batch)
    assert contacts[0]["name"] in seen
    for secret in secrets:
        assert secret not in seen


# Stored in the CRM (the sandbox serves them as JSON with non-ASCII \u-escaped) and written
# by the rep: a Unicode local part and domain, punycode, a full-width address.
_CRM_IDN_EMAILS = ("josé.garcía@bücher.example", "иван.петров@xn--e1afmkfd.xn--p1ai")
_ASKED_IDN_EMAILS = (
    "用户@例子.中国",
    "maría@XN--BCHER-KVA.EXAMPLE",
    "ｔａｎａｋａ＠ｓｈｏｐ．ｅｘａｍｐｌｅ",
)


async def test_no_internationalised_email_reaches_the_model(copilot_settings, sandbox):
    contacts = sandbox.call("alex", "list_contacts", account_id="acc-acme")["structuredContent"]["items"]
    stored = dict(zip((c["id"] for c in contacts), _CRM_IDN_EMAILS, strict=False))
    model = ScriptedChatModel(
        steps=[
            calls(
                call("list_contacts", account_id="acc-acme"),
                call("get_contact", contact_id=contacts[0]["id"]),
            )
        ],
        final="Listed.",
    )
    rep = await sign_in(copilot_settings, "alex")
    with stored_contact_emails(sandbox.settings.db_path, stored):
        listed = sandbox.call("alex", "list_contacts", account_id="acc-acme")["content"][0]["text"]
        assert "jos\\u00e9" in listed  # the CRM's JSON escapes what the model must not read either
        asked = f"mailto:{_ASKED_IDN_EMAILS[0]}, <{_ASKED_IDN_EMAILS[1]}> or {_ASKED_IDN_EMAILS[2]}"
        async with service(copilot_settings, model) as svc:
            await svc.run_turn(rep.identity, rep.broker, None, f"who is at acme? mail me at {asked}")
    seen = "\n".join(message_text(m) for batch in model.received for m in batch)
    assert contacts[0]["name"] in seen
    assert seen.count("[REDACTED_EMAIL]") >= len(_ASKED_IDN_EMAILS) + len(stored) + 1  # get_contact too
    for email in (*stored.values(), *_ASKED_IDN_EMAILS):
        for written in (email, json.dumps(email)[1:-1], email.split("@")[0], email.split("@")[-1].lower()):
            assert written not in seen, written


# --- invariant 10: bounded --------------------------------------------------------------------


async def test_the_model_call_limit_ends_with_a_clear_message_and_no_write(copilot_settings, sandbox):
    from tests.support.copilot_env import copilot_settings as make_settings

    settings = make_settings(
        copilot_settings.database_url.get_secret_value(), sandbox, COPILOT_MODEL_CALL_RUN_LIMIT=3
    )
    looping = [calls(call("search_accounts", query=f"a{i}")) for i in range(3)] + [calls(_log("too late"))]
    rep = await sign_in(settings, "alex")
    async with service(settings, ScriptedChatModel(steps=looping)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "loop")
    assert result.answer == LIMIT_MESSAGE
    assert result.notice == "limit_reached"
    assert result.proposals == []
    assert _activities(sandbox, result.thread_id) == []


async def test_crm_outage_answers_plainly_opens_the_breaker_and_keeps_the_approval(copilot_settings, sandbox):
    def echo_tool_result(messages: list[BaseMessage]) -> AIMessage:
        return AIMessage(content=message_text(messages[-1]))

    reads = [calls(call("get_account", account_id="acc-acme")), echo_tool_result] * 3
    model = ScriptedChatModel(steps=[calls(_log("Survives outage")), *reads], final="Logged.")
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call")
        call_id = asked.proposals[0].tool_call_id

        sandbox.admin("PUT", "/admin/knobs", {"failure_rate": 1.0, "failure_kinds": ["503"]})
        down = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])
        assert down.answer is not None
        assert "Live CRM data is unavailable" in down.answer
        assert [p.tool_call_id for p in down.proposals] == [call_id]
        # The model's reads are retried, then answered "unavailable" until the breaker opens...
        while svc.breaker.state != "open":
            reading = await svc.run_turn(rep.identity, rep.broker, None, "how is acme")
            assert reading.answer is not None
            assert "Live CRM data is unavailable" in reading.answer
        # ...after which the copilot answers at once, without calling the model or the CRM.
        calls_before = len(model.received)
        fast = await svc.run_turn(rep.identity, rep.broker, None, "how is acme")
        assert fast.answer is not None
        assert "Live CRM data is unavailable" in fast.answer
        assert len(model.received) == calls_before

        sandbox.admin("PUT", "/admin/knobs", {})
        await asyncio.sleep(copilot_settings.breaker_reset_seconds + 0.1)
        recovered = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])

    assert recovered.outcomes[0]["result"]["status"] == "done"
    assert svc.breaker.state == "closed"
    assert len(_activities(sandbox, asked.thread_id)) == 1


async def test_a_transient_crm_failure_during_a_read_is_retried(copilot_settings, sandbox):
    model = ScriptedChatModel(
        steps=[calls(call("get_account", account_id="acc-acme"))], final="Acme [acc-acme]."
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        # Half the calls fail with 429/503; with retries the read still succeeds eventually.
        sandbox.admin(
            "PUT",
            "/admin/knobs",
            {"failure_rate": 0.5, "failure_kinds": ["429", "503"], "retry_after_seconds": 0},
        )
        result = await svc.run_turn(rep.identity, rep.broker, None, "acme?")
    tool_results = [m for batch in model.received for m in batch if isinstance(m, ToolMessage)]
    assert result.answer is not None
    assert tool_results  # the model got a result (success or a clear unavailable message), never a crash


# --- invariant 2: tokens stay out of everything persisted --------------------------------------


async def test_the_reps_tokens_never_appear_in_checkpoints_store_audit_or_logs(
    copilot_settings, sandbox, caplog
):
    caplog.set_level(logging.DEBUG)
    model = ScriptedChatModel(
        steps=[
            calls(
                call("get_account", account_id="acc-acme"),
                _log("Token check"),
                call("update_preferences", signature="Alex"),
            )
        ],
        final="Done [acc-acme].",
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log it")
        await svc.decide(
            rep.identity, rep.broker, asked.thread_id, [_approve(p.tool_call_id) for p in asked.proposals]
        )
    tokens = rep.issued_tokens()
    assert len(tokens) >= 2  # a read token and a write token were used
    assert copilot_settings.database_url is not None
    async with await psycopg.AsyncConnection.connect(
        copilot_settings.database_url.get_secret_value()
    ) as conn:
        dumps = []
        for table in (
            "checkpoints",
            "checkpoint_blobs",
            "checkpoint_writes",
            "store",
            "audit_log",
            "idempotency_keys",
            "rejections",
            "threads",
        ):
            cur = await conn.execute(f"SELECT * FROM {table}")
            dumps.append(repr(await cur.fetchall()))
    everything = "\n".join(dumps) + caplog.text
    assert "Token check" in everything  # the dump really contains the run
    for token in tokens:
        assert token not in everything
        assert token.split(".")[2] not in everything  # not even the signature


# --- invariant 7: threads belong to someone -------------------------------------------------------


async def test_another_rep_cannot_continue_or_resume_a_thread(copilot_settings):
    rep = await sign_in(copilot_settings, "alex")
    other = await sign_in(copilot_settings, "megan")
    async with service(copilot_settings, ScriptedChatModel(steps=[calls(_log("Mine"))])) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log it")
        with pytest.raises(ThreadAccessDenied):
            await svc.run_turn(other.identity, other.broker, asked.thread_id, "show me")
        with pytest.raises(ThreadAccessDenied):
            await svc.decide(
                other.identity, other.broker, asked.thread_id, [_approve(asked.proposals[0].tool_call_id)]
            )
        with pytest.raises(ThreadAccessDenied):
            await svc.pending(other.identity, asked.thread_id)


async def test_a_rep_without_crm_access_gets_a_clear_answer(copilot_settings):
    rep = await sign_in(copilot_settings, "adele")
    async with service(copilot_settings, ScriptedChatModel()) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "my pipeline")
    assert result.notice == "no_crm_access"
    assert result.answer is not None
    assert "don't have access to the CRM" in result.answer


# --- review follow-ups -----------------------------------------------------------------------


async def test_an_edit_can_fix_a_proposal_whose_original_arguments_were_invalid(copilot_settings, sandbox):
    invalid = call("log_activity", type="phone", subject="Pricing", account_id="acc-acme")
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, ScriptedChatModel(steps=[calls(invalid)], final="Logged.")) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log it")
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": asked.proposals[0].tool_call_id, "type": "edit", "args": {"type": "call"}}],
        )
    assert done.outcomes[0]["result"]["status"] == "done"
    assert [a["type"] for a in _activities(sandbox, asked.thread_id)] == ["call"]
    rows = await _audit_rows(copilot_settings)
    assert rows[0].entry.decision == "edit"


async def test_an_edit_that_retargets_another_opportunity_is_a_conflict_not_a_blind_write(
    copilot_settings, sandbox
):
    before = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-renewal")["structuredContent"]
    model = ScriptedChatModel(
        steps=[
            calls(
                call(
                    "update_opportunity",
                    opportunity_id="opp-acme-expansion",
                    next_step="Call CFO about the retarget",
                )
            )
        ],
        final="Done.",
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "update it")
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [
                {
                    "tool_call_id": asked.proposals[0].tool_call_id,
                    "type": "edit",
                    "args": {"opportunity_id": "opp-acme-renewal"},
                }
            ],
        )
    assert done.outcomes[0]["result"]["status"] == "conflict"
    after = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-renewal")["structuredContent"]
    assert after["version"] == before["version"]


async def test_an_edit_attaching_an_activity_to_an_account_the_rep_cannot_see_is_refused(
    copilot_settings, sandbox
):
    state = sandbox.admin("GET", "/admin/export")
    shared = {s["record_id"] for s in state["shares"] if s["user_id"] == "u-alex"}
    hidden = next(a for a in state["accounts"] if a["territory"] == "East" and a["id"] not in shared)
    rep = await sign_in(copilot_settings, "alex")
    model = ScriptedChatModel(
        steps=[calls(_log("Retarget", opportunity_id="opp-acme-renewal"))], final="Done."
    )
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log it")
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [
                {
                    "tool_call_id": asked.proposals[0].tool_call_id,
                    "type": "edit",
                    "args": {"account_id": hidden["id"]},
                }
            ],
        )
    assert done.outcomes[0]["result"]["code"] == "permission_denied"
    assert _activities(sandbox, asked.thread_id) == []


async def test_a_rejection_is_recorded_exactly_when_the_run_took_it(copilot_settings, sandbox):
    rep = await sign_in(copilot_settings, "alex")
    model = ScriptedChatModel(steps=[calls(_log("Keep"), _log("Drop"))], final="Done.")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log two")
        keep, drop = sorted(asked.proposals, key=lambda p: p.args["subject"] != "Keep")
        sandbox.admin("PUT", "/admin/knobs", {"failure_rate": 1.0, "failure_kinds": ["503"]})
        down = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [
                _approve(keep.tool_call_id),
                {"tool_call_id": drop.tool_call_id, "type": "reject", "reason": "dup"},
            ],
        )
        sandbox.admin("PUT", "/admin/knobs", {})
    # The approved write could not run, so it stays pending; the rejection beside it was taken.
    assert down.notice == "crm_unavailable"
    assert [p.tool_call_id for p in down.proposals] == [keep.tool_call_id]
    assert copilot_settings.database_url is not None
    async with await psycopg.AsyncConnection.connect(
        copilot_settings.database_url.get_secret_value()
    ) as conn:
        cur = await conn.execute("SELECT tool_call_id FROM rejections")
        assert await cur.fetchall() == [(drop.tool_call_id,)]


async def test_approving_a_preference_change_needs_no_crm_write_session(copilot_settings, sandbox):
    rep = await sign_in(copilot_settings, "alex")
    model = ScriptedChatModel(steps=[calls(call("update_preferences", email_tone="formal"))], final="Saved.")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "be formal")
        sandbox.admin("PUT", "/admin/knobs", {"failure_rate": 1.0, "failure_kinds": ["503"]})
        done = await svc.decide(
            rep.identity, rep.broker, asked.thread_id, [_approve(asked.proposals[0].tool_call_id)]
        )
        sandbox.admin("PUT", "/admin/knobs", {})
    assert done.outcomes[0]["result"]["status"] == "done"
    assert done.outcomes[0]["result"]["preferences"]["email_tone"] == "formal"


async def test_the_default_model_call_limit_ends_the_run_before_the_graph_runs_out_of_steps(
    copilot_settings, sandbox
):
    # recursion_limit was a fixed 60 (about 12 graph steps per model round), so the fifth
    # model call raised GraphRecursionError and the 12-call limit never applied.
    limit = copilot_settings.model_call_run_limit
    looping = [calls(call("search_accounts", query=f"a{i}")) for i in range(limit + 2)]
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, ScriptedChatModel(steps=looping)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "loop")
    assert result.answer == LIMIT_MESSAGE
    assert result.notice == "limit_reached"
    assert result.proposals == []


async def test_a_run_that_still_runs_out_of_graph_steps_ends_with_the_limit_message(
    copilot_settings, sandbox, monkeypatch
):
    from copilot import runner

    monkeypatch.setattr(runner, "recursion_limit", lambda agent, limit: 8)
    looping = [calls(call("search_accounts", query=f"a{i}")) for i in range(4)]
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, ScriptedChatModel(steps=looping)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "loop")
        assert result.answer == LIMIT_MESSAGE
        assert result.notice == "limit_reached"
        monkeypatch.undo()
        # The thread stays usable: the next question gets an answer.
        later = await svc.run_turn(rep.identity, rep.broker, result.thread_id, "and now?")
    assert later.notice is None
    assert later.answer


async def test_the_offline_model_answers_how_to_reach_a_contact_without_crashing(copilot_settings, sandbox):
    from offline_model import OfflineChatModel

    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, OfflineChatModel()) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "how do I reach Sarah Chen at Acme?")
    assert result.answer
    assert result.notice in (None, "limit_reached")


async def test_a_redelivered_message_is_not_asked_twice(copilot_settings, sandbox):
    # A queue worker that dies after the card went out but before acknowledging the
    # message gets it again, maybe after the rep approved: it must not be proposed again.
    model = ScriptedChatModel(steps=[calls(_log("Once")), AIMessage(content="Logged."), calls(_log("Twice"))])
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        first = await svc.run_turn(
            rep.identity, rep.broker, None, "log a call", message_id="teams-activity:a1"
        )
        call_id = first.proposals[0].tool_call_id
        await svc.decide(rep.identity, rep.broker, first.thread_id, [_approve(call_id)])
        again = await svc.run_turn(
            rep.identity, rep.broker, first.thread_id, "log a call", message_id="teams-activity:a1"
        )
    assert again.proposals == []
    assert [a["subject"] for a in _activities(sandbox, first.thread_id)] == ["Once"]


def _slow_answer(text: str) -> Any:
    def step(messages: list[BaseMessage]) -> AIMessage:
        time.sleep(0.4)  # the model thinks (in a worker thread): the two runs overlap
        return AIMessage(content=text)

    return step


async def test_concurrent_questions_on_one_thread_run_one_after_the_other(copilot_settings, sandbox):
    model = ScriptedChatModel(steps=[_slow_answer("first"), _slow_answer("second"), _slow_answer("third")])
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        first = await svc.run_turn(rep.identity, rep.broker, None, "one")
        results = await asyncio.gather(
            svc.run_turn(rep.identity, rep.broker, first.thread_id, "two"),
            svc.run_turn(rep.identity, rep.broker, first.thread_id, "three"),
        )
        state = await svc.saver.aget_tuple({"configurable": {"thread_id": first.thread_id}})
    assert sorted(r.answer or "" for r in results) == ["second", "third"]
    assert state is not None
    asked = [m.content for m in state.checkpoint["channel_values"]["messages"] if m.type == "human"]
    # Both questions are in the one history: no run forked the checkpoint and lost the other.
    assert asked[0] == "one"
    assert sorted(asked[1:]) == ["three", "two"]


async def test_a_redelivered_message_is_not_asked_again_after_summarisation_folded_it_in(
    copilot_settings, sandbox
):
    from offline_model import OfflineChatModel
    from tests.support.copilot_env import copilot_settings as make_settings

    assert copilot_settings.database_url is not None
    settings = make_settings(
        copilot_settings.database_url.get_secret_value(),
        sandbox,
        COPILOT_SUMMARY_TRIGGER_TOKENS=500,
        COPILOT_SUMMARY_KEEP_MESSAGES=2,
    )
    rep = await sign_in(settings, "alex")
    async with service(settings, OfflineChatModel()) as svc:
        first = await svc.run_turn(rep.identity, rep.broker, None, "summarise Acme", message_id="m-1")
        for n, question in enumerate(["summarise Globex", "my deals closing this quarter", "summarise Acme"]):
            await svc.run_turn(rep.identity, rep.broker, first.thread_id, question, message_id=f"m-{n + 2}")
        before = await svc.saver.aget_tuple({"configurable": {"thread_id": first.thread_id}})
        assert before is not None
        ids = [m.id for m in before.checkpoint["channel_values"]["messages"]]
        assert "m-1" not in ids  # folded into the summary
        again = await svc.run_turn(
            rep.identity, rep.broker, first.thread_id, "summarise Acme", message_id="m-1"
        )
        after = await svc.saver.aget_tuple({"configurable": {"thread_id": first.thread_id}})
    assert after is not None
    assert after.checkpoint["id"] == before.checkpoint["id"]  # nothing was run again
    assert again.proposals == []


async def test_each_model_call_is_counted_once_against_the_thread_limit_in_one_step(
    copilot_settings, sandbox
):
    from tests.support.copilot_env import copilot_settings as make_settings

    # Two model calls per turn (a read, then the answer); the thread allows five.
    settings = make_settings(
        copilot_settings.database_url.get_secret_value(), sandbox, COPILOT_MODEL_CALL_THREAD_LIMIT=5
    )

    def read_then_answer(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(content="Acme is doing fine [acc-acme].")
        return calls(call("get_account", account_id="acc-acme"))

    rep = await sign_in(settings, "alex")
    async with service(settings, ScriptedChatModel(steps=[read_then_answer] * 10)) as svc:
        first = await svc.run_turn(rep.identity, rep.broker, None, "how is Acme?")
        saved = await svc.saver.aget_tuple({"configurable": {"thread_id": first.thread_id}})
        assert saved is not None
        assert saved.checkpoint["channel_values"]["thread_model_call_count"] == 2
        second = await svc.run_turn(rep.identity, rep.broker, first.thread_id, "and again?")
        assert second.notice is None
        # Four calls made; the fifth is allowed, the sixth is not: the third turn's read
        # is answered, then the limit ends it.
        third = await svc.run_turn(rep.identity, rep.broker, first.thread_id, "once more?")
        assert third.notice == "limit_reached", third
        nodes = set(svc._agent.nodes)
    assert not any(name.startswith("FriendlyModelCallLimit.after_model") for name in nodes), nodes
    assert "FriendlyModelCallLimit.before_model" in nodes
