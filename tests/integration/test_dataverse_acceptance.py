"""Issue 33's acceptance on the ``dataverse`` profile: the copilot's guarantees hold when it reads
through the Dataverse MCP server and writes through the Web API, through the real service and the
Teams bot, against the sandbox's Dataverse face (real HTTPS, real PostgreSQL, the rep's OBO token).

Counting is done in the CRM itself: the emulator's export (an activity's ``external_id`` is the
write's key) and the rows' ETags through the Web API.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from copilot.citations import message_text
from copilot.errors import InvalidDecision
from copilot.persistence import audit
from copilot.persistence.database import connect
from copilot.persistence.idempotency import idempotency_key
from copilot.settings import Settings
from copilot.turns import TurnResult
from sandbox.dataverse.ids import guid_for
from tests.support.copilot_env import prepare_database, service, sign_in
from tests.support.dataverse import east_account_of_diego, knobs, webapi
from tests.support.dataverse_env import dataverse_settings
from tests.support.fake_connector import card_of, find_actions
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls
from tests.support.teams_client import running_bot

pytestmark = pytest.mark.integration

ACME = guid_for("account", "acc-acme")
EXPANSION = guid_for("opportunity", "opp-acme-expansion")
ALICE = guid_for("contact", "con-0001")
CRM_WRITE_TOOLS = {"create_record", "update_record", "delete_record"}


@pytest.fixture
async def dv_settings(database_url: str, sandbox: SandboxProcess) -> AsyncIterator[Settings]:
    from copilot.middleware.resilience import reset_breakers

    reset_breakers()
    settings = dataverse_settings(database_url, sandbox)
    await prepare_database(settings)
    yield settings
    sandbox.admin("PUT", "/admin/knobs", {})


def _log(subject: str, account_id: str = ACME) -> dict[str, Any]:
    return call("log_activity", account_id=account_id, type="call", subject=subject, notes="Pricing.")


def _approve(tool_call_id: str) -> dict[str, Any]:
    return {"tool_call_id": tool_call_id, "type": "approve"}


def _activities(sandbox: SandboxProcess, thread_id: str) -> list[dict[str, Any]]:
    """The CRM's activities written under this thread's keys."""
    state = sandbox.admin("GET", "/admin/export")
    return [a for a in state["activities"] if str(a.get("external_id") or "").startswith(f"{thread_id}:")]


def _opportunity(sandbox: SandboxProcess, guid: str, rep: str = "alex") -> dict[str, Any]:
    row: dict[str, Any] = webapi(
        sandbox, "GET", f"opportunities({guid})?$select=name,description,new_copilotkey", rep
    ).json()
    return row


async def _audit_rows(settings: Settings) -> list[audit.StoredAuditEntry]:
    async with connect(settings) as conn:
        return await audit.list_entries(conn, limit=1000)


def _tool_results(model: ScriptedChatModel) -> str:
    """Everything the model was shown of its tool calls' results, in one text."""
    seen: dict[str, str] = {}
    for messages in model.received:
        for message in messages:
            if isinstance(message, ToolMessage):
                seen[message.tool_call_id] = message_text(message)
    return "\n".join(seen.values())


def _everything_sent(model: ScriptedChatModel) -> str:
    return "\n".join(message_text(m) for messages in model.received for m in messages)


# --- invariant 1: every write is interrupted ------------------------------------------------------


