"""The sandbox CRM's SQLite store: connections, schema, reset/export, drafts and request log.

Many threads (the MCP layer runs service calls in a thread pool) and several
processes (server, CLI, tests) share one database file, so every operation opens
its own connection, the file runs in WAL mode (readers never block the writer)
and writes take the write lock up front with ``BEGIN IMMEDIATE`` (no lock
upgrades mid-transaction, which is where SQLite deadlocks come from).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BUSY_TIMEOUT_MS = 10_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    domain TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS users (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id),
    handle TEXT NOT NULL,
    name TEXT NOT NULL,
    email TEXT NOT NULL,
    role TEXT NOT NULL,
    territory TEXT,
    manager_id TEXT
);
CREATE TABLE IF NOT EXISTS accounts (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id),
    name TEXT NOT NULL,
    industry TEXT NOT NULL,
    territory TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    city TEXT NOT NULL,
    website TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    modified_at TEXT NOT NULL,
    modified_by TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_accounts_tenant ON accounts(tenant_id);
CREATE TABLE IF NOT EXISTS contacts (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id),
    account_id TEXT NOT NULL REFERENCES accounts(id),
    name TEXT NOT NULL,
    title TEXT NOT NULL,
    email TEXT NOT NULL,
    phone TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_contacts_account ON contacts(account_id);
CREATE TABLE IF NOT EXISTS opportunities (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id),
    account_id TEXT NOT NULL REFERENCES accounts(id),
    name TEXT NOT NULL,
    stage TEXT NOT NULL,
    amount REAL NOT NULL,
    currency TEXT NOT NULL,
    close_date TEXT NOT NULL,
    probability INTEGER NOT NULL,
    next_step TEXT NOT NULL DEFAULT '',
    owner_id TEXT NOT NULL,
    commission REAL NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    modified_at TEXT NOT NULL,
    modified_by TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_opportunities_tenant ON opportunities(tenant_id);
CREATE INDEX IF NOT EXISTS ix_opportunities_account ON opportunities(account_id);
CREATE TABLE IF NOT EXISTS activities (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id),
    external_id TEXT NOT NULL,
    type TEXT NOT NULL,
    subject TEXT NOT NULL,
    notes TEXT NOT NULL DEFAULT '',
    occurred_at TEXT NOT NULL,
    account_id TEXT REFERENCES accounts(id),
    opportunity_id TEXT REFERENCES opportunities(id),
    owner_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    voided_at TEXT,
    voided_by TEXT,
    void_reason TEXT,
    version INTEGER NOT NULL DEFAULT 1,
    UNIQUE (tenant_id, external_id)
);
CREATE INDEX IF NOT EXISTS ix_activities_account ON activities(account_id);
CREATE INDEX IF NOT EXISTS ix_activities_opportunity ON activities(opportunity_id);
CREATE TABLE IF NOT EXISTS shares (
    tenant_id TEXT NOT NULL REFERENCES tenants(id),
    record_type TEXT NOT NULL,
    record_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    PRIMARY KEY (tenant_id, record_type, record_id, user_id)
);
CREATE TABLE IF NOT EXISTS drafts (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    subject TEXT NOT NULL,
    body_content_type TEXT NOT NULL,
    body TEXT NOT NULL,
    to_recipients TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_drafts_owner ON drafts(tenant_id, owner_id);
CREATE TABLE IF NOT EXISTS request_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    tenant_id TEXT,
    caller_id TEXT,
    tool TEXT NOT NULL,
    record_ids TEXT NOT NULL,
    outcome TEXT NOT NULL
);
"""

# Export order; also the drop order on reset (children before parents).
TABLES: tuple[str, ...] = (
    "tenants",
    "users",
    "accounts",
    "contacts",
    "opportunities",
    "activities",
    "shares",
    "drafts",
    "request_log",
)
_JSON_COLUMNS = {"drafts": ("to_recipients",), "request_log": ("record_ids",)}
_ORDER_BY = {"shares": "tenant_id, record_type, record_id, user_id"}


