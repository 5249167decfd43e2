"""The sandbox CRM's SQLite store: connections, schema, reset/export, drafts, request log,
idempotency records and per-user CRM access overrides.

Many threads (the MCP layer runs service calls in a thread pool) and several
processes (server, CLI, tests) share one database file, so each thread keeps a
connection of its own (reopened when the file is replaced), the file runs in WAL mode
(readers never block the writer) and writes take the write lock up front with
``BEGIN IMMEDIATE`` (no lock upgrades mid-transaction, which is where SQLite deadlocks
come from).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
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
    phone TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT ''
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
    created_at TEXT NOT NULL,
    idempotency_key TEXT,
    sent_at TEXT
);
CREATE INDEX IF NOT EXISTS ix_drafts_owner ON drafts(tenant_id, owner_id);
CREATE TABLE IF NOT EXISTS events (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id),
    organizer_id TEXT NOT NULL,
    subject TEXT NOT NULL,
    start_at TEXT NOT NULL,
    end_at TEXT NOT NULL,
    is_online INTEGER NOT NULL,
    attendees TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_events_tenant_start ON events(tenant_id, start_at);
CREATE TABLE IF NOT EXISTS request_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    tenant_id TEXT,
    caller_id TEXT,
    tool TEXT NOT NULL,
    record_ids TEXT NOT NULL,
    outcome TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS applied_requests (
    tenant_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    caller_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    args_hash TEXT NOT NULL,
    result_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key)
);
-- What the Dataverse face (sandbox/dataverse) knows of an activity beyond the CRM's own
-- columns: its state/status pair and schedule, and its activity parties. Side tables, so
-- the CRM's activities table (and its seed) stay as they were (no row: derived defaults).
-- A write key the copilot stamps on a row it updates (Dataverse: a custom string column on
-- opportunity, CRM_DATAVERSE_KEY_COLUMN), so a crashed update is found by its key.
CREATE TABLE IF NOT EXISTS record_keys (
    record_type TEXT NOT NULL,
    record_id TEXT NOT NULL,
    key_value TEXT NOT NULL,
    PRIMARY KEY (record_type, record_id)
);
CREATE TABLE IF NOT EXISTS activity_states (
    activity_id TEXT PRIMARY KEY,
    statecode INTEGER NOT NULL,
    statuscode INTEGER NOT NULL,
    scheduled_start TEXT,
    scheduled_end TEXT
);
CREATE TABLE IF NOT EXISTS activity_parties (
    activity_id TEXT NOT NULL,
    participation_type INTEGER NOT NULL,
    party_type TEXT NOT NULL,
    party_id TEXT NOT NULL,
    PRIMARY KEY (activity_id, participation_type, party_type, party_id)
);
-- Each record's change history (what Dataverse's audit table keeps): one row per version a
-- write made, with who and when, and each changed field's old and new value (JSON
-- {"field": [old, new]}, old values null on a create). Written by every write surface.
CREATE TABLE IF NOT EXISTS record_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL,
    record_type TEXT NOT NULL,
    record_id TEXT NOT NULL,
    version INTEGER,
    changed_at TEXT NOT NULL,
    changed_by TEXT NOT NULL,
    operation TEXT NOT NULL,
    changes TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_record_history_record ON record_history(record_type, record_id);
CREATE TABLE IF NOT EXISTS user_overrides (
    user_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    crm_access INTEGER NOT NULL,
    updated_at TEXT NOT NULL
);
"""

# Run after SCHEMA: they depend on columns that older databases gain in ``_migrate``.
POST_MIGRATION_SCHEMA = """
CREATE UNIQUE INDEX IF NOT EXISTS ux_drafts_idempotency
    ON drafts(tenant_id, owner_id, idempotency_key);
"""

# Export order; also the drop order on reset (children before parents).
TABLES: tuple[str, ...] = (
    "tenants",
    "users",
    "accounts",
    "contacts",
    "opportunities",
    "activities",
    "activity_states",
    "activity_parties",
    "record_keys",
    "shares",
    "drafts",
    "events",
    "request_log",
    "applied_requests",
    "record_history",
    "user_overrides",
)
_JSON_COLUMNS = {
    "drafts": ("to_recipients",),
    "events": ("attendees",),
    "request_log": ("record_ids",),
    "applied_requests": ("result_json",),
    "record_history": ("changes",),
}
_ORDER_BY = {
    "shares": "tenant_id, record_type, record_id, user_id",
    "applied_requests": "tenant_id, created_at, idempotency_key",
    "user_overrides": "user_id",
    "activity_states": "activity_id",
    "record_keys": "record_type, record_id",
    "activity_parties": "activity_id, participation_type, party_type, party_id",
}


