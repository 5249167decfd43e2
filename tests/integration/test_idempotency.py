"""Exactly-once writes: one execution per thread_id:tool_call_id, whatever repeats it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from copilot.errors import IdempotencyMismatch
from copilot.persistence import audit, rejections
from copilot.persistence.idempotency import args_hash, claim, idempotency_key
from copilot.persistence.migrations import migrate
from copilot.persistence.pool import open_pool
from copilot.settings import Settings

pytestmark = pytest.mark.integration

THREAD = "thread-" + "q" * 25
ARGS = {"opportunity_id": "opp-001", "stage": "Negotiation", "amount": 125000.5}


class Boom(RuntimeError):
    """The CRM call failed."""


@pytest.fixture
async def app_pool(
    database_url: str, db_conn: psycopg.AsyncConnection[Any]
) -> AsyncIterator[AsyncConnectionPool[psycopg.AsyncConnection[DictRow]]]:
    await migrate(db_conn)
    pool = await open_pool(database_url, Settings(COPILOT_DB_POOL_MIN=1, COPILOT_DB_POOL_MAX=12))
    try:
        yield pool
    finally:
        await pool.close()


def claim_for(
    pool: Any, tool_call_id: str = "call-1", args: dict[str, Any] | None = None, **over: Any
) -> Any:
    params: dict[str, Any] = {
        "key": idempotency_key(THREAD, tool_call_id),
        "tenant_id": "tenant-a",
        "rep_aad_id": "rep-alex",
        "thread_id": THREAD,
        "tool_call_id": tool_call_id,
        "tool": "update_opportunity",
        "args_hash": args_hash(ARGS if args is None else args),
    }
    return claim(pool, **{**params, **over})


async def execute_once(pool: Any, calls: list[int], *, delay: float = 0.0, **kwargs: Any) -> dict[str, Any]:
    """What a write tool does: return the stored result or execute and store it."""
    async with claim_for(pool, **kwargs) as c:
        if c.stored_result is not None:
            return dict(c.stored_result)
        calls.append(1)
        await asyncio.sleep(delay)  # the CRM round trip, while the key is held
        result = {"id": "opp-001", "version": len(calls), "status": "updated"}
        await c.complete(result)
        return result


async def crash_inside_claim(pool: Any, *, began: bool = False, result: dict[str, Any] | None = None) -> None:
    """A write that fails (CRM timeout, lost connection) after doing some of its work."""
    async with claim_for(pool) as c:
        assert c.stored_result is None
        if began:
            await c.begin({"expected_version": 3})
        if result is not None:
            await c.complete(result)
        raise Boom("the write failed before our commit")


async def _key_rows(pool: Any) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT key, status, result FROM idempotency_keys ORDER BY key")
        return list(await cur.fetchall())


def test_args_hash_ignores_key_order_but_not_values():
    assert args_hash({"a": 1, "b": {"c": 2, "d": 3}}) == args_hash({"b": {"d": 3, "c": 2}, "a": 1})
    assert args_hash({"a": 1}) != args_hash({"a": 2})
    assert len(args_hash({})) == 64


async def test_a_completed_claim_returns_the_stored_result_to_every_repeat(app_pool):
    calls: list[int] = []

    first = await execute_once(app_pool, calls)
    second = await execute_once(app_pool, calls)

    assert calls == [1]
    assert second == first
    assert await _key_rows(app_pool) == [
        {"key": f"{THREAD}:call-1", "status": "done", "result": first},
    ]


async def test_concurrent_claims_of_one_key_execute_the_write_exactly_once(app_pool):
    calls: list[int] = []

    results = await asyncio.gather(*(execute_once(app_pool, calls, delay=0.05) for _ in range(10)))

    assert calls == [1]
    assert all(r == results[0] for r in results)


async def test_different_tool_calls_are_independent(app_pool):
    calls: list[int] = []

    await asyncio.gather(*(execute_once(app_pool, calls, tool_call_id=f"call-{n}") for n in range(3)))

    assert len(calls) == 3
    assert [r["status"] for r in await _key_rows(app_pool)] == ["done"] * 3


async def test_the_same_key_with_different_arguments_is_refused_not_written(app_pool):
    calls: list[int] = []
    await execute_once(app_pool, calls)

    with pytest.raises(IdempotencyMismatch, match="different arguments") as raised:
        await execute_once(app_pool, calls, args={**ARGS, "amount": 1})

    assert calls == [1]
    assert raised.value.fields["key"] == f"{THREAD}:call-1"


async def test_the_same_key_for_a_different_tool_is_refused(app_pool):
    await execute_once(app_pool, [])
    with pytest.raises(IdempotencyMismatch):
        await execute_once(app_pool, [], tool="log_activity")


async def test_a_failed_write_rolls_back_so_a_retry_executes(app_pool):
    with pytest.raises(Boom):
        await crash_inside_claim(app_pool)
    assert await _key_rows(app_pool) == []

    calls: list[int] = []
    result = await execute_once(app_pool, calls)

    assert calls == [1]
    assert result["status"] == "updated"


async def test_a_failure_after_completion_keeps_the_completed_result(app_pool):
    # Completion is the write's own commit: a later failure of the caller cannot undo it.
    with pytest.raises(Boom):
        await crash_inside_claim(app_pool, began=True, result={"id": "opp-001"})
    assert await _key_rows(app_pool) == [
        {"key": f"{THREAD}:call-1", "status": "done", "result": {"id": "opp-001"}}
    ]
    calls: list[int] = []
    assert await execute_once(app_pool, calls) == {"id": "opp-001"}
    assert calls == []


async def test_a_failure_after_the_backend_call_began_leaves_the_key_in_flight_with_its_plan(app_pool):
    with pytest.raises(Boom):
        await crash_inside_claim(app_pool, began=True)
    assert await _key_rows(app_pool) == [{"key": f"{THREAD}:call-1", "status": "in_flight", "result": None}]

    async with claim_for(app_pool) as c:
        assert c.stored_result is None
        assert c.recovering
        assert c.in_flight_plan == {"expected_version": 3}
        await c.begin({"ignored": True})  # a retry keeps the first plan
        stored = await c.complete({"id": "opp-001", "recovered": True})
    assert stored == {"id": "opp-001", "recovered": True}
    async with app_pool.connection() as conn:
        cur = await conn.execute("SELECT status, plan, attempts FROM idempotency_keys")
        assert await cur.fetchall() == [{"status": "done", "plan": {"expected_version": 3}, "attempts": 2}]


async def test_a_holder_whose_connection_dies_releases_the_key_and_leaves_it_in_flight(app_pool, db_conn):
    began = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with claim_for(app_pool) as c:
            await c.begin({"expected_version": 3})
            began.set()
            await release.wait()

    task = asyncio.create_task(holder())
    await began.wait()
    # What a kill -9 does to the holder's sessions: the server ends them.
    await db_conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    async with claim_for(app_pool) as c:
        assert c.recovering
        await c.complete({"id": "opp-001"})
    release.set()
    await asyncio.gather(task, return_exceptions=True)  # its connections are gone


async def test_a_claim_left_without_completing_leaves_no_pending_row(app_pool):
    async with claim_for(app_pool) as c:
        assert c.stored_result is None
    assert await _key_rows(app_pool) == []


async def test_a_repeat_cannot_complete_again(app_pool):
    await execute_once(app_pool, [])
    async with claim_for(app_pool) as c:
        assert c.stored_result is not None
        with pytest.raises(RuntimeError, match="already completed"):
            await c.complete({"id": "other"})


async def test_a_key_that_does_not_match_its_thread_and_tool_call_is_refused(app_pool):
    with pytest.raises(ValueError, match="thread_id:tool_call_id"):
        async with claim_for(app_pool, key="something-else"):
            pass


async def test_the_audit_row_commits_and_rolls_back_with_the_key(app_pool, monkeypatch):
    now = datetime.now(UTC)
    entry = audit.AuditEntry(
        tenant_id="tenant-a",
        rep_aad_id="rep-alex",
        thread_id=THREAD,
        tool_call_id="call-1",
        tool="update_opportunity",
        target_record_id="opp-001",
        record_version_read=3,
        original_args=ARGS,
        edited_args=None,
        decision="approve",
        crm_response={"id": "opp-001", "version": 4},
        proposed_at=now,
        decided_at=now,
        executed_at=now,
    )
    from copilot.persistence import idempotency

    # The key's 'done' update fails after the audit row was appended: both roll back.
    monkeypatch.setattr(
        idempotency,
        "_DONE_SQL",
        "UPDATE idempotency_keys SET status = 'nonsense', result = %s WHERE key = %s",
    )
    async with claim_for(app_pool) as c:
        await c.begin({"expected_version": 3})
        with pytest.raises(psycopg.errors.CheckViolation):
            await c.complete(entry.crm_response, entry)
    async with app_pool.connection() as conn:
        assert await audit.list_entries(conn) == []
    assert [r["status"] for r in await _key_rows(app_pool)] == ["in_flight"]
    monkeypatch.undo()

    async with claim_for(app_pool) as c:
        assert c.recovering
        stored = await c.complete(entry.crm_response, entry)
    async with app_pool.connection() as conn:
        listed = await audit.list_entries(conn)
        assert [e.entry for e in listed] == [entry]
        assert stored == {**entry.crm_response, "audit_id": listed[0].id}
        assert (await audit.verify(conn)).ok


async def test_a_rejection_is_recorded_once_and_a_repeat_returns_the_same_id(app_pool):
    params: dict[str, Any] = {
        "tenant_id": "tenant-a",
        "rep_aad_id": "rep-alex",
        "thread_id": THREAD,
        "tool_call_id": "call-9",
        "tool": "update_opportunity",
        "args": {"b": [1, 2.5], "a": "x"},
        "reason": "wrong stage",
    }
    async with app_pool.connection() as conn:
        first = await rejections.record(conn, **params)
        second = await rejections.record(conn, **{**params, "args": {"a": "x", "b": [1, 2.5]}})
        with pytest.raises(IdempotencyMismatch):
            await rejections.record(conn, **{**params, "reason": "changed my mind"})
        listed = await rejections.list_rejections(conn, thread_id=THREAD)

    assert first == second
    assert [(r.id, r.reason, r.args) for r in listed] == [(first, "wrong stage", {"a": "x", "b": [1, 2.5]})]
