"""The newest audit row is anchored after its commit, and a removed one is detected within
one seal interval (``audit.SEAL_INTERVAL``, the bound docs/ARCHITECTURE.md states).

Time is driven by calling the seal (what the ``audit_seal`` timer runs) at chosen instants
of a test clock: nothing sleeps.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from copilot.errors import AnchorStoreError, AuditTamperDetected
from copilot.persistence import audit, audit_keys, idempotency
from copilot.persistence.migrations import migrate
from copilot.persistence.pool import open_pool
from copilot.settings import Settings
from tests.integration.test_audit import T0, _as_owner_without_triggers, _key_entry, make_entry

pytestmark = pytest.mark.integration

Conn = psycopg.AsyncConnection[Any]


class FlakyStore:
    """An in-memory anchor store whose appends fail while ``down`` (an outage, a lost anchor)."""

    def __init__(self) -> None:
        self.records: list[str] = []
        self.down = False

    @property
    def location(self) -> str:
        return "memory"

    async def append(self, record: str) -> None:
        if self.down:
            raise AnchorStoreError("the anchor store is unreachable")
        self.records.append(record)

    async def read(self) -> list[str]:
        return list(self.records)


class SealTimer:
    """The ``audit_seal`` timer on a test clock: a run at every multiple of SEAL_INTERVAL."""

    def __init__(self, conn: Conn, start: datetime):
        self.conn = conn
        self.now = start

    async def tick(self) -> audit.SealResult:
        self.now += audit.SEAL_INTERVAL
        return await audit.seal_head(self.conn, now=self.now)


@pytest.fixture
async def store(db_conn: Conn) -> FlakyStore:
    await migrate(db_conn)
    flaky = FlakyStore()
    audit.bind(db_conn, audit.AuditConfig(audit_keys.parse_keys(_key_entry("k1", 1)), flaky))
    return flaky


async def _remove_newest_row(conn: Conn) -> int:
    cur = await conn.execute("SELECT max(id) AS id FROM audit_log")
    row = await cur.fetchone()
    assert row is not None
    await _as_owner_without_triggers(conn, f"DELETE FROM audit_log WHERE id = {row['id']}")
    return int(row["id"])


async def test_a_removed_newest_row_is_detected_by_the_next_seal(db_conn, store):
    timer = SealTimer(db_conn, T0)
    await audit.append(db_conn, make_entry(1))
    newest = await audit.append(db_conn, make_entry(2))
    # Nothing was written after the newest row, yet it is anchored: at its commit.
    assert (await timer.tick()).anchor is None

    removed = await _remove_newest_row(db_conn)
    with pytest.raises(AuditTamperDetected, match="truncated back to the last anchor") as caught:
        await timer.tick()

    assert removed == newest
    assert caught.value.fields == {"first_bad_id": newest, "truncated": True}


async def test_a_row_whose_anchor_was_lost_is_anchored_within_one_seal_interval(db_conn, store):
    timer = SealTimer(db_conn, T0)
    await audit.append(db_conn, make_entry(1))
    committed_at = timer.now
    store.down = True
    newest = await audit.append(db_conn, make_entry(2))  # committed; its anchor is lost
    store.down = False
    assert all(f'"last_id":{newest}' not in record for record in store.records)

    sealed = await timer.tick()

    assert sealed.anchor is not None
    assert sealed.anchor.last_id == newest
    assert sealed.anchor.time - committed_at <= audit.SEAL_INTERVAL
    await _remove_newest_row(db_conn)
    with pytest.raises(AuditTamperDetected, match="truncated back to the last anchor"):
        await timer.tick()


async def test_the_only_unseen_removal_is_of_a_row_no_anchor_ever_named(db_conn, store):
    # The window the bound leaves: the row's own anchor lost AND the row removed before the
    # next seal. The seal then finds a shorter, valid chain (this is what the immutable
    # anchor store and the after-commit anchor keep to milliseconds in practice).
    timer = SealTimer(db_conn, T0)
    await audit.append(db_conn, make_entry(1))
    store.down = True
    await audit.append(db_conn, make_entry(2))
    store.down = False
    await _remove_newest_row(db_conn)

    assert (await timer.tick()).report.ok


async def test_an_append_inside_a_callers_transaction_is_anchored_only_after_its_commit(db_conn, store):
    async with db_conn.transaction():
        row_id = await audit.append(db_conn, make_entry(1))
        assert store.records == [], "nothing anchored before the row commits"
        with pytest.raises(RuntimeError, match="after the audit row's transaction has committed"):
            await audit.anchor_committed(db_conn)

    anchor = await audit.anchor_committed(db_conn)

    assert anchor is not None
    assert (anchor.last_id, anchor.rows) == (row_id, 1)
    assert await audit.anchor_committed(db_conn) is None, "not due again until the next append"


async def test_a_row_rolled_back_with_its_callers_transaction_leaves_no_anchor(db_conn, store):
    class WriteFailed(Exception):
        pass

    async def failing_write() -> None:
        async with db_conn.transaction():
            await audit.append(db_conn, make_entry(1))
            raise WriteFailed  # the caller's write fails after the audit row was appended

    with pytest.raises(WriteFailed):
        await failing_write()

    assert await audit.anchor_committed(db_conn) is None
    assert store.records == []
    assert (await audit.verify(db_conn)).ok


async def test_the_write_path_anchors_its_audit_row_when_the_claim_completes(
    database_url, db_conn, tmp_path: Path
):
    await migrate(db_conn)
    settings = Settings(COPILOT_DATA_DIR=tmp_path, COPILOT_DB_POOL_MIN=1, COPILOT_DB_POOL_MAX=4)
    pool = await open_pool(database_url, settings)
    try:
        thread, call = "thread-" + "s" * 24, "call-seal"
        args_hash = idempotency.args_hash({"subject": "Call"})
        async with idempotency.claim(
            pool,
            key=idempotency.idempotency_key(thread, call),
            tenant_id="tenant-a",
            rep_aad_id="rep-alex",
            thread_id=thread,
            tool_call_id=call,
            tool="log_activity",
            args_hash=args_hash,
        ) as claimed:
            await claimed.begin({})
            stored = await claimed.complete(
                {"id": "act-1"}, make_entry(1, thread_id=thread, tool_call_id=call)
            )
        async with pool.connection() as conn:
            report = await audit.verify(conn)
    finally:
        await pool.close()

    assert report.ok
    assert report.last_anchor is not None
    assert report.last_anchor.last_id == stored["audit_id"] == report.last_id


def test_the_seal_interval_is_minutes_not_days():
    assert timedelta(minutes=1) <= audit.SEAL_INTERVAL <= timedelta(minutes=15)
