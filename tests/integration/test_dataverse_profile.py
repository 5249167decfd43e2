"""The copilot on the ``dataverse`` profile: reads through the Dataverse MCP server's read-only
tools, writes through the Web API (ETag ``If-Match``, alternate-key upsert), against the
sandbox's Dataverse face over real HTTPS, with real PostgreSQL and the rep's OBO token.

The scripted model stands in for an LLM where a test needs exact tool calls.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from copilot.citations import message_text
from copilot.errors import InvalidDecision
from copilot.persistence import audit
from copilot.persistence.database import connect
from copilot.settings import Settings
from sandbox.dataverse.ids import guid_for
from tests.support.copilot_env import prepare_database, service, sign_in
from tests.support.dataverse import webapi
from tests.support.dataverse_env import dataverse_settings
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls

pytestmark = pytest.mark.integration

ACME = guid_for("account", "acc-acme")
ANALYTICS = guid_for("opportunity", "opp-acme-analytics")


@pytest.fixture
async def dv_settings(database_url: str, sandbox: SandboxProcess) -> AsyncIterator[Settings]:
    from copilot.middleware.resilience import reset_breakers

    reset_breakers()
    settings = dataverse_settings(database_url, sandbox)
    await prepare_database(settings)
    yield settings
    sandbox.admin("PUT", "/admin/knobs", {})


def _log(subject: str, **extra: Any) -> dict[str, Any]:
    return call(
        "log_activity", account_id=ACME, type="call", subject=subject, notes="Discussed pricing.", **extra
    )


def _approve(tool_call_id: str) -> dict[str, Any]:
    return {"tool_call_id": tool_call_id, "type": "approve"}


def _calls_by_key(sandbox: SandboxProcess, key: str) -> list[dict[str, Any]]:
    """The emulator's phone calls whose alternate key is ``key`` (counted in the CRM itself)."""
    state = sandbox.admin("GET", "/admin/export")
    return [a for a in state["activities"] if a.get("external_id") == key]


def _stage_labels(sandbox: SandboxProcess) -> dict[int, str]:
    """The salesstage option set as the CRM's metadata gives it: value → label."""
    stages = webapi(
        sandbox,
        "GET",
        "EntityDefinitions(LogicalName='opportunity')/Attributes(LogicalName='salesstage')"
        "/Microsoft.Dynamics.CRM.PicklistAttributeMetadata?$expand=OptionSet",
    ).json()["OptionSet"]["Options"]
    return {o["Value"]: o["Label"]["UserLocalizedLabel"]["Label"] for o in stages}


async def _audit_rows(settings: Settings) -> list[Any]:
    async with connect(settings) as conn:
        return await audit.list_entries(conn)


async def test_a_question_binds_only_the_crms_read_only_tools_and_reads_with_read_query(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    model = ScriptedChatModel(
        steps=[
            calls(
                call(
                    "read_query", querytext=f"SELECT name, accountid FROM account WHERE accountid = '{ACME}'"
                )
            )
        ],
        final=f"Acme Corporation [{ACME}]",
    )
    rep = await sign_in(dv_settings, "alex")
    async with service(dv_settings, model) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "summarise Acme")

    bound = model.bound_tools
    assert {"read_query", "search", "describe"} <= bound
    assert not bound & {"create_record", "update_record", "delete_record"}
    assert result.answer is not None
    assert ACME in result.citations


async def test_a_logged_call_waits_for_approval_then_is_created_once_by_its_key_and_audited_with_the_etag(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    model = ScriptedChatModel(steps=[calls(_log("Pricing call"))], final="Logged.")
    rep = await sign_in(dv_settings, "alex")
    async with service(dv_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call with Acme")
        assert [p.tool for p in asked.proposals] == ["log_activity"]
        call_id = asked.proposals[0].tool_call_id
        key = f"{asked.thread_id}:{call_id}"
        assert _calls_by_key(sandbox, key) == []  # nothing before the decision
        done = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])
        with pytest.raises(InvalidDecision):
            await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])

    assert done.outcomes[0]["result"]["status"] == "done"
    assert len(_calls_by_key(sandbox, key)) == 1
    rows = await _audit_rows(dv_settings)
    assert len(rows) == 1
    assert rows[0].entry.target_record_id == ACME
    # The version read is the row's ETag (W/"<n>") as the Web API gave it.
    etag = webapi(sandbox, "GET", f"accounts({ACME})?$select=name").json()["@odata.etag"]
    assert etag == f'W/"{rows[0].entry.record_version_read}"'


async def test_a_stale_proposal_gets_412_then_a_conflict_with_the_values_now_then_a_fresh_approval(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    # The session's sandbox is shared: propose a stage the deal is not in now, and put back
    # the stage it had afterwards.
    label = _stage_labels(sandbox)
    before = webapi(sandbox, "GET", f"opportunities({ANALYTICS})?$select=salesstage").json()["salesstage"]
    target = "Qualification" if label[before] != "Qualification" else "Proposal"

    def repropose_with_current(messages: list[BaseMessage]) -> AIMessage:
        conflict = json.loads(message_text(next(m for m in reversed(messages) if isinstance(m, ToolMessage))))
        assert conflict["status"] == "conflict", conflict
        assert conflict["current"]["next_step"] == "Manager: confirm budget"
        return calls(call("update_opportunity", opportunity_id=ANALYTICS, stage=target))

    model = ScriptedChatModel(
        steps=[
            calls(call("update_opportunity", opportunity_id=ANALYTICS, stage=target)),
            repropose_with_current,
        ],
        final="Moved to Proposal.",
    )
    rep = await sign_in(dv_settings, "alex")
    async with service(dv_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "move analytics to proposal")
        record = asked.proposals[0].record
        assert record is not None
        read_version = int(record["version"] or 0)
        now = webapi(sandbox, "GET", f"opportunities({ANALYTICS})?$select=name").json()["@odata.etag"]
        assert now == f'W/"{read_version}"', (now, record.get("error"), record.get("current"))
        # The manager changes the deal through the Web API while the proposal waits.
        changed = webapi(
            sandbox,
            "PATCH",
            f"opportunities({ANALYTICS})",
            "nestor",
            headers={"If-Match": f'W/"{read_version}"'},
            json={"description": "Manager: confirm budget"},
        )
        assert changed.status_code == 204, changed.text
        conflicted = await svc.decide(
            rep.identity, rep.broker, asked.thread_id, [_approve(asked.proposals[0].tool_call_id)]
        )
        assert conflicted.outcomes[0]["result"]["status"] == "conflict"
        fresh = conflicted.proposals[0]
        assert fresh.record is not None
        assert fresh.record["version"] == read_version + 1
        done = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(fresh.tool_call_id)])

    assert done.outcomes[0]["result"]["status"] == "done"
    row = webapi(sandbox, "GET", f"opportunities({ANALYTICS})?$select=salesstage,description").json()
    assert row["description"] == "Manager: confirm budget"  # nothing was overwritten
    assert row["@odata.etag"] == f'W/"{read_version + 2}"'
    assert label[row["salesstage"]] == target
    webapi(sandbox, "PATCH", f"opportunities({ANALYTICS})", "nestor", json={"salesstage": before})