def utc_now() -> str:
    """Current time as the store writes timestamps: ISO 8601, UTC, second precision, ``Z``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dict_row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    # Plain dicts: JSON-serialisable as they are and usable as Mappings (.get) by callers.
    return {column[0]: value for column, value in zip(cursor.description, row, strict=True)}


def connect(path: Path) -> sqlite3.Connection:
    """A new connection in autocommit mode (transactions are explicit, see ``transaction``)."""
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    conn.row_factory = _dict_row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


@contextmanager
def transaction(path: Path, write: bool) -> Iterator[sqlite3.Connection]:
    """One transaction on a fresh connection; commits on success, rolls back on error.

    Writers use ``BEGIN IMMEDIATE`` so that a read-then-write (version checks,
    idempotent upserts) cannot interleave with another writer.
    """
    conn = connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        conn.close()


def _enable_wal(path: Path) -> None:
    # journal_mode is a property of the file and cannot change inside a transaction.
    conn = connect(path)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()


def ensure_schema(path: Path) -> None:
    """Create the schema if missing and seed an empty database (idempotent, race-safe).

    Creation and the emptiness check run in one ``BEGIN IMMEDIATE`` transaction, so
    two processes starting together seed exactly once.
    """
    from sandbox.seed import seed  # seed imports this module's helpers

    path.parent.mkdir(parents=True, exist_ok=True)
    _enable_wal(path)
    with transaction(path, write=True) as conn:
        _create_schema(conn)
        if conn.execute("SELECT COUNT(*) AS n FROM tenants").fetchone()["n"] == 0:
            seed(conn)


def _create_schema(conn: sqlite3.Connection) -> None:
    # executescript() would COMMIT the open transaction; run statements one by one.
    for statement in SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)


def reset(path: Path) -> None:
    """Drop every table, recreate the schema and reseed, atomically."""
    from sandbox.seed import seed

    path.parent.mkdir(parents=True, exist_ok=True)
    _enable_wal(path)
    with transaction(path, write=True) as conn:
        conn.execute("PRAGMA defer_foreign_keys = ON")
        for table in reversed(TABLES):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        _create_schema(conn)
        seed(conn)


def _decode(table: str, row: dict[str, Any]) -> dict[str, Any]:
    record = dict(row)
    for column in _JSON_COLUMNS.get(table, ()):
        record[column] = json.loads(record[column])
    return record


def export_state(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The whole state, one key per table, rows in a stable order (JSON-serialisable)."""
    with transaction(path, write=False) as conn:
        return {
            table: [
                _decode(table, row)
                for row in conn.execute(f"SELECT * FROM {table} ORDER BY {_ORDER_BY.get(table, 'id')}")
            ]
            for table in TABLES
        }


def create_draft(
    path: Path,
    *,
    tenant_id: str,
    owner_id: str,
    subject: str,
    body_content_type: str,
    body: str,
    to_recipients: list[str],
) -> dict[str, Any]:
    """Store a mail draft (the mailbox never sends) and return it."""
    draft_id = f"draft-{uuid.uuid4().hex}"
    with transaction(path, write=True) as conn:
        conn.execute(
            "INSERT INTO drafts (id, tenant_id, owner_id, subject, body_content_type, body,"
            " to_recipients, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                draft_id,
                tenant_id,
                owner_id,
                subject,
                body_content_type,
                body,
                json.dumps(list(to_recipients)),
                utc_now(),
            ),
        )
        row = conn.execute("SELECT * FROM drafts WHERE id = ?", (draft_id,)).fetchone()
    return _decode("drafts", row)


def list_drafts(path: Path, *, tenant_id: str, owner_id: str) -> list[dict[str, Any]]:
    """One mailbox's drafts, oldest first."""
    with transaction(path, write=False) as conn:
        rows = conn.execute(
            "SELECT * FROM drafts WHERE tenant_id = ? AND owner_id = ? ORDER BY created_at, id",
            (tenant_id, owner_id),
        ).fetchall()
    return [_decode("drafts", row) for row in rows]


def get_draft(path: Path, *, draft_id: str) -> dict[str, Any] | None:
    """A draft by id, or None."""
    with transaction(path, write=False) as conn:
        row = conn.execute("SELECT * FROM drafts WHERE id = ?", (draft_id,)).fetchone()
    return None if row is None else _decode("drafts", row)


def log_request(
    path: Path,
    *,
    tenant_id: str | None,
    caller_id: str | None,
    tool: str,
    record_ids: list[str],
    outcome: str,
) -> None:
    """Append one line to the request log (what was asked, by whom, which records, result)."""
    with transaction(path, write=True) as conn:
        conn.execute(
            "INSERT INTO request_log (at, tenant_id, caller_id, tool, record_ids, outcome)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (utc_now(), tenant_id, caller_id, tool, json.dumps(list(record_ids)), outcome),
        )


def read_request_log(path: Path) -> list[dict[str, Any]]:
    """The request log, oldest first."""
    with transaction(path, write=False) as conn:
        rows = conn.execute("SELECT * FROM request_log ORDER BY id").fetchall()
    return [_decode("request_log", row) for row in rows]