def utc_now() -> str:
    """Current time as the store writes timestamps: ISO 8601, UTC, second precision, ``Z``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def record_change(
    conn: sqlite3.Connection,
    *,
    tenant_id: str,
    record_type: str,
    record_id: str,
    version: int | None,
    changed_by: str,
    changes: dict[str, tuple[Any, Any]],
    operation: str = "update",
    changed_at: str | None = None,
) -> None:
    """Keep one version of a record in its history (no row when nothing changed)."""
    if not changes:
        return
    conn.execute(
        "INSERT INTO record_history (tenant_id, record_type, record_id, version, changed_at, changed_by,"
        " operation, changes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            tenant_id,
            record_type,
            record_id,
            version,
            changed_at or utc_now(),
            changed_by,
            operation,
            json.dumps({k: list(v) for k, v in changes.items()}, default=str),
        ),
    )


def record_history(conn: sqlite3.Connection, record_type: str, record_id: str) -> list[dict[str, Any]]:
    """A record's kept versions, oldest first (``changes`` decoded: field → [old, new])."""
    rows = conn.execute(
        "SELECT * FROM record_history WHERE record_type = ? AND record_id = ? ORDER BY changed_at, id",
        (record_type, record_id),
    ).fetchall()
    return [_decode("record_history", row) for row in rows]


def _dict_row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    # Plain dicts: JSON-serialisable as they are and usable as Mappings (.get) by callers.
    return {column[0]: value for column, value in zip(cursor.description, row, strict=True)}


def connect(path: Path) -> sqlite3.Connection:
    """A new connection in autocommit mode (transactions are explicit, see ``transaction``)."""
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    conn.row_factory = _dict_row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    # In WAL mode NORMAL loses no committed transaction when a process dies (only on a
    # power cut), and spares a disk flush per commit: the request log commits per call.
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


_threads = threading.local()


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def _thread_connection(path: Path) -> sqlite3.Connection:
    """This thread's open connection to ``path``, reopened when the file was replaced.

    Kept open because opening one per operation costs more than the operation, and
    because closing the last connection to a WAL database checkpoints and deletes the
    WAL file: once per request, with a connection per operation.
    """
    open_connections: dict[str, tuple[sqlite3.Connection, tuple[int, int] | None]]
    open_connections = getattr(_threads, "connections", None) or {}
    _threads.connections = open_connections
    key = str(path)
    identity = _file_identity(path)
    cached = open_connections.get(key)
    if cached is not None:
        conn, opened_on = cached
        if identity is not None and identity == opened_on and not conn.in_transaction:
            return conn
        del open_connections[key]
        conn.close()
    conn = connect(path)
    open_connections[key] = (conn, _file_identity(path))
    return conn


def _forget_thread_connection(path: Path, conn: sqlite3.Connection) -> None:
    open_connections = getattr(_threads, "connections", None) or {}
    cached = open_connections.get(str(path))
    if cached is not None and cached[0] is conn:
        del open_connections[str(path)]
    conn.close()


@contextmanager
def transaction(path: Path, write: bool) -> Iterator[sqlite3.Connection]:
    """One transaction on this thread's connection; commits on success, rolls back on error.

    Writers use ``BEGIN IMMEDIATE`` so that a read-then-write (version checks,
    idempotent upserts) cannot interleave with another writer.
    """
    conn = _thread_connection(path)
    try:
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    except BaseException:
        _forget_thread_connection(path, conn)
        raise
    try:
        yield conn
    except BaseException:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            # SQLite may have rolled back already (a full disk, an interrupt); the
            # connection is not reused, and the error that got here is the one raised.
            _forget_thread_connection(path, conn)
        raise
    try:
        conn.execute("COMMIT")
    except BaseException:
        _forget_thread_connection(path, conn)
        raise


def _enable_wal(path: Path, attempts: int = 100) -> None:
    # journal_mode is a property of the file and cannot change inside a transaction. The
    # switch needs an exclusive lock and SQLite answers "locked" at once (busy_timeout does
    # not cover it) while another connection switches or seeds: retry briefly.
    for attempt in range(attempts):
        conn = connect(path)
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()["journal_mode"]).lower() == "wal":
                return
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
        finally:
            conn.close()
        time.sleep(0.05)


