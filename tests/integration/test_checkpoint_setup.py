"""`db migrate` sets up LangGraph's tables, and the app role can use them through the pool."""

from __future__ import annotations

import asyncio
import operator
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import psycopg
import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool
from typing_extensions import TypedDict

from copilot.errors import DatabaseError
from copilot.persistence import threads
from copilot.persistence.checkpoint import make_saver_and_store, setup_langgraph
from copilot.persistence.migrations import migrate
from copilot.persistence.pool import open_pool
from copilot.persistence.retention import apply_retention, plan_retention
from copilot.settings import Settings

pytestmark = pytest.mark.integration

LANGGRAPH_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "store")


async def _scalar(conn: psycopg.AsyncConnection[Any], query: str, params: Any = None) -> Any:
    cur = await conn.execute(query, params)
    row = await cur.fetchone()
    assert row is not None
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


@pytest.fixture
async def set_up_url(database_url: str, db_conn: psycopg.AsyncConnection[Any]) -> str:
    await migrate(db_conn)
    await setup_langgraph(database_url)
    return database_url


@pytest.fixture
async def app_pool(set_up_url: str) -> AsyncIterator[AsyncConnectionPool[psycopg.AsyncConnection[DictRow]]]:
    pool = await open_pool(set_up_url, Settings(COPILOT_DB_POOL_MIN=1, COPILOT_DB_POOL_MAX=4))
    try:
        yield pool
    finally:
        await pool.close()


async def test_migrations_and_langgraph_setup_can_run_again_without_changes(database_url, db_conn):
    await migrate(db_conn)
    await setup_langgraph(database_url)
    second = await migrate(db_conn)
    await setup_langgraph(database_url)

    assert second.applied == ()
    for table in LANGGRAPH_TABLES:
        assert await _scalar(db_conn, "SELECT to_regclass(%s) IS NOT NULL", (table,))


async def test_concurrent_langgraph_setups_all_succeed(database_url, db_conn):
    await migrate(db_conn)

    await asyncio.gather(*(setup_langgraph(database_url) for _ in range(3)))

    assert await _scalar(db_conn, "SELECT count(*) FROM checkpoint_migrations") > 0


async def test_pool_connections_act_as_the_app_role(app_pool):
    async with app_pool.connection() as conn:
        assert await _scalar(conn, "SELECT current_user") == "copilot_app"


async def test_the_app_role_cannot_create_tables(app_pool):
    async with app_pool.connection() as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute("CREATE TABLE sneaky (id int)")