async def test_every_write_tool_waits_for_the_reps_decision_and_nothing_reaches_the_crm_before_it(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    before = _opportunity(sandbox, EXPANSION)
    model = ScriptedChatModel(
        steps=[
            calls(
                _log("Before any decision"),
                call("update_opportunity", opportunity_id=EXPANSION, next_step="Not before a decision"),
                call("draft_followup_email", contact_id=ALICE, subject="Pricing", body="Following up."),
                call("update_preferences", email_tone="formal"),
            )
        ],
        final="Done.",
    )
    rep = await sign_in(dv_settings, "alex")
    async with service(dv_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "do all of it")
        assert asked.answer is None
        assert sorted(p.tool for p in asked.proposals) == sorted(
            ["log_activity", "update_opportunity", "draft_followup_email", "update_preferences"]
        )
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": p.tool_call_id, "type": "reject", "reason": "no"} for p in asked.proposals],
        )

    assert not [o for o in done.outcomes if o["result"].get("status") == "done"]
    assert _activities(sandbox, asked.thread_id) == []
    assert _opportunity(sandbox, EXPANSION)["@odata.etag"] == before["@odata.etag"]
    drafts = sandbox.admin("GET", "/admin/export")["drafts"]
    assert [d for d in drafts if str(d.get("idempotency_key", "")).startswith(asked.thread_id)] == []
    assert await _audit_rows(dv_settings) == []
    assert not model.bound_tools & CRM_WRITE_TOOLS


# --- invariant 3: exactly once --------------------------------------------------------------------


async def test_two_services_resuming_one_approval_at_once_create_one_phone_call_and_one_audit_row(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    rep = await sign_in(dv_settings, "alex")
    async with service(dv_settings, ScriptedChatModel(steps=[calls(_log("Concurrent resumes"))])) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call")
    call_id = asked.proposals[0].tool_call_id

    async def resume() -> TurnResult | InvalidDecision:
        async with service(dv_settings, ScriptedChatModel(final="Logged.")) as other:
            try:
                return await other.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])
            except InvalidDecision as exc:
                return exc

    results = await asyncio.gather(resume(), resume())

    assert any(isinstance(r, TurnResult) for r in results)
    rows = _activities(sandbox, asked.thread_id)
    assert [r["external_id"] for r in rows] == [idempotency_key(asked.thread_id, call_id)]
    assert len(await _audit_rows(dv_settings)) == 1


async def test_two_approve_submits_of_one_teams_card_create_one_phone_call(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    model = ScriptedChatModel(steps=[calls(_log("Double click in Teams"))], final="Logged.")
    async with running_bot(dv_settings) as teams:
        assert teams.runtime is not None
        teams.runtime.service.model = model
        await teams.say("log a call with Acme")
        card_activity = teams.connector.cards()[-1]
        approve = {**find_actions(card_of(card_activity), "Approve")[0]["data"]}
        await asyncio.gather(
            teams.submit(card_activity.activity_id or "", approve),
            teams.submit(card_activity.activity_id or "", approve),
        )
        texts = [m.body.get("text") or "" for m in teams.connector.messages()]

    assert len(_activities(sandbox, approve["thread_id"])) == 1
    assert len(await _audit_rows(dv_settings)) == 1
    assert sum("already decided" in t for t in texts) == 1
    assert not model.bound_tools & CRM_WRITE_TOOLS


async def test_a_crash_after_the_crm_created_the_call_does_not_duplicate_it_on_retry(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    crashes = {"left": 1}

    def crash_once(key: str) -> None:
        if crashes["left"]:
            crashes["left"] -= 1
            raise RuntimeError("simulated crash after the CRM committed")

    rep = await sign_in(dv_settings, "alex")
    async with service(dv_settings, ScriptedChatModel(steps=[calls(_log("Crash after commit"))])) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call")
    call_id = asked.proposals[0].tool_call_id
    async with service(dv_settings, ScriptedChatModel(final="Logged."), after_commit_hook=crash_once) as svc:
        with pytest.raises(RuntimeError, match="simulated crash"):
            await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])
        assert len(_activities(sandbox, asked.thread_id)) == 1  # the CRM did commit
        retried = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])

    assert retried.outcomes[0]["result"]["status"] == "done"
    assert retried.outcomes[0]["result"]["created"] is False
    assert len(_activities(sandbox, asked.thread_id)) == 1
    assert len(await _audit_rows(dv_settings)) == 1


