"""PostgreSQL: embedded by default, migrations, and a pool that survives dropped connections."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest

from copilot.errors import MigrationError
from copilot.persistence.database import connect
from copilot.persistence.embedded import resolve_database_url
from copilot.persistence.migrations import Migration, assert_schema_current, load_migrations, migrate
from copilot.persistence.pool import open_pool
from copilot.settings import Settings

pytestmark = pytest.mark.integration


async def _count_rows(conn: psycopg.AsyncConnection[Any], table: str) -> int:
    cur = await conn.execute(f"SELECT count(*) AS n FROM {table}")
    row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def test_migrations_apply_once_and_a_second_run_applies_nothing(db_conn):
    first = await migrate(db_conn)
    second = await migrate(db_conn)

    assert [m.version for m in first.applied] == [m.version for m in load_migrations()]
    assert second.applied == ()
    assert await _count_rows(db_conn, "schema_migrations") == len(load_migrations())
    assert await _count_rows(db_conn, "threads") == 0


async def test_concurrent_migrators_apply_each_migration_exactly_once(database_url):
    conns = [await psycopg.AsyncConnection.connect(database_url, autocommit=True) for _ in range(4)]
    try:
        reports = await asyncio.gather(*(migrate(c) for c in conns))
    finally:
        for c in conns:
            await c.close()

    applied = [m.version for r in reports for m in r.applied]
    assert sorted(applied) == [m.version for m in load_migrations()]


async def test_a_migration_edited_after_it_was_applied_is_refused(db_conn):
    await migrate(db_conn)
    original = load_migrations()
    tampered = (Migration(1, original[0].name, original[0].sql + "\n-- edited"), *original[1:])

    with pytest.raises(MigrationError, match="changed after it was applied"):
        await migrate(db_conn, tampered)


# Deployed databases have these applied: moving a file must keep its version, name and bytes.
_SHIPPED = {
    3: ("bot", "teams", "18a6dc2c89663681073db97d51a1ebb082cbffd9a8f2e612314eabe3068db3ee"),
    4: ("bot", "card_claims", "e66ff749ca5f9828569b0e9ae22659264197fc2b08e7fde32932570b937a46bb"),
    5: (
        "functions",
        "inbound_activities",
        "4cfd2d405ca512bea8c052390fd353f2839fe11c91619c211332bb179c17dd16",
    ),
}


def test_each_layer_ships_its_own_tables_in_one_sequence_of_migrations():
    from importlib import resources

    every = load_migrations()
    assert [m.version for m in every] == list(range(1, len(every) + 1))
    by_version = {m.version: m for m in every}
    for version, (package, name, checksum) in _SHIPPED.items():
        assert (by_version[version].name, by_version[version].checksum) == (name, checksum)
        assert (resources.files(package) / "sql" / f"{version:04d}_{name}.sql").is_file()
    copilot_only = {e.name for e in (resources.files("copilot.persistence") / "sql").iterdir()}
    assert not any(name.startswith(("0003_", "0004_", "0005_")) for name in copilot_only)
    assert {m.version for m in load_migrations(("copilot.persistence", "bot", "functions"))} == set(
        by_version
    )
    # A layer left out leaves a gap, which is refused rather than migrated around.
    with pytest.raises(MigrationError, match="without gaps"):
        load_migrations(("copilot.persistence", "bot"))
    with pytest.raises(MigrationError, match="not installed"):
        load_migrations(("copilot.persistence", "no_such_layer"))


async def test_request_paths_refuse_a_database_missing_one_layers_migrations(db_conn):
    await migrate(db_conn)
    await db_conn.execute("DELETE FROM schema_migrations WHERE version = 5")

    with pytest.raises(MigrationError, match=r"missing migrations \[5\]"):
        await assert_schema_current(db_conn)


async def test_request_paths_refuse_a_database_that_was_not_migrated(db_conn):
    with pytest.raises(MigrationError, match="python -m copilot db migrate"):
        await assert_schema_current(db_conn)
    await migrate(db_conn)
    await assert_schema_current(db_conn)


def test_db_migrate_command_applies_then_reports_nothing_pending(database_url, project_root):
    env = {**os.environ, "DATABASE_URL": database_url}
    run = [sys.executable, "-m", "copilot", "db", "migrate", "--json"]

    first = subprocess.run(run, env=env, cwd=project_root, capture_output=True, text=True, check=True)
    second = subprocess.run(run, env=env, cwd=project_root, capture_output=True, text=True, check=True)

    assert [m["version"] for m in json.loads(first.stdout)["applied"]] == [
        m.version for m in load_migrations()
    ]
    assert json.loads(second.stdout) == {"applied": [], "current_version": len(load_migrations())}


def test_db_migrate_command_reports_an_unreachable_database_clearly(project_root):
    env = {**os.environ, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"}
    result = subprocess.run(
        [sys.executable, "-m", "copilot", "db", "migrate"],
        env=env,
        cwd=project_root,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: could not connect to PostgreSQL")
    assert "Traceback" not in result.stderr


async def test_pool_replaces_connections_the_server_dropped(database_url, db_conn):
    settings = Settings(COPILOT_DB_POOL_MIN=2, COPILOT_DB_POOL_MAX=2)
    pool = await open_pool(database_url, settings)
    try:
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT pg_backend_pid() AS pid")
            row = await cur.fetchone()
            assert row is not None
            before = row["pid"]
        # What an idle-connection reaper (or a serverless pause) does to the pool.
        await db_conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT pg_backend_pid() AS pid")
            row = await cur.fetchone()
            assert row is not None
            assert row["pid"] != before
    finally:
        await pool.close()


async def test_pool_never_creates_server_side_prepared_statements(database_url):
    pool = await open_pool(database_url, Settings(COPILOT_DB_POOL_MIN=1, COPILOT_DB_POOL_MAX=1))
    try:
        async with pool.connection() as conn:
            for i in range(20):
                await conn.execute("SELECT %s::int AS n", (i,))
            cur = await conn.execute("SELECT count(*) AS n FROM pg_prepared_statements")
            row = await cur.fetchone()
            assert row is not None
            assert row["n"] == 0
    finally:
        await pool.close()


_ATTACH = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from copilot.persistence.embedded import start_embedded, embedded_server_pid
    pgdata = Path(sys.argv[1])
    url = start_embedded(pgdata)
    print(embedded_server_pid(pgdata), flush=True)
    sys.stdin.read()  # stay attached until the test closes our stdin
    """
)


