"""A write that would change nothing is not put to the rep, whichever model proposed it.

The approval step compares the proposed fields with the record it read at proposal time
and answers the call itself ("already has that value") instead of interrupting; a change
to even one field is still proposed. Real PostgreSQL, the sandbox over MCP.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, ToolMessage

from copilot.citations import message_text
from copilot.persistence import audit
from copilot.persistence.database import connect
from offline_model import OfflineChatModel
from tests.support.copilot_env import service, sign_in
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls

pytestmark = pytest.mark.integration


def _opportunity(sandbox: SandboxProcess, opportunity_id: str) -> dict[str, Any]:
    result: dict[str, Any] = sandbox.call("alex", "get_opportunity", opportunity_id=opportunity_id)[
        "structuredContent"
    ]
    return result


async def _audit_count(settings: Any) -> int:
    async with connect(settings) as conn:
        return len(await audit.list_entries(conn, limit=10_000))


def _last_tool_result(messages: list[BaseMessage]) -> dict[str, Any]:
    tool = next(m for m in reversed(messages) if isinstance(m, ToolMessage))
    parsed: dict[str, Any] = json.loads(message_text(tool))
    return parsed


async def test_a_scripted_proposal_of_values_the_record_already_has_is_answered_without_an_approval(
    copilot_settings, sandbox
):
    before = _opportunity(sandbox, "opp-acme-renewal")
    model = ScriptedChatModel(
        steps=[
            calls(
                call(
                    "update_opportunity",
                    opportunity_id="opp-acme-renewal",
                    stage=before["stage"],
                    close_date=before["close_date"],
                )
            ),
        ],
        final="It already has those values.",
    )
    audited = await _audit_count(copilot_settings)
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "keep the renewal as it is")

    assert result.proposals == []
    assert result.answer == "It already has those values."
    reply = _last_tool_result(model.received[-1])
    assert reply["status"] == "unchanged"
    assert reply["record"]["id"] == "opp-acme-renewal"
    assert reply["unchanged"] == {"stage": before["stage"], "close_date": before["close_date"]}
    assert "already has stage" in reply["message"]
    assert _opportunity(sandbox, "opp-acme-renewal")["version"] == before["version"]
    assert await _audit_count(copilot_settings) == audited


async def test_a_proposal_changing_one_field_of_several_is_still_put_to_the_rep(copilot_settings, sandbox):
    before = _opportunity(sandbox, "opp-acme-expansion")
    model = ScriptedChatModel(
        steps=[
            calls(
                call(
                    "update_opportunity",
                    opportunity_id="opp-acme-expansion",
                    stage=before["stage"],
                    next_step=before["next_step"] + " (and a second call)",
                )
            )
        ]
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "change the expansion's next step")
    assert [p.tool for p in result.proposals] == ["update_opportunity"]


async def test_a_preference_already_set_is_not_proposed_again(copilot_settings, sandbox):
    rep = await sign_in(copilot_settings, "megan")
    async with service(copilot_settings, OfflineChatModel()) as svc:
        first = await svc.run_turn(rep.identity, rep.broker, None, "make my email tone formal")
        assert [p.tool for p in first.proposals] == ["update_preferences"]
        await svc.decide(
            rep.identity,
            rep.broker,
            first.thread_id,
            [{"tool_call_id": first.proposals[0].tool_call_id, "type": "approve"}],
        )
        again = await svc.run_turn(rep.identity, rep.broker, first.thread_id, "set my email tone to formal")
    assert again.proposals == []
    assert again.answer is not None
    assert "already" in again.answer.lower()
    assert "formal" in again.answer


async def test_the_offline_model_says_the_deal_is_already_at_that_stage(copilot_settings, sandbox):
    stage = _opportunity(sandbox, "opp-acme-analytics")["stage"]
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, OfflineChatModel()) as svc:
        result = await svc.run_turn(
            rep.identity, rep.broker, None, f"move the acme analytics add-on to {stage.lower()}"
        )
    assert result.proposals == []
    assert result.answer is not None
    assert "already" in result.answer
    assert "[opp-acme-analytics]" in result.answer
    assert stage in result.answer


async def test_a_no_op_beside_a_real_write_leaves_only_the_real_one_to_decide_and_stays_answered_on_resume(
    copilot_settings, sandbox
):
    before = _opportunity(sandbox, "opp-acme-renewal")
    model = ScriptedChatModel(
        steps=[
            calls(
                call("update_opportunity", opportunity_id="opp-acme-renewal", stage=before["stage"]),
                call(
                    "log_activity",
                    type="task",
                    subject="Check the renewal terms",
                    notes="",
                    account_id="acc-acme",
                ),
            )
        ],
        final="Logged it; the stage was already right.",
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a task and keep the stage")
        assert [p.tool for p in asked.proposals] == ["log_activity"]
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": asked.proposals[0].tool_call_id, "type": "approve"}],
        )
    assert done.proposals == []
    assert [o["result"]["status"] for o in done.outcomes] == ["done"]
    results = [json.loads(message_text(m)) for m in model.received[-1] if isinstance(m, ToolMessage)]
    assert sorted(r["status"] for r in results) == ["done", "unchanged"]
    assert _opportunity(sandbox, "opp-acme-renewal")["version"] == before["version"]