async def test_an_opportunity_update_applied_before_a_crash_is_found_by_its_key_completed_and_audited(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    crashes = {"left": 1}

    def crash(key: str) -> None:
        if crashes["left"]:
            crashes["left"] -= 1
            raise RuntimeError("simulated crash after the CRM committed")

    before = _opportunity(sandbox, EXPANSION)
    step = f"Crash test {before['@odata.etag']}"
    model = ScriptedChatModel(
        steps=[calls(call("update_opportunity", opportunity_id=EXPANSION, next_step=step))]
    )
    rep = await sign_in(dv_settings, "alex")
    async with service(dv_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "update it")
    call_id = asked.proposals[0].tool_call_id
    key = idempotency_key(asked.thread_id, call_id)
    async with service(dv_settings, ScriptedChatModel(final="Updated."), after_commit_hook=crash) as svc:
        with pytest.raises(RuntimeError, match="simulated crash"):
            await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])
        applied = _opportunity(sandbox, EXPANSION)
        assert applied["new_copilotkey"] == key  # the writer stamped its key on the row
        retried = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])

    result = retried.outcomes[0]["result"]
    assert result["status"] == "done", result
    after = _opportunity(sandbox, EXPANSION)
    assert after["description"] == step
    assert after["@odata.etag"] == applied["@odata.etag"]  # written once
    rows = await _audit_rows(dv_settings)
    assert [r.entry.tool_call_id for r in rows] == [call_id]
    assert f'W/"{rows[0].entry.record_version_read}"' == before["@odata.etag"]


# --- invariant 4: no blind overwrite ----------------------------------------------------------------


async def test_a_change_landing_between_the_approvals_re_read_and_the_patch_is_a_412_conflict_not_overwritten(
    dv_settings: Settings, sandbox: SandboxProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The write guard's re-read matches the version the rep reviewed; the manager's change lands
    # just after it, so only the ETag the PATCH carries (If-Match) can stop the overwrite.
    from copilot.crm.dataverse import DataverseWriter

    original = DataverseWriter.update_opportunity
    landed: list[str] = []

    async def manager_changes_it_first(self: DataverseWriter, request: Any) -> Any:
        etag = _opportunity(sandbox, EXPANSION)["@odata.etag"]
        changed = webapi(
            sandbox,
            "PATCH",
            f"opportunities({EXPANSION})",
            "nestor",
            headers={"If-Match": etag},
            json={"description": f"Manager: hold {etag}"},
        )
        assert changed.status_code == 204, changed.text
        landed.append(f"Manager: hold {etag}")
        return await original(self, request)

    model = ScriptedChatModel(
        steps=[calls(call("update_opportunity", opportunity_id=EXPANSION, next_step="Rep's next step"))],
        final="Done.",
    )
    rep = await sign_in(dv_settings, "alex")
    async with service(dv_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "update it")
        monkeypatch.setattr(DataverseWriter, "update_opportunity", manager_changes_it_first)
        done = await svc.decide(
            rep.identity, rep.broker, asked.thread_id, [_approve(asked.proposals[0].tool_call_id)]
        )

    result = done.outcomes[0]["result"]
    assert result["status"] == "conflict", result
    assert result["current"]["next_step"] == landed[0]
    assert _opportunity(sandbox, EXPANSION)["description"] == landed[0]  # the manager's change stands
    assert await _audit_rows(dv_settings) == []


# --- invariant 5: edits are new input; the CRM's refusals are told plainly --------------------------


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"stage": "Daydreaming"}, "stage"),
        ({"close_date": "the thirty-first of never"}, "close_date|date"),
        ({"commission": 1}, "commission"),
    ],
)
async def test_an_edit_with_a_bad_stage_date_or_field_is_refused_and_nothing_is_written(
    dv_settings: Settings, sandbox: SandboxProcess, edit: dict[str, Any], message: str
) -> None:
    before = _opportunity(sandbox, EXPANSION)
    model = ScriptedChatModel(
        steps=[calls(call("update_opportunity", opportunity_id=EXPANSION, next_step="Edited later"))]
    )
    rep = await sign_in(dv_settings, "alex")
    async with service(dv_settings, model) as svc:
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
    assert _opportunity(sandbox, EXPANSION)["@odata.etag"] == before["@odata.etag"]
    assert await _audit_rows(dv_settings) == []


