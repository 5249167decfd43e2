"""The append-only, hash-chained audit log of executed writes (invariant 6).

Each row's ``row_hash`` is ``sha256(prev_hash + canonical JSON of the row's fields)``
and its ``prev_hash`` is the previous row's ``row_hash`` (``GENESIS`` for the first), in
id order. :func:`verify` recomputes the chain, so a changed field, a removed row or a
row slipped in between is found even if someone with the owner's rights got past the
grants and triggers (see migration 0002).

The hash is computed from the values exactly as PostgreSQL stores and returns them:
before inserting, the JSON fields make one round trip through ``jsonb`` (which reorders
keys and rewrites numbers, e.g. ``1e+20`` becomes ``100000000000000000000``), so what
:func:`append` hashes is what :func:`verify` reads back.

Known limit: a chain cannot tell that its *newest* rows were removed. Anchor the head
elsewhere (``VerifyReport.head_hash``, e.g. in a daily log line) to detect that.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.errors import UndefinedTable
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from copilot.errors import AuditTamperDetected, MigrationError

GENESIS = "GENESIS"

# Arbitrary but fixed: every appender serialises on it so the chain has one head.
_APPEND_LOCK_KEY = 0x0C0_0A0D_0001

_JSON_FIELDS = ("original_args", "edited_args", "crm_response")
_TIME_FIELDS = ("proposed_at", "decided_at", "executed_at")
_VERIFY_BATCH = 1000


@dataclass(frozen=True)
class AuditEntry:
    """One executed write, as recorded (all the audit columns but id and the hashes)."""

    tenant_id: str
    rep_aad_id: str
    thread_id: str
    tool_call_id: str
    tool: str
    target_record_id: str | None
    record_version_read: int | None
    original_args: dict[str, Any]
    edited_args: dict[str, Any] | None
    decision: str
    """``approve`` or ``edit`` (rejections are not writes: see ``rejections``)."""
    crm_response: dict[str, Any]
    proposed_at: datetime | None
    decided_at: datetime
    executed_at: datetime
    trace_url: str | None = None


_COLUMNS = tuple(f.name for f in fields(AuditEntry))


@dataclass(frozen=True)
class StoredAuditEntry:
    """An audit row as read back: the entry plus its id and chain hashes."""

    id: int
    entry: AuditEntry
    prev_hash: str
    row_hash: str


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of :func:`verify`."""

    ok: bool
    rows_checked: int
    first_bad_id: int | None = None
    problem: str | None = None
    last_id: int | None = None
    head_hash: str | None = None
    """The newest row's hash (``GENESIS`` when empty): publish it to detect tail removal."""


def _utc_iso(value: datetime | None, name: str) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        # timestamptz would read a naive value in the session's time zone: ambiguous.
        raise ValueError(f"audit field {name} must be timezone-aware")
    return value.astimezone(UTC).isoformat()