def test_two_processes_starting_embedded_postgres_at_once_share_one_server(tmp_path, project_root):
    pgdata = tmp_path / "pgdata"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _ATTACH, str(pgdata)],
            cwd=project_root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        pids = {int(p.stdout.readline()) for p in procs if p.stdout is not None}
        servers = [
            proc
            for proc in psutil.process_iter(attrs=["name", "cmdline"])
            if proc.info["name"] == "postgres"
            and str(pgdata.resolve()) in " ".join(proc.info["cmdline"] or [])
        ]
        assert len(pids) == 1
        assert len(servers) == 1
        assert servers[0].pid in pids
    finally:
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
        for p in procs:
            p.wait(timeout=30)
    # The last process to detach stops the server it started.
    assert not psutil.pid_exists(next(iter(pids))) or psutil.Process(next(iter(pids))).status() == "zombie"


def test_settings_default_to_embedded_postgres_under_the_data_dir(tmp_path):
    settings = Settings(COPILOT_DATA_DIR=tmp_path)
    assert settings.database_url is None
    assert settings.embedded_pgdata == Path(tmp_path) / "postgres"


async def test_the_embedded_default_migrates_as_the_owner_but_the_app_pool_logs_in_unprivileged(tmp_path):
    settings = Settings(DATABASE_URL=None, COPILOT_DATA_DIR=tmp_path, COPILOT_DB_POOL_MIN=1)
    async with connect(settings) as owner:
        await migrate(owner)
        cur = await owner.execute("SELECT rolsuper FROM pg_roles WHERE rolname = session_user")
        row = await cur.fetchone()
        assert row is not None
        assert row["rolsuper"] is True, "migrations run as the embedded owner"

    pool = await open_pool(resolve_database_url(settings), settings)
    try:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT session_user AS login, current_user AS acting, r.rolsuper, r.rolcreaterole,"
                " pg_has_role(session_user, 'postgres', 'MEMBER') AS reaches_owner"
                " FROM pg_roles AS r WHERE r.rolname = session_user"
            )
            row = await cur.fetchone()
            await conn.execute("RESET ROLE")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute("UPDATE audit_log SET tool = 'x'")
    finally:
        await pool.close()
    assert row == {
        "login": "copilot_app_login",
        "acting": "copilot_app",
        "rolsuper": False,
        "rolcreaterole": False,
        "reaches_owner": False,
    }