async def test_a_deal_the_rep_may_read_but_not_write_is_refused_by_the_crm_and_the_rep_is_told_plainly(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    # Globex is diego's, shared with alex: alex reads its deals; Dataverse answers his PATCH 403.
    state = sandbox.admin("GET", "/admin/export")
    globex_deal = guid_for(
        "opportunity", next(o["id"] for o in state["opportunities"] if o["account_id"] == "acc-globex")
    )
    before = webapi(sandbox, "GET", f"opportunities({globex_deal})?$select=name", "diego").json()
    model = ScriptedChatModel(
        steps=[calls(call("update_opportunity", opportunity_id=globex_deal, next_step="Not mine to change"))],
        final="Done.",
    )
    rep = await sign_in(dv_settings, "alex")
    async with service(dv_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "update the globex deal")
        assert [p.tool for p in asked.proposals] == ["update_opportunity"]
        done = await svc.decide(
            rep.identity, rep.broker, asked.thread_id, [_approve(asked.proposals[0].tool_call_id)]
        )

    result = done.outcomes[0]["result"]
    assert result["status"] != "done"
    assert result.get("code") == "permission_denied", result
    assert "nothing was written" in result["message"]
    assert "Traceback" not in result["message"]
    after = webapi(sandbox, "GET", f"opportunities({globex_deal})?$select=name", "diego").json()
    assert after["@odata.etag"] == before["@odata.etag"]
    assert await _audit_rows(dv_settings) == []


async def test_a_rejection_writes_nothing_to_the_crm_and_no_audit_row(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    rep = await sign_in(dv_settings, "alex")
    async with service(
        dv_settings, ScriptedChatModel(steps=[calls(_log("Rejected call"))], final="OK.")
    ) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call")
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": asked.proposals[0].tool_call_id, "type": "reject", "reason": "wrong account"}],
        )

    assert done.outcomes[0]["result"].get("status") != "done", done.outcomes
    assert _activities(sandbox, asked.thread_id) == []
    assert await _audit_rows(dv_settings) == []


# --- invariant 2: the rep's scope, never more -----------------------------------------------------


async def test_a_west_rep_reaches_nothing_of_an_east_account_through_sql_search_or_its_id(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    east = east_account_of_diego(sandbox)
    east_id = guid_for("account", east["id"])
    word = east["name"].split()[0]
    model = ScriptedChatModel(
        steps=[
            calls(
                call(
                    "read_query",
                    querytext=f"SELECT name, accountid FROM account WHERE accountid = '{east_id}'",
                ),
                call(
                    "read_query", querytext=f"SELECT name, accountid FROM account WHERE name LIKE '%{word}%'"
                ),
                call("search_data", query=east["name"]),
                call("search", query=east["name"]),
            ),
            calls(_log("East call", account_id=east_id)),
        ],
        final=f"Here it is: {east['name']} [{east_id}]",
    )
    rep = await sign_in(dv_settings, "alex")
    async with service(dv_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, f"tell me about {east['name']}")
        shown = asked.proposals[0].record
        done = await svc.decide(
            rep.identity, rep.broker, asked.thread_id, [_approve(asked.proposals[0].tool_call_id)]
        )

    results = _tool_results(model)
    assert results, "the reads ran"
    assert east_id not in results
    assert east["name"] not in results
    assert shown is not None
    assert shown["target"]["name"] == ""
    assert done.outcomes[0]["result"]["status"] != "done"
    assert _activities(sandbox, asked.thread_id) == []
    # The answer cites it, but no tool result showed it: it is not a verified citation.
    assert east_id not in done.citations
    assert east["name"] not in _tool_results(model)


async def test_the_commission_column_never_reaches_the_model_or_the_rep_even_when_selected_in_sql(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    state = sandbox.admin("GET", "/admin/export")
    commissions = {
        f"{o['commission']:.2f}".rstrip("0").rstrip(".")
        for o in state["opportunities"]
        if o["owner_id"] == "u-alex" and o.get("commission")
    }
    assert commissions
    model = ScriptedChatModel(
        steps=[
            calls(
                call("read_query", querytext="SELECT name, new_commission FROM opportunity"),
                call("read_query", querytext="SELECT name FROM opportunity WHERE new_commission > 0"),
            )
        ],
        final="Done.",
    )
    rep = await sign_in(dv_settings, "alex")
    async with service(dv_settings, model) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "what commission do I get on my deals")

    selected, filtered = (json.loads(text) for text in _tool_results(model).split("\n"))
    assert selected["rows"], "the rep's deals were read"
    assert {row[1] if isinstance(row, list) else row.get("new_commission") for row in selected["rows"]} == {
        None
    }
    assert filtered["rows"] == []  # a filter on the secured column is no oracle either
    sent = _everything_sent(model)
    assert [c for c in commissions if c in sent] == []
    assert [c for c in commissions if c in (result.answer or "")] == []


# --- run-time discovery -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "query_tool"),
    [({"read_query": "run_sql"}, "run_sql"), ({"search_data": None}, "read_query")],
)
async def test_the_agent_starts_and_answers_from_the_read_tools_the_crm_lists_at_run_time(
    dv_settings: Settings, sandbox: SandboxProcess, names: dict[str, str | None], query_tool: str
) -> None:
    model = ScriptedChatModel(
        steps=[
            calls(
                call(query_tool, querytext=f"SELECT name, accountid FROM account WHERE accountid = '{ACME}'")
            )
        ],
        final=f"Acme Corporation [{ACME}]",
    )
    rep = await sign_in(dv_settings, "alex")
    with knobs(sandbox, dataverse_mcp_tool_names=names):
        async with service(dv_settings, model) as svc:
            result = await svc.run_turn(rep.identity, rep.broker, None, "summarise Acme")

    listed = {new for new in names.values() if new} | {"search", "describe"}
    assert listed <= model.bound_tools
    assert not model.bound_tools & {old for old in names} - listed
    assert not model.bound_tools & CRM_WRITE_TOOLS
    assert "Acme Corporation" in _tool_results(model)
    assert ACME in result.citations


# --- bounded: throttling -----------------------------------------------------------------------------


async def test_a_write_throttled_for_a_moment_is_retried_after_retry_after_and_written_once(
    database_url: str, sandbox: SandboxProcess
) -> None:
    from copilot.middleware.resilience import reset_breakers

    reset_breakers()
    # Retries may wait as long as the CRM's Retry-After (1-2 s in a one-second window).
    settings = dataverse_settings(database_url, sandbox, COPILOT_TOOL_RETRY_MAX_DELAY=3)
    await prepare_database(settings)
    rep = await sign_in(settings, "alex")
    async with service(
        settings, ScriptedChatModel(steps=[calls(_log("Throttled once"))], final="Logged.")
    ) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call")
        call_id = asked.proposals[0].tool_call_id
        # One request a second: the write guard's read passes, its create gets 429 + Retry-After.
        with knobs(sandbox, dataverse_request_budget=1, dataverse_window_seconds=1):
            done = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])

    assert done.outcomes[0]["result"]["status"] == "done", done.outcomes
    assert len(_activities(sandbox, asked.thread_id)) == 1
    assert len(await _audit_rows(settings)) == 1


async def test_a_write_the_crm_keeps_throttling_gets_the_clear_unavailable_message_and_stays_pending(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    rep = await sign_in(dv_settings, "alex")
    async with service(
        dv_settings, ScriptedChatModel(steps=[calls(_log("Throttled call"))], final="Logged.")
    ) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call")
        call_id = asked.proposals[0].tool_call_id
        with knobs(sandbox, dataverse_request_budget=1, dataverse_window_seconds=600):
            throttled = await svc.decide(rep.identity, rep.broker, asked.thread_id, [_approve(call_id)])
            still = await svc.pending(rep.identity, asked.thread_id)

    assert _activities(sandbox, asked.thread_id) == []
    text = json.dumps(throttled.outcomes) + (throttled.answer or "")
    assert "unavailable" in text.lower(), text
    assert "Traceback" not in text
    assert "0x8007" not in text
    assert [p.tool_call_id for p in still.proposals] == [call_id]
