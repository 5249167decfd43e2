"""The audit log is append-only for the app, guarded even from its owner, and tamper-evident."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from copilot.errors import AuditTamperDetected
from copilot.persistence import audit
from copilot.persistence.audit import AuditEntry
from copilot.persistence.migrations import migrate
from copilot.persistence.pool import open_pool
from copilot.settings import Settings

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 4, 9, 30, 15, 123456, tzinfo=UTC)


def make_entry(n: int = 1, **overrides: Any) -> AuditEntry:
    entry = AuditEntry(
        tenant_id="tenant-a",
        rep_aad_id="rep-alex",
        thread_id="thread-" + "x" * 24,
        tool_call_id=f"call-{n}",
        tool="log_activity",
        target_record_id=f"acc-{n:03d}",
        record_version_read=n,
        original_args={"account_id": f"acc-{n:03d}", "subject": "Call", "minutes": 30},
        edited_args=None,
        decision="approve",
        crm_response={"id": f"act-{n}", "version": 1},
        proposed_at=T0,
        decided_at=T0 + timedelta(seconds=20),
        executed_at=T0 + timedelta(seconds=21),
        trace_url=None,
    )
    return replace(entry, **overrides)


@pytest.fixture
async def migrated(db_conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncConnection[Any]:
    """The owner's (superuser's) connection to a migrated database."""
    await migrate(db_conn)
    return db_conn


@pytest.fixture
async def app_pool(
    database_url: str, migrated: psycopg.AsyncConnection[Any]
) -> AsyncIterator[AsyncConnectionPool[psycopg.AsyncConnection[DictRow]]]:
    pool = await open_pool(database_url, Settings(COPILOT_DB_POOL_MIN=1, COPILOT_DB_POOL_MAX=20))
    try:
        yield pool
    finally:
        await pool.close()


async def _as_owner_without_triggers(conn: psycopg.AsyncConnection[Any], statement: str) -> None:
    # What someone with the owner's rights would have to do to get past the triggers.
    await conn.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
    try:
        await conn.execute(statement)
    finally:
        await conn.execute("ALTER TABLE audit_log ENABLE TRIGGER USER")


async def test_an_intact_chain_verifies(migrated):
    ids = [await audit.append(migrated, make_entry(n)) for n in range(1, 4)]

    report = await audit.verify(migrated)

    assert report.ok
    assert report.rows_checked == 3
    assert report.first_bad_id is None
    assert report.last_id == ids[-1]
    assert report.head_hash is not None
    assert ids == sorted(ids)


async def test_an_empty_log_verifies(migrated):
    report = await audit.verify(migrated)
    assert report.ok
    assert report.rows_checked == 0
    assert report.head_hash == audit.GENESIS


async def test_hashes_survive_the_jsonb_round_trip_for_awkward_values(migrated):
    awkward = {
        "floats": [0.1 + 0.2, 1e20, 1.5e-20, -0.0, 3.0, 2.5],
        "big_int": 2**70,
        "nested": {"z": {"b": [1, {"y": None, "a": True}]}, "a": []},
        "unicode": "Zoë — 日本語 🚀 \u00e9",
        "none": None,
        "empty": {},
    }
    entry = make_entry(
        original_args=awkward,
        edited_args={"b": 1, "a": {"d": 2.0, "c": "é"}},
        crm_response={"amount": 1234567.891, "note": "ok"},
        decision="edit",
        proposed_at=None,
        trace_url="https://smith.example/trace/1",
        decided_at=datetime(2025, 3, 4, 11, 0, tzinfo=timezone(timedelta(hours=2))),
    )
    await audit.append(migrated, entry)
    await audit.append(migrated, make_entry(2))

    assert (await audit.verify(migrated)).ok


async def test_naive_timestamps_are_refused(migrated):
    with pytest.raises(ValueError, match="timezone-aware"):
        await audit.append(migrated, make_entry(executed_at=datetime(2025, 1, 1)))


async def test_each_tool_call_is_audited_at_most_once(migrated):
    await audit.append(migrated, make_entry(1))
    with pytest.raises(psycopg.errors.UniqueViolation):
        await audit.append(migrated, make_entry(1))
    assert (await audit.verify(migrated)).ok


async def test_the_app_role_can_append_and_read_but_not_update_delete_or_truncate(app_pool):
    async with app_pool.connection() as conn:
        row_id = await audit.append(conn, make_entry(1))
        assert (await audit.verify(conn)).ok

        for statement in (
            "UPDATE audit_log SET tool = 'update_opportunity'",
            "DELETE FROM audit_log",
            "TRUNCATE audit_log",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute(statement)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")

        entries = await audit.list_entries(conn)
    assert [e.id for e in entries] == [row_id]


async def test_even_the_owner_cannot_update_delete_or_truncate_while_triggers_are_on(migrated):
    await audit.append(migrated, make_entry(1))
    for statement in (
        "UPDATE audit_log SET tool = 'update_opportunity'",
        "DELETE FROM audit_log",
        "TRUNCATE audit_log",
    ):
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            await migrated.execute(statement)
    assert (await audit.verify(migrated)).rows_checked == 1


async def test_verify_detects_an_altered_field(migrated):
    ids = [await audit.append(migrated, make_entry(n)) for n in range(1, 4)]
    await _as_owner_without_triggers(
        migrated,
        f'UPDATE audit_log SET crm_response = \'{{"id": "act-X", "version": 1}}\' WHERE id = {ids[1]}',
    )

    report = await audit.verify(migrated)

    assert not report.ok
    assert report.first_bad_id == ids[1]
    assert report.rows_checked == 1
    assert report.problem is not None
    assert "altered" in report.problem


async def test_verify_detects_a_deleted_row(migrated):
    ids = [await audit.append(migrated, make_entry(n)) for n in range(1, 4)]
    await _as_owner_without_triggers(migrated, f"DELETE FROM audit_log WHERE id = {ids[1]}")

    report = await audit.verify(migrated)

    assert not report.ok
    assert report.first_bad_id == ids[2]
    assert report.problem is not None
    assert "deleted" in report.problem
    with pytest.raises(AuditTamperDetected, match=f"TAMPERED at row {ids[2]}"):
        await audit.assert_intact(migrated)


async def test_verify_detects_a_deleted_first_row(migrated):
    ids = [await audit.append(migrated, make_entry(n)) for n in range(1, 3)]
    await _as_owner_without_triggers(migrated, f"DELETE FROM audit_log WHERE id = {ids[0]}")

    report = await audit.verify(migrated)

    assert report.first_bad_id == ids[1]


async def test_verify_detects_a_row_inserted_outside_the_chain(migrated):
    ids = [await audit.append(migrated, make_entry(n)) for n in range(1, 3)]
    # A forged row with a self-consistent hash that does not link to its predecessor.
    forged = make_entry(99)
    forged_hash = audit.row_hash(audit.GENESIS, audit._entry_values(forged))
    await migrated.execute(
        """
        INSERT INTO audit_log (id, tenant_id, rep_aad_id, thread_id, tool_call_id, tool, original_args,
                               decision, crm_response, decided_at, executed_at, prev_hash, row_hash)
        VALUES (%s, 'tenant-a', 'rep-alex', %s, 'call-99', 'log_activity', '{}', 'approve', '{}',
                now(), now(), %s, %s)
        """,
        (ids[1] + 100, forged.thread_id, audit.GENESIS, forged_hash),
    )

    report = await audit.verify(migrated)

    assert not report.ok
    assert report.first_bad_id == ids[1] + 100


async def test_verify_detects_swapped_rows(migrated):
    ids = [await audit.append(migrated, make_entry(n)) for n in range(1, 4)]
    # Swap two rows' ids (through a free id): the content and hashes move together.
    await _as_owner_without_triggers(
        migrated,
        f"UPDATE audit_log SET id = -1 WHERE id = {ids[0]};"
        f"UPDATE audit_log SET id = {ids[0]} WHERE id = {ids[1]};"
        f"UPDATE audit_log SET id = {ids[1]} WHERE id = -1",
    )

    report = await audit.verify(migrated)

    assert not report.ok
    assert report.first_bad_id == ids[0]


async def test_concurrent_appends_keep_one_valid_chain(app_pool):
    async def append_one(n: int) -> int:
        async with app_pool.connection() as conn:
            return await audit.append(conn, make_entry(n))

    ids = await asyncio.gather(*(append_one(n) for n in range(20)))

    async with app_pool.connection() as conn:
        report = await audit.verify(conn)
    assert len(set(ids)) == 20
    assert report.ok
    assert report.rows_checked == 20


async def test_list_entries_returns_the_newest_first_and_filters_by_thread(migrated):
    await audit.append(migrated, make_entry(1))
    other_thread = "thread-" + "y" * 24
    await audit.append(migrated, make_entry(2, thread_id=other_thread))
    await audit.append(migrated, make_entry(3))

    everything = await audit.list_entries(migrated)
    one_thread = await audit.list_entries(migrated, thread_id=other_thread)

    assert [e.entry.tool_call_id for e in everything] == ["call-3", "call-2", "call-1"]
    assert [e.entry for e in one_thread] == [make_entry(2, thread_id=other_thread)]


def _verify_cli(database_url: str, project_root: Any, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "copilot", "audit", "verify", *extra],
        env={**os.environ, "DATABASE_URL": database_url},
        cwd=project_root,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_audit_verify_command_exits_0_when_intact_and_1_when_tampered(
    database_url, migrated, project_root
):
    ids = [await audit.append(migrated, make_entry(n)) for n in range(1, 3)]

    intact = await asyncio.to_thread(_verify_cli, database_url, project_root)
    assert intact.returncode == 0, intact.stderr
    assert intact.stdout.strip() == "audit log intact: 2 rows"

    await _as_owner_without_triggers(
        migrated, f"UPDATE audit_log SET target_record_id = 'acc-999' WHERE id = {ids[0]}"
    )
    tampered = await asyncio.to_thread(_verify_cli, database_url, project_root)
    as_json = await asyncio.to_thread(_verify_cli, database_url, project_root, "--json")

    assert tampered.returncode == 1
    assert tampered.stdout.startswith(f"audit log TAMPERED at row {ids[0]}: ")
    assert as_json.returncode == 1
    assert '"first_bad_id": ' + str(ids[0]) in as_json.stdout


def test_audit_verify_command_on_an_unmigrated_database_says_what_to_do(database_url, project_root):
    result = _verify_cli(database_url, project_root)
    assert result.returncode == 1
    assert "python -m copilot db migrate" in result.stderr
    assert "Traceback" not in result.stderr