def ensure_schema(path: Path, today: date | None = None) -> None:
    """Create the schema if missing and seed an empty database (idempotent, race-safe),
    from ``today`` (``SandboxSettings.today()``; None = the UTC date).

    Creation and the emptiness check run in one ``BEGIN IMMEDIATE`` transaction, so
    two processes starting together seed exactly once.
    """
    from sandbox.seed import seed, seed_calendar  # seed imports this module's helpers

    path.parent.mkdir(parents=True, exist_ok=True)
    _enable_wal(path)
    with transaction(path, write=True) as conn:
        _create_schema(conn)
        if conn.execute("SELECT COUNT(*) AS n FROM tenants").fetchone()["n"] == 0:
            seed(conn, today)
        elif conn.execute("SELECT COUNT(*) AS n FROM events").fetchone()["n"] == 0:
            # A database seeded before the sandbox had a calendar: its meetings, from today.
            seed_calendar(conn, today)


def _create_schema(conn: sqlite3.Connection) -> None:
    # executescript() would COMMIT the open transaction; run statements one by one.
    for statement in SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)
    _migrate(conn)
    for statement in POST_MIGRATION_SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a database created by an older sandbox up to the current columns."""
    draft_columns = {row["name"] for row in conn.execute("PRAGMA table_info(drafts)")}
    if "idempotency_key" not in draft_columns:
        conn.execute("ALTER TABLE drafts ADD COLUMN idempotency_key TEXT")
    if "sent_at" not in draft_columns:
        conn.execute("ALTER TABLE drafts ADD COLUMN sent_at TEXT")
    contact_columns = {row["name"] for row in conn.execute("PRAGMA table_info(contacts)")}
    if "created_at" not in contact_columns:
        # An older database's contacts: when they were added is unknown ('').
        conn.execute("ALTER TABLE contacts ADD COLUMN created_at TEXT NOT NULL DEFAULT ''")


def reset(path: Path, today: date | None = None) -> None:
    """Drop every table, recreate the schema and reseed, atomically."""
    from sandbox.seed import seed

    path.parent.mkdir(parents=True, exist_ok=True)
    _enable_wal(path)
    with transaction(path, write=True) as conn:
        conn.execute("PRAGMA defer_foreign_keys = ON")
        for table in reversed(TABLES):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        _create_schema(conn)
        seed(conn, today)


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


def list_events(path: Path, *, tenant_id: str, start_before: str, end_after: str) -> list[dict[str, Any]]:
    """The tenant's events overlapping a window (ISO UTC strings), by start then id."""
    with transaction(path, write=False) as conn:
        rows = conn.execute(
            "SELECT * FROM events WHERE tenant_id = ? AND start_at < ? AND end_at > ? ORDER BY start_at, id",
            (tenant_id, start_before, end_after),
        ).fetchall()
    return [_decode("events", row) for row in rows]


class DraftIdempotencyMismatch(Exception):
    """An idempotency key was already used for a draft with a different payload."""

    def __init__(self, existing: dict[str, Any]) -> None:
        super().__init__(f"idempotency key already used for draft {existing['id']}")
        self.existing = existing


_DRAFT_PAYLOAD = ("subject", "body_content_type", "body", "to_recipients")


def create_draft(
    path: Path,
    *,
    tenant_id: str,
    owner_id: str,
    subject: str,
    body_content_type: str,
    body: str,
    to_recipients: list[str],
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """Store a mail draft (the mailbox never sends) and return it.

    With an ``idempotency_key`` a repeat of the same payload by the same owner returns
    the draft stored the first time; another payload raises ``DraftIdempotencyMismatch``.
    """
    draft, _created = store_draft(
        path,
        tenant_id=tenant_id,
        owner_id=owner_id,
        subject=subject,
        body_content_type=body_content_type,
        body=body,
        to_recipients=to_recipients,
        idempotency_key=idempotency_key,
    )
    return draft


def store_draft(
    path: Path,
    *,
    tenant_id: str,
    owner_id: str,
    subject: str,
    body_content_type: str,
    body: str,
    to_recipients: list[str],
    idempotency_key: str | None = None,
) -> tuple[dict[str, Any], bool]:
    """Like ``create_draft``, also telling whether a new draft was stored (``False`` = replay).

    The key lookup and the insert run under one ``BEGIN IMMEDIATE``, so concurrent
    identical requests store one draft; the unique index on (tenant, owner, key)
    backs that up against writers that bypass this function.
    """
    wanted = {
        "subject": subject,
        "body_content_type": body_content_type,
        "body": body,
        "to_recipients": list(to_recipients),
    }
    for _attempt in range(2):
        try:
            return _store_draft_once(path, tenant_id, owner_id, wanted, idempotency_key)
        except sqlite3.IntegrityError:
            if idempotency_key is None:
                raise
    raise RuntimeError("could not store the draft")


def _store_draft_once(
    path: Path, tenant_id: str, owner_id: str, wanted: dict[str, Any], idempotency_key: str | None
) -> tuple[dict[str, Any], bool]:
    with transaction(path, write=True) as conn:
        if idempotency_key is not None:
            row = conn.execute(
                "SELECT * FROM drafts WHERE tenant_id = ? AND owner_id = ? AND idempotency_key = ?",
                (tenant_id, owner_id, idempotency_key),
            ).fetchone()
            if row is not None:
                existing = _decode("drafts", row)
                if any(existing[k] != wanted[k] for k in _DRAFT_PAYLOAD):
                    raise DraftIdempotencyMismatch(existing)
                return existing, False
        draft_id = f"draft-{uuid.uuid4().hex}"
        conn.execute(
            "INSERT INTO drafts (id, tenant_id, owner_id, subject, body_content_type, body,"
            " to_recipients, created_at, idempotency_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                draft_id,
                tenant_id,
                owner_id,
                wanted["subject"],
                wanted["body_content_type"],
                wanted["body"],
                json.dumps(wanted["to_recipients"]),
                utc_now(),
                idempotency_key,
            ),
        )
        row = conn.execute("SELECT * FROM drafts WHERE id = ?", (draft_id,)).fetchone()
    return _decode("drafts", row), True


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