async def test_saver_and_store_on_the_app_role_pool_put_and_get(app_pool):
    saver, store = make_saver_and_store(app_pool)
    config: Any = {"configurable": {"thread_id": "t" * 32, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": ["hello"]}
    checkpoint["channel_versions"] = {"messages": 1}

    saved = await saver.aput(config, checkpoint, {"source": "input", "step": -1}, {"messages": 1})
    await saver.aput_writes(saved, [("messages", "pending")], task_id="task-1")
    restored = await saver.aget_tuple(config)
    await store.aput(("rep", "alex"), "prefs", {"tone": "brief"})
    item = await store.aget(("rep", "alex"), "prefs")
    await saver.adelete_thread("t" * 32)

    assert restored is not None
    assert restored.checkpoint["id"] == checkpoint["id"]
    assert restored.checkpoint["channel_values"] == {"messages": ["hello"]}
    assert restored.pending_writes == [("task-1", "messages", "pending")]
    assert item is not None
    assert item.value == {"tone": "brief"}
    assert await saver.aget_tuple(config) is None


async def test_pool_refuses_a_missing_app_role_on_a_migrated_database(set_up_url):
    settings = Settings(COPILOT_DB_APP_ROLE="copilot_typo")
    with pytest.raises(DatabaseError, match="copilot_typo"):
        await open_pool(set_up_url, settings, open_timeout=5)


async def test_pool_without_an_app_role_keeps_the_login_user(set_up_url):
    pool = await open_pool(set_up_url, Settings(COPILOT_DB_APP_ROLE=""))
    try:
        async with pool.connection() as conn:
            assert await _scalar(conn, "SELECT current_user") != "copilot_app"
    finally:
        await pool.close()


def test_db_migrate_command_also_sets_up_langgraph_and_grants(database_url, project_root):
    env = {**os.environ, "DATABASE_URL": database_url}
    for _ in range(2):
        subprocess.run(
            [sys.executable, "-m", "copilot", "db", "migrate"],
            env=env,
            cwd=project_root,
            capture_output=True,
            text=True,
            check=True,
        )

    with psycopg.connect(database_url) as conn:
        grants = conn.execute(
            "SELECT table_name, string_agg(privilege_type, ',' ORDER BY privilege_type)"
            " FROM information_schema.role_table_grants WHERE grantee = 'copilot_app'"
            " GROUP BY table_name"
        ).fetchall()
    by_table: dict[str, str] = dict(grants)
    assert by_table["checkpoints"] == "DELETE,INSERT,SELECT,UPDATE"
    assert by_table["store"] == "DELETE,INSERT,SELECT,UPDATE"
    assert by_table["audit_log"] == "INSERT,SELECT"
    assert by_table["schema_migrations"] == "SELECT"


def _extend(state: list[str], writes: Any) -> list[str]:
    # A DeltaChannel reducer folds a batch of writes at once.
    return [*state, *(item for write in writes for item in write)]


class _DeltaState(TypedDict):
    items: Annotated[list[str], DeltaChannel(_extend)]


class _PlainState(TypedDict):
    items: Annotated[list[str], operator.add]


async def test_retention_skips_delta_channel_threads_and_still_expires_them(app_pool, db_conn):
    """keep_latest refuses a thread whose state is replayed from history (DeltaChannel):
    retention leaves it whole and reports it, prunes the plain thread beside it, and an
    idle delta thread is still deleted outright."""

    def graph(state: type[Any], saver: Any) -> Any:
        builder = StateGraph(state)
        builder.add_node("step", lambda s: {"items": ["step"]})
        builder.add_edge(START, "step")
        builder.add_edge("step", END)
        return builder.compile(checkpointer=saver)

    saver, _ = make_saver_and_store(app_pool)
    async with app_pool.connection() as conn:
        delta, idle_delta, plain = [
            await threads.create_thread(conn, tenant_id="tenant-ret", owner_aad_id=f"aad-{name}")
            for name in ("delta", "idle-delta", "plain")
        ]
    for thread_id, state in ((delta, _DeltaState), (idle_delta, _DeltaState), (plain, _PlainState)):
        for turn in ("one", "two"):
            await graph(state, saver).ainvoke({"items": [turn]}, {"configurable": {"thread_id": thread_id}})
    await db_conn.execute(
        "UPDATE threads SET last_active_at = %s WHERE thread_id = %s",
        (
            datetime.now(UTC) - timedelta(days=40),
            idle_delta,
        ),
    )
    delta_before = await _scalar(db_conn, "SELECT count(*) FROM checkpoints WHERE thread_id = %s", (delta,))
    assert delta_before > 2

    async with app_pool.connection() as conn:
        plan = await plan_retention(conn, saver, older_than=timedelta(days=30), now=datetime.now(UTC))
        report = await apply_retention(conn, saver, older_than=timedelta(days=30), now=datetime.now(UTC))

    assert [t.thread_id for t in plan.skipped_threads] == [delta], (
        "status says the delta thread is kept whole"
    )
    assert report.expired_threads == [idle_delta]
    assert report.skipped_threads == [delta]
    assert report.pruned_threads == [plain]
    assert (
        await _scalar(db_conn, "SELECT count(*) FROM checkpoints WHERE thread_id = %s", (delta,))
        == delta_before
    )
    for table in ("threads", *LANGGRAPH_TABLES[:3]):
        assert (
            await _scalar(db_conn, f"SELECT count(*) FROM {table} WHERE thread_id = %s", (idle_delta,)) == 0
        )
    config: Any = {"configurable": {"thread_id": delta}}
    kept = await graph(_DeltaState, saver).aget_state(config)
    assert kept.values == {"items": ["one", "step", "two", "step"]}
    pruned = await graph(_PlainState, saver).aget_state({"configurable": {"thread_id": plain}})
    assert pruned.values == {"items": ["one", "step", "two", "step"]}
