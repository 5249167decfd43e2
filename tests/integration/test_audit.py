"""The audit log is append-only for the app, guarded even from its owner, and tamper-evident."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from pydantic import SecretStr

from copilot.errors import AuditTamperDetected, ConfigurationError, DatabaseError
from copilot.persistence import audit, audit_keys
from copilot.persistence.audit import AuditEntry
from copilot.persistence.audit_anchor import FileAnchorStore
from copilot.persistence.audit_keys import AuditKey
from copilot.persistence.migrations import load_migrations, migrate
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
def audit_settings(tmp_path: Path) -> Settings:
    """Settings whose local audit key and anchor file live in this test's own data dir."""
    return Settings(COPILOT_DATA_DIR=tmp_path, COPILOT_DB_POOL_MIN=1, COPILOT_DB_POOL_MAX=20)


@pytest.fixture
def config(audit_settings: Settings) -> audit.AuditConfig:
    return audit.audit_config(audit_settings)


@pytest.fixture
async def migrated(
    db_conn: psycopg.AsyncConnection[Any], config: audit.AuditConfig
) -> psycopg.AsyncConnection[Any]:
    """The owner's (superuser's) connection to a migrated database, with the test's audit key."""
    await migrate(db_conn)
    audit.bind(db_conn, config)
    return db_conn


@pytest.fixture
async def app_pool(
    database_url: str, migrated: psycopg.AsyncConnection[Any], audit_settings: Settings
) -> AsyncIterator[AsyncConnectionPool[psycopg.AsyncConnection[DictRow]]]:
    pool = await open_pool(database_url, audit_settings)
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