async def _backend_pid(conn: psycopg.AsyncConnection[Any]) -> int:
    cur = await conn.execute("SELECT pg_backend_pid() AS pid")
    row = await cur.fetchone()
    assert row is not None
    return int(row["pid"])


async def _terminate(admin: psycopg.AsyncConnection[Any], *pids: int) -> None:
    await admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (list(pids),))


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pool's check round trips (``AsyncConnectionPool.check_connection``), as backend pids."""
    from psycopg_pool import AsyncConnectionPool

    pids: list[int] = []
    original = AsyncConnectionPool.check_connection

    async def check_connection(conn: Any) -> None:
        pids.append(conn.info.backend_pid)
        await original(conn)

    monkeypatch.setattr(AsyncConnectionPool, "check_connection", staticmethod(check_connection))
    return pids


async def test_a_connection_used_moments_ago_is_handed_out_without_a_check_round_trip(
    database_url, round_trips
):
    pool = await open_pool(database_url, Settings(COPILOT_DB_POOL_MIN=1, COPILOT_DB_POOL_MAX=1))
    try:
        for _ in range(50):
            async with pool.connection() as conn:
                await conn.execute("SELECT 1")
    finally:
        await pool.close()
    assert len(round_trips) == 1, "only the connection's first checkout is checked"


async def test_a_connection_killed_while_idle_past_the_threshold_is_replaced_without_an_error(
    database_url, db_conn, round_trips
):
    pool = await open_pool(
        database_url, Settings(COPILOT_DB_POOL_MIN=1, COPILOT_DB_POOL_MAX=1), check_idle_seconds=0.3
    )
    try:
        async with pool.connection() as conn:
            before = await _backend_pid(conn)
        # What an idle-connection reaper (or a serverless pause) does, after the threshold.
        await _terminate(db_conn, before)
        await asyncio.sleep(0.4)
        async with pool.connection() as conn:
            after = await _backend_pid(conn)
    finally:
        await pool.close()
    assert after != before
    assert before in round_trips, "the idle connection was checked, found dead and replaced"


async def test_once_a_connection_breaks_the_others_are_checked_before_they_are_used_again(
    database_url, db_conn, round_trips
):
    # A restart or failover kills every connection at once, even ones used a moment ago.
    pool = await open_pool(
        database_url, Settings(COPILOT_DB_POOL_MIN=2, COPILOT_DB_POOL_MAX=2), check_idle_seconds=600
    )
    try:
        async with pool.connection() as a, pool.connection() as b:
            pids = {await _backend_pid(a), await _backend_pid(b)}
        await _terminate(db_conn, *pids)
        # The first (hot, so unchecked) connection fails its query: that is the one error.
        with pytest.raises(psycopg.OperationalError):
            async with pool.connection() as conn:
                await conn.execute("SELECT 1")
        # Its sibling, just as hot and just as dead, is checked and replaced first.
        async with pool.connection() as conn:
            after = await _backend_pid(conn)
    finally:
        await pool.close()
    assert after not in pids