def delete_draft(path: Path, *, draft_id: str) -> bool:
    """Delete a draft; False when there was none of that id."""
    with transaction(path, write=True) as conn:
        return conn.execute("DELETE FROM drafts WHERE id = ?", (draft_id,)).rowcount > 0


def mark_draft_sent(path: Path, *, draft_id: str) -> dict[str, Any] | None:
    """Record that the user sent a draft from their own mail client (the sandbox never
    sends): it stays in the mailbox as a sent message. None when there is no such draft."""
    with transaction(path, write=True) as conn:
        conn.execute("UPDATE drafts SET sent_at = coalesce(sent_at, ?) WHERE id = ?", (utc_now(), draft_id))
        row = conn.execute("SELECT * FROM drafts WHERE id = ?", (draft_id,)).fetchone()
    return None if row is None else _decode("drafts", row)


def add_contact(
    path: Path, *, account_id: str, name: str, title: str, email: str, phone: str, created_at: str
) -> dict[str, Any] | None:
    """Add a contact to an account (an admin's way: the CRM's own tools keep contacts read-only),
    created at ``created_at``; None when there is no such account."""
    with transaction(path, write=True) as conn:
        account = conn.execute("SELECT tenant_id FROM accounts WHERE id = ?", (account_id,)).fetchone()
        if account is None:
            return None
        added = conn.execute("SELECT COUNT(*) AS n FROM contacts WHERE id LIKE 'con-added-%'").fetchone()
        contact_id = f"con-added-{added['n'] + 1:04d}"
        conn.execute(
            "INSERT INTO contacts (id, tenant_id, account_id, name, title, email, phone, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (contact_id, account["tenant_id"], account_id, name, title, email, phone, created_at),
        )
        row = conn.execute("SELECT * FROM contacts WHERE id = ?", (contact_id,)).fetchone()
    return dict(row)


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


def crm_access_override(path: Path, user_id: str) -> bool | None:
    """A runtime override of a user's CRM access (``None`` = none, the directory decides).

    Never creates the database: an identity provider running without a CRM store
    (as in some tests) simply has no overrides.
    """
    if not path.exists():
        return None
    try:
        with transaction(path, write=False) as conn:
            row = conn.execute(
                "SELECT crm_access FROM user_overrides WHERE user_id = ?", (user_id,)
            ).fetchone()
    except sqlite3.OperationalError:  # a database without the table (not initialised yet)
        return None
    return None if row is None else bool(row["crm_access"])


def set_crm_access(path: Path, *, user_id: str, tenant_id: str, enabled: bool, default: bool) -> None:
    """Record that ``user_id``'s CRM access is ``enabled``; back to ``default`` = no override row."""
    with transaction(path, write=True) as conn:
        if enabled == default:
            conn.execute("DELETE FROM user_overrides WHERE user_id = ?", (user_id,))
        else:
            conn.execute(
                "INSERT INTO user_overrides (user_id, tenant_id, crm_access, updated_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (user_id) DO UPDATE"
                " SET crm_access = excluded.crm_access, updated_at = excluded.updated_at",
                (user_id, tenant_id, int(enabled), utc_now()),
            )