async def test_verify_detects_a_row_inserted_outside_the_chain(migrated, config):
    ids = [await audit.append(migrated, make_entry(n)) for n in range(1, 3)]
    # A forged row with a self-consistent hash that does not link to its predecessor.
    forged = make_entry(99)
    forged_hash = audit.legacy_row_hash(audit.GENESIS, audit._entry_values(forged))
    await migrated.execute(
        """
        INSERT INTO audit_log (id, tenant_id, rep_aad_id, thread_id, tool_call_id, tool, original_args,
                               decision, crm_response, decided_at, executed_at, key_id, prev_hash, row_hash)
        VALUES (%s, 'tenant-a', 'rep-alex', %s, 'call-99', 'log_activity', '{}', 'approve', '{}',
                now(), now(), %s, %s, %s)
        """,
        (ids[1] + 100, forged.thread_id, config.keyring.current.key_id, audit.GENESIS, forged_hash),
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


def _verify_cli(
    database_url: str, project_root: Any, data_dir: Path, *extra: str, command: str = "verify"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "copilot", "audit", command, *extra],
        env={**os.environ, "DATABASE_URL": database_url, "COPILOT_DATA_DIR": str(data_dir)},
        cwd=project_root,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_audit_verify_command_exits_0_when_intact_and_1_when_tampered(
    database_url, migrated, project_root, tmp_path
):
    ids = [await audit.append(migrated, make_entry(n)) for n in range(1, 3)]

    intact = await asyncio.to_thread(_verify_cli, database_url, project_root, tmp_path)
    assert intact.returncode == 0, intact.stderr
    assert intact.stdout.splitlines()[0] == "audit log intact: 2 rows"

    await _as_owner_without_triggers(
        migrated, f"UPDATE audit_log SET target_record_id = 'acc-999' WHERE id = {ids[0]}"
    )
    tampered = await asyncio.to_thread(_verify_cli, database_url, project_root, tmp_path)
    as_json = await asyncio.to_thread(_verify_cli, database_url, project_root, tmp_path, "--json")

    assert tampered.returncode == 1
    assert tampered.stdout.startswith(f"audit log TAMPERED at row {ids[0]}: ")
    assert as_json.returncode == 1
    assert '"first_bad_id": ' + str(ids[0]) in as_json.stdout


def test_audit_verify_command_on_an_unmigrated_database_says_what_to_do(database_url, project_root, tmp_path):
    result = _verify_cli(database_url, project_root, tmp_path)
    assert result.returncode == 1
    assert "python -m copilot db migrate" in result.stderr
    assert "Traceback" not in result.stderr


# --- keyed chain, anchors and the app login (invariant 6) -------------------------------


def _key_entry(key_id: str, byte: int) -> str:
    return f"{key_id}:{base64.b64encode(bytes([byte]) * 32).decode()}"


async def _forge_after_head(
    conn: psycopg.AsyncConnection[Any], n: int, *, key_id: str | None, digest: Callable[[int, str], str]
) -> int:
    """Insert, as the owner, a row that links to the head, with ``digest(id, prev_hash)``."""
    cur = await conn.execute("SELECT id, row_hash FROM audit_log ORDER BY id DESC LIMIT 1")
    head = await cur.fetchone()
    assert head is not None
    row_id, prev = int(head["id"]) + 1, str(head["row_hash"])
    entry = make_entry(n)
    values = audit._entry_values(entry)
    await conn.execute(
        f"""
        INSERT INTO audit_log (id, {", ".join(values)}, key_id, prev_hash, row_hash)
        VALUES (%s, {", ".join(["%s"] * len(values))}, %s, %s, %s)
        """,
        (
            row_id,
            *(Jsonb(v) if isinstance(v, dict) else v for v in values.values()),
            key_id,
            prev,
            digest(row_id, prev),
        ),
    )
    return row_id


async def test_cli_verify_detects_a_forged_row_appended_with_a_correct_plain_hash(
    database_url, migrated, config, project_root, tmp_path
):
    # The old scheme: sha256(prev_hash + row) links perfectly and needs no secret.
    await audit.append(migrated, make_entry(1))
    await audit.append(migrated, make_entry(2))
    values = audit._entry_values(make_entry(99))
    forged = await _forge_after_head(
        migrated,
        99,
        key_id=config.keyring.current.key_id,
        digest=lambda _id, prev: audit.legacy_row_hash(prev, values),
    )

    result = await asyncio.to_thread(_verify_cli, database_url, project_root, tmp_path)

    assert result.returncode == 1, result.stdout
    assert result.stdout.startswith(f"audit log TAMPERED at row {forged}: ")
    assert "forged" in result.stdout


async def test_verify_refuses_an_unkeyed_row_even_with_the_constraint_dropped(migrated):
    await audit.append(migrated, make_entry(1))
    values = audit._entry_values(make_entry(99))
    await migrated.execute("ALTER TABLE audit_log DROP CONSTRAINT audit_rows_are_keyed")
    forged = await _forge_after_head(
        migrated, 99, key_id=None, digest=lambda _id, prev: audit.legacy_row_hash(prev, values)
    )

    report = await audit.verify(migrated)

    assert not report.ok
    assert report.first_bad_id == forged
    assert report.problem is not None
    assert "no key id" in report.problem


async def test_the_database_refuses_an_unkeyed_row(migrated):
    values = audit._entry_values(make_entry(99))
    with pytest.raises(psycopg.errors.CheckViolation, match="audit_rows_are_keyed"):
        await migrated.execute(
            f"INSERT INTO audit_log ({', '.join(values)}, prev_hash, row_hash)"
            f" VALUES ({', '.join(['%s'] * len(values))}, 'GENESIS', 'x')",
            tuple(Jsonb(v) if isinstance(v, dict) else v for v in values.values()),
        )


async def test_a_row_chained_with_a_key_that_is_not_ours_is_detected(migrated, config):
    await audit.append(migrated, make_entry(1))
    wrong = AuditKey(config.keyring.current.key_id, b"\x07" * 32)
    values = audit._entry_values(make_entry(99))
    forged = await _forge_after_head(
        migrated,
        99,
        key_id=wrong.key_id,
        digest=lambda row_id, prev: audit.keyed_row_hash(wrong, row_id, prev, values),
    )

    report = await audit.verify(migrated)

    assert (report.ok, report.first_bad_id) == (False, forged)


async def test_cli_verify_detects_a_removed_tail_back_to_the_last_anchor(
    database_url, migrated, project_root, tmp_path
):
    ids = [await audit.append(migrated, make_entry(n)) for n in range(1, 5)]
    # `verify` anchors the head it verified: row 4 is now anchored too.
    sealed = await asyncio.to_thread(_verify_cli, database_url, project_root, tmp_path)
    assert sealed.returncode == 0, sealed.stderr
    assert f"anchor: row {ids[-1]} (4 rows)" in sealed.stdout

    await _as_owner_without_triggers(migrated, f"DELETE FROM audit_log WHERE id >= {ids[2]}")
    cut = await asyncio.to_thread(_verify_cli, database_url, project_root, tmp_path, "--json")

    assert cut.returncode == 1
    report = json.loads(cut.stdout)
    assert report["truncated"] is True
    assert report["first_bad_id"] == ids[-1]
    assert "truncated back to the last anchor" in report["problem"]
    assert f"ends at row {ids[1]} (2 rows)" in report["problem"]


async def test_verify_detects_that_every_row_was_removed(migrated, config):
    for n in range(1, 4):
        await audit.append(migrated, make_entry(n))
    await audit.anchor_now(migrated)

    await _as_owner_without_triggers(migrated, "TRUNCATE audit_log")
    report = await audit.verify(migrated)

    assert not report.ok
    assert report.truncated
    assert report.problem is not None
    assert "has no rows at all" in report.problem
    with pytest.raises(AuditTamperDetected, match="truncated back to the last anchor"):
        await audit.assert_intact(migrated)


async def test_each_append_anchors_its_own_row_once_committed(migrated, config):
    ids = [await audit.append(migrated, make_entry(n)) for n in range(1, 4)]

    report = await audit.verify(migrated)

    # Anchored after commit: the newest row is covered without waiting for the next write.
    assert report.ok
    assert report.anchors_checked == 3
    assert report.last_anchor is not None
    assert (report.last_anchor.last_id, report.last_anchor.rows) == (ids[2], 3)
    assert report.last_anchor.key_id == config.keyring.current.key_id


async def test_a_forged_anchor_is_itself_a_failure(migrated, config):
    for n in range(1, 3):
        await audit.append(migrated, make_entry(n))
    assert config.anchors is not None
    records = await config.anchors.read()
    doctored = json.loads(records[-1])
    doctored["last_id"] += 5  # claim rows that never existed
    await config.anchors.append(json.dumps(doctored))

    report = await audit.verify(migrated)

    assert not report.ok
    assert report.problem is not None
    assert "bad signature" in report.problem
    assert "forged anchor" in report.problem


async def test_an_anchor_store_that_fails_never_fails_the_append(migrated, tmp_path, caplog):
    keyring = audit_keys.parse_keys(_key_entry("k1", 1))
    broken = audit.AuditConfig(keyring, FileAnchorStore(tmp_path / "a-directory"), anchor_every=1)
    (tmp_path / "a-directory").mkdir()

    ids = [await audit.append(migrated, make_entry(n), config=broken) for n in range(1, 3)]

    assert len(ids) == 2
    assert "not anchored" in caplog.text
    ok = audit.AuditConfig(keyring, FileAnchorStore(tmp_path / "anchors.jsonl"))
    assert (await audit.verify(migrated, config=ok)).ok


async def test_rotated_keys_verify_by_key_id_and_an_unknown_key_id_is_a_clear_failure(migrated, tmp_path):
    anchors = FileAnchorStore(tmp_path / "rotation.jsonl")
    old = audit.AuditConfig(audit_keys.parse_keys(_key_entry("k1", 1)), anchors)
    rotated = audit.AuditConfig(
        audit_keys.parse_keys(f"{_key_entry('k2', 2)},{_key_entry('k1', 1)}"), anchors
    )
    retired = audit.AuditConfig(audit_keys.parse_keys(_key_entry("k2", 2)), FileAnchorStore(tmp_path / "x"))

    first = await audit.append(migrated, make_entry(1), config=old)
    await audit.append(migrated, make_entry(2), config=rotated)

    entries = await audit.list_entries(migrated)
    assert [e.key_id for e in entries] == ["k2", "k1"]
    assert (await audit.verify(migrated, config=rotated)).ok
    report = await audit.verify(migrated, config=retired)
    assert not report.ok
    assert report.first_bad_id == first
    assert report.problem is not None
    assert "key id 'k1' is not among the configured audit keys ['k2']" in report.problem


async def test_rows_from_before_the_keyed_chain_still_verify_as_its_prefix(db_conn, config):
    # A database audited by the old code (every migration before audit_hmac, unkeyed rows).
    keyed_from = next(m.version for m in load_migrations() if m.name == "audit_hmac")
    await migrate(db_conn, tuple(m for m in load_migrations() if m.version < keyed_from))
    prev = audit.GENESIS
    for n in (1, 2):
        # The old code's columns: none added since (migration undo's undoes_audit_id,
        # delegation's approver_aad_id).
        added = ("undoes_audit_id", "approver_aad_id")
        values = {k: v for k, v in audit._entry_values(make_entry(n)).items() if k not in added}
        digest = audit.legacy_row_hash(prev, values)
        await db_conn.execute(
            f"INSERT INTO audit_log ({', '.join(values)}, prev_hash, row_hash)"
            f" VALUES ({', '.join(['%s'] * len(values))}, %s, %s)",
            (*(Jsonb(v) if isinstance(v, dict) else v for v in values.values()), prev, digest),
        )
        prev = digest
    await migrate(db_conn)

    await audit.append(db_conn, make_entry(3), config=config)
    report = await audit.verify(db_conn, config=config)

    assert report.ok
    assert report.rows_checked == 3
    assert report.last_anchor is not None
    assert report.last_anchor.rows == 3, "the first keyed row (and the legacy rows before it) got anchored"


def test_local_development_generates_one_private_key_under_the_data_dir(tmp_path):
    settings = Settings(COPILOT_DATA_DIR=tmp_path)

    first = audit_keys.load_keyring(settings)
    again = audit_keys.load_keyring(settings)

    path = tmp_path / "audit" / "hmac.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert first == again
    assert first.current.key_id.startswith("local-")


DEPLOYED: dict[str, Any] = {
    "COPILOT_ENVIRONMENT": "deployed",
    "MicrosoftAppId": "0f1e2d3c-4b5a-4697-8877-665544332211",
    "MicrosoftAppPassword": "a-real-secret",
    "CRM_MCP_URL": "https://crm.contoso.example/mcp",
    "GRAPH_BASE_URL": "https://graph.microsoft.com/v1.0",
    "ENTRA_AUTHORITY": "https://login.microsoftonline.com",
    "COPILOT_MODEL": "azure_openai:gpt-4.1",
}


def test_a_deployment_without_a_configured_key_refuses_to_start(tmp_path):
    settings = Settings(COPILOT_DATA_DIR=tmp_path, **DEPLOYED)
    with pytest.raises(ConfigurationError, match="COPILOT_AUDIT_HMAC_KEYS is not set"):
        audit.audit_config(settings)
    assert not (tmp_path / "audit").exists(), "no key is generated for a deployment"

    configured = Settings(
        COPILOT_DATA_DIR=tmp_path,
        **DEPLOYED,
        COPILOT_AUDIT_HMAC_KEYS=SecretStr(f"{_key_entry('k2', 2)},{_key_entry('k1', 1)}"),
        COPILOT_AUDIT_ANCHOR_FILE=tmp_path / "anchors.jsonl",
    )
    assert audit.audit_config(configured).keyring.key_ids == ("k2", "k1")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("no-colon", "not 'kid:base64key'"),
        ("k1:not base64!", "not valid base64"),
        (f"k1:{base64.b64encode(b'short').decode()}", "use at least 32"),
        (f"{_key_entry('k1', 1)},{_key_entry('k1', 2)}", "twice"),
    ],
)
def test_malformed_keys_are_refused_without_echoing_them(value, problem):
    with pytest.raises(ConfigurationError, match=problem) as raised:
        audit_keys.parse_keys(value)
    assert "AQEB" not in str(raised.value)


