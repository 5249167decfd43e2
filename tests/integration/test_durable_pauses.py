"""A pause (pending approval) is in PostgreSQL before the rep can see it, however slowly
checkpoints are written, and an approved write runs only once, after it.

The runner streams with ``durability="exit"`` (one checkpoint when the run stops; see
``runner._stream``). These tests slow every checkpoint write down and check, from a
connection of their own (what another process would see), that nothing a
rep is shown, or that a write depends on, is still in flight when ``run_turn`` / ``decide``
return or when the write is sent to the CRM.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row

from copilot.settings import Settings
from copilot.tools.crm_client import CrmGateway
from tests.support.copilot_env import service, sign_in
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls

pytestmark = pytest.mark.integration

SLOW = 0.15


@pytest.fixture
def slow_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every checkpoint and pending-write save takes ``SLOW`` seconds longer."""
    aput, aput_writes = AsyncPostgresSaver.aput, AsyncPostgresSaver.aput_writes

    async def slow_aput(self: AsyncPostgresSaver, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(SLOW)
        return await aput(self, *args, **kwargs)

    async def slow_aput_writes(self: AsyncPostgresSaver, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(SLOW)
        return await aput_writes(self, *args, **kwargs)

    monkeypatch.setattr(AsyncPostgresSaver, "aput", slow_aput)
    monkeypatch.setattr(AsyncPostgresSaver, "aput_writes", slow_aput_writes)


async def _durable(settings: Settings, thread_id: str) -> tuple[set[str], list[str]]:
    """What another process reads for the thread now: the tool call ids its latest
    checkpoint waits on (interrupts), and the ids of the tool results it holds."""
    assert settings.database_url is not None
    async with await psycopg.AsyncConnection.connect(
        settings.database_url.get_secret_value(), autocommit=True, row_factory=dict_row
    ) as conn:
        saved = await AsyncPostgresSaver(conn).aget_tuple({"configurable": {"thread_id": thread_id}})
    assert saved is not None
    waiting = {
        str(interrupt.value["tool_call_id"])
        for _, channel, value in saved.pending_writes or []
        if channel == "__interrupt__"
        for interrupt in value
        if isinstance(interrupt.value, dict)
    }
    messages = saved.checkpoint["channel_values"].get("messages", [])
    results = [m.tool_call_id for m in messages if getattr(m, "type", "") == "tool"]
    return waiting, results


async def test_a_pause_is_durable_before_the_rep_is_shown_it_and_the_write_runs_after_it(
    copilot_settings: Settings, sandbox: SandboxProcess, slow_checkpoints: None, monkeypatch
):
    log = call("log_activity", type="call", subject="Durable", notes="n", account_id="acc-acme")
    model = ScriptedChatModel(steps=[calls(call("get_account", account_id="acc-acme")), calls(log)])
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call with Acme")
        # The moment the rep could see the proposal, another process finds it pending.
        assert [p.tool for p in asked.proposals] == ["log_activity"]
        call_id = asked.proposals[0].tool_call_id
        waiting, _ = await _durable(copilot_settings, asked.thread_id)
        assert waiting == {call_id}

        # When the approved write goes to the CRM, its pause is durable, and no result of
        # it is recorded anywhere yet.
        seen_at_write: list[tuple[set[str], list[str]]] = []
        original = CrmGateway.call

        async def watching(self: CrmGateway, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            if tool == "upsert_activity":
                seen_at_write.append(await _durable(copilot_settings, asked.thread_id))
            return await original(self, tool, arguments)

        monkeypatch.setattr(CrmGateway, "call", watching)
        done = await svc.decide(
            rep.identity, rep.broker, asked.thread_id, [{"tool_call_id": call_id, "type": "approve"}]
        )

    assert len(seen_at_write) == 1
    waiting_then, results_then = seen_at_write[0]
    assert waiting_then == {call_id}
    assert call_id not in results_then
    # Once decide returns, its outcome is durable too.
    assert done.writes[call_id].status == "done"
    waiting, results = await _durable(copilot_settings, asked.thread_id)
    assert waiting == set()
    assert results.count(call_id) == 1
    exported = [
        a
        for a in sandbox.admin("GET", "/admin/export")["activities"]
        if str(a["external_id"]).startswith(f"{asked.thread_id}:")
    ]
    assert len(exported) == 1