def canonical_json(values: Mapping[str, Any]) -> str:
    """The canonical text hashed for one row (sorted keys, no whitespace, ISO UTC times)."""
    normalised = {
        name: _utc_iso(values[name], name) if name in _TIME_FIELDS else values[name] for name in _COLUMNS
    }
    return json.dumps(normalised, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def row_hash(prev_hash: str, values: Mapping[str, Any]) -> str:
    """``sha256(prev_hash + canonical_json(values))`` as hex."""
    return hashlib.sha256((prev_hash + canonical_json(values)).encode("ascii")).hexdigest()


def _entry_values(entry: AuditEntry) -> dict[str, Any]:
    return {name: getattr(entry, name) for name in _COLUMNS}


async def append(conn: AsyncConnection[Any], entry: AuditEntry) -> int:
    """Append one row to the chain; returns its id.

    Runs in a transaction on ``conn`` (a savepoint if ``conn`` is already in one, e.g. an
    idempotency claim's, and then the row commits with it).
    """
    if entry.decision not in ("approve", "edit"):
        raise ValueError(f"audit decision must be 'approve' or 'edit', not {entry.decision!r}")
    values = _entry_values(entry)
    async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        # What jsonb will hand back later, so the hash matches on verify.
        await cur.execute(
            "SELECT %s::jsonb AS original_args, %s::jsonb AS edited_args, %s::jsonb AS crm_response",
            tuple(_jsonb(values[name]) for name in _JSON_FIELDS),
        )
        stored_json = await cur.fetchone()
        assert stored_json is not None
        values.update(stored_json)
        # One appender at a time: the head read below stays the head until we commit.
        await cur.execute("SELECT pg_advisory_xact_lock(%s)", (_APPEND_LOCK_KEY,))
        await cur.execute("SELECT row_hash FROM audit_log ORDER BY id DESC LIMIT 1")
        head = await cur.fetchone()
        prev_hash = GENESIS if head is None else str(head["row_hash"])
        digest = row_hash(prev_hash, values)
        params = {name: _jsonb(values[name]) if name in _JSON_FIELDS else values[name] for name in _COLUMNS}
        await cur.execute(
            f"""
            INSERT INTO audit_log ({", ".join(_COLUMNS)}, prev_hash, row_hash)
            VALUES ({", ".join(f"%({name})s" for name in _COLUMNS)}, %(prev_hash)s, %(row_hash)s)
            RETURNING id
            """,  # column names come from the dataclass, never from input
            {**params, "prev_hash": prev_hash, "row_hash": digest},
        )
        inserted = await cur.fetchone()
        assert inserted is not None
        return int(inserted["id"])


def _jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


async def verify(conn: AsyncConnection[Any]) -> VerifyReport:
    """Recompute the whole chain in id order; report the first row that does not fit."""
    expected_prev = GENESIS
    checked = 0
    last_id: int | None = None
    async with conn.cursor(row_factory=dict_row) as cur:
        while True:
            try:
                await cur.execute(
                    f"SELECT id, {', '.join(_COLUMNS)}, prev_hash, row_hash FROM audit_log"
                    " WHERE id > %s ORDER BY id LIMIT %s",
                    (-1 if last_id is None else last_id, _VERIFY_BATCH),
                )
            except UndefinedTable as exc:
                raise MigrationError(
                    "there is no audit log in this database: run `python -m copilot db migrate`"
                ) from exc
            rows = await cur.fetchall()
            if not rows:
                break
            for row in rows:
                row_id = int(row["id"])
                if row["prev_hash"] != expected_prev:
                    return VerifyReport(
                        ok=False,
                        rows_checked=checked,
                        first_bad_id=row_id,
                        problem="its prev_hash does not match the row before it "
                        "(a row was deleted, inserted or reordered)",
                        last_id=last_id,
                    )
                if row_hash(row["prev_hash"], row) != row["row_hash"]:
                    return VerifyReport(
                        ok=False,
                        rows_checked=checked,
                        first_bad_id=row_id,
                        problem="its contents do not match its hash (a field was altered)",
                        last_id=last_id,
                    )
                checked += 1
                expected_prev = str(row["row_hash"])
                last_id = row_id
    return VerifyReport(ok=True, rows_checked=checked, last_id=last_id, head_hash=expected_prev)


async def assert_intact(conn: AsyncConnection[Any]) -> VerifyReport:
    """:func:`verify`, raising :class:`AuditTamperDetected` when the chain is broken."""
    report = await verify(conn)
    if not report.ok:
        raise AuditTamperDetected(
            f"audit log TAMPERED at row {report.first_bad_id}: {report.problem}",
            first_bad_id=report.first_bad_id,
        )
    return report


async def list_entries(
    conn: AsyncConnection[Any], *, thread_id: str | None = None, limit: int = 100
) -> list[StoredAuditEntry]:
    """The newest audit rows first, optionally for one thread."""
    where = "WHERE thread_id = %(thread_id)s" if thread_id is not None else ""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT id, {', '.join(_COLUMNS)}, prev_hash, row_hash FROM audit_log {where}"
            " ORDER BY id DESC LIMIT %(limit)s",
            {"thread_id": thread_id, "limit": limit},
        )
        rows = await cur.fetchall()
    return [
        StoredAuditEntry(
            id=int(row["id"]),
            entry=AuditEntry(**{name: row[name] for name in _COLUMNS}),
            prev_hash=str(row["prev_hash"]),
            row_hash=str(row["row_hash"]),
        )
        for row in rows
    ]