async def test_the_app_pool_login_is_not_a_superuser_and_reset_role_gains_nothing(app_pool, config):
    async with app_pool.connection() as conn:
        await audit.append(conn, make_entry(1))
        cur = await conn.execute(
            "SELECT session_user AS login, rolsuper FROM pg_roles WHERE rolname = session_user"
        )
        login = await cur.fetchone()
        assert login is not None
        assert login["login"] == "copilot_app_login"
        assert login["rolsuper"] is False

        await conn.execute("RESET ROLE")
        for statement in (
            "UPDATE audit_log SET tool = 'update_opportunity'",
            "DELETE FROM audit_log",
            "TRUNCATE audit_log",
            "ALTER TABLE audit_log DISABLE TRIGGER USER",
            "SET ROLE postgres",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute(statement)

        # What the app login may still do, INSERT, gets it nowhere without the key.
        values = audit._entry_values(make_entry(99))
        forged = await _forge_after_head(
            conn,
            99,
            key_id=config.keyring.current.key_id,
            digest=lambda _id, prev: audit.legacy_row_hash(prev, values),
        )
        report = await audit.verify(conn)
    assert (report.ok, report.first_bad_id) == (False, forged)


async def test_the_pool_refuses_a_privileged_login_it_cannot_leave(database_url, migrated, tmp_path):
    settings = Settings(COPILOT_DATA_DIR=tmp_path, COPILOT_DB_APP_LOGIN="")
    with pytest.raises(DatabaseError, match="must log in as an unprivileged role"):
        await open_pool(database_url, settings, open_timeout=5)


def test_an_unwritable_data_dir_is_a_clear_configuration_error(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(ConfigurationError, match="could not read or create the local audit key"):
        audit_keys.load_keyring(Settings(COPILOT_DATA_DIR=blocker))
