"""The append-only, HMAC-chained and anchored audit log of executed writes (invariant 6).

Each row records the id of the key it was chained with (``key_id``), and its
``row_hash`` is ``HMAC-SHA256(key, id, key_id, prev_hash, canonical JSON of the row)``,
where ``prev_hash`` is the previous row's ``row_hash`` (``GENESIS`` for the first), in id
order. The key lives outside the database (:mod:`copilot.persistence.audit_keys`), so
nobody with only database rights (the app login, the owner, a superuser past the grants
and triggers of migration 0002) can write a row that verifies: a changed field, a row
removed, reordered, renumbered or slipped in, or a forged row with a correctly computed
plain hash, is found by :func:`verify`.

The newest rows are protected by anchors (:mod:`copilot.persistence.audit_anchor`):
signed checkpoints of the head in append-only storage outside the database. A row is
anchored *after its commit* (an anchor of a row that may still roll back would later read
as a removed row): :func:`append` anchors the committed head itself when its transaction
was the outermost one, and a caller that appends inside its own transaction (the
idempotency claim's) calls :func:`anchor_committed` once that commits. Both do so every
``COPILOT_AUDIT_ANCHOR_EVERY`` appends. When that anchor is lost (the store failed, the
process died between commit and anchor), :func:`seal_head`, run by the Function App's
``audit_seal`` timer every :data:`SEAL_INTERVAL`, verifies the log and anchors its head; so
every committed row is anchored within one seal interval, and from then on its removal is
reported by the next verify (the timer's own included). ``python -m copilot audit verify``
also anchors the head it verified, and ``audit anchor`` writes one on demand.
:func:`verify` refuses a log that no longer has an anchored row: it was truncated back to
that anchor.

Rows written before migration ``audit_hmac`` have no key id and the old unkeyed
``sha256(prev_hash + row)`` hash. They are accepted only as the chain's prefix: before the
first keyed row and, once an anchor exists, not past the newest anchored row (the first
append after that migration anchors them), so an unkeyed row cannot be forged after that.

The hash is computed from the values exactly as PostgreSQL stores and returns them:
before inserting, the JSON fields make one round trip through ``jsonb`` (which reorders
keys and rewrites numbers, e.g. ``1e+20`` becomes ``100000000000000000000``), so what
:func:`append` hashes is what :func:`verify` reads back.

Which keys and anchor store a connection uses is an :class:`AuditConfig`: pass it
explicitly, or :func:`bind` it to the connection (the app pool binds every connection it
opens, so the write guard's ``append(conn, entry)`` needs nothing more).
"""

from __future__ import annotations

import hashlib
import json
import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg.errors import UndefinedColumn, UndefinedTable
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from copilot.errors import (
    AnchorStoreAltered,
    AnchorStoreError,
    AuditTamperDetected,
    ConfigurationError,
    MigrationError,
)
from copilot.persistence.audit_anchor import (
    Anchor,
    AnchorCheck,
    AnchorStore,
    chain_id,
    check_anchors,
    default_anchor_store,
    sign_anchor,
)
from copilot.persistence.audit_keys import AuditKey, AuditKeyring, load_keyring
from copilot.settings import Settings

logger = logging.getLogger(__name__)

GENESIS = "GENESIS"

SEAL_INTERVAL = timedelta(minutes=5)
"""How often the Function App's ``audit_seal`` timer runs :func:`seal_head` (its NCRONTAB
schedule is derived from this): the bound on how long a committed row can stay unanchored,
and on how long a removed anchored row can go unreported."""

# Arbitrary but fixed: every appender serialises on it so the chain has one head.
_APPEND_LOCK_KEY = 0x0C0_0A0D_0001

_JSON_FIELDS = ("original_args", "edited_args", "crm_response")
_TIME_FIELDS = ("proposed_at", "decided_at", "executed_at")
_VERIFY_BATCH = 1000
_ROW_PREFIX = "copilot-audit-row/v1"


@dataclass(frozen=True)
class AuditEntry:
    """One executed write, as recorded (all the audit columns but id and the chain columns)."""

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
    undoes_audit_id: int | None = None
    """For an ``undo_write``: the audit id of the write it reversed (migration ``undo``)."""
    approver_aad_id: str | None = None
    """Who decided the write: ``rep_aad_id`` (whose write it is) or, through an approval
    delegation, the delegate (migration ``delegation``)."""


_COLUMNS = tuple(f.name for f in fields(AuditEntry))
# Columns added after rows were already chained: hashed only when set, so every row
# written before them (where they are NULL) still hashes as it was written.
_HASHED_WHEN_SET = frozenset({"undoes_audit_id", "approver_aad_id"})
_SELECT_ROWS = (
    f"SELECT id, {', '.join(_COLUMNS)}, key_id, prev_hash, row_hash FROM audit_log"
    " WHERE id > %s ORDER BY id LIMIT %s"
)
_SELECT_HEAD = "SELECT id, row_hash FROM audit_log ORDER BY id DESC LIMIT 1"
# One statement, so the head and its row count come from one snapshot.
_SELECT_COMMITTED_HEAD = (
    "SELECT id, row_hash, (SELECT count(*) FROM audit_log AS a WHERE a.id <= h.id) AS rows"
    " FROM audit_log AS h ORDER BY id DESC LIMIT 1"
)
_NEXT_ID = "SELECT nextval(pg_get_serial_sequence('audit_log', 'id')) AS id"
_INSERT = (
    f"INSERT INTO audit_log (id, {', '.join(_COLUMNS)}, key_id, prev_hash, row_hash)"
    f" VALUES (%(id)s, {', '.join(f'%({name})s' for name in _COLUMNS)}, %(key_id)s, %(prev_hash)s,"
    " %(row_hash)s)"
)  # column names come from the dataclass, never from input
_ROUND_TRIP_JSON = "SELECT %s::jsonb AS original_args, %s::jsonb AS edited_args, %s::jsonb AS crm_response"
_LOCK = "SELECT pg_advisory_xact_lock(%s)"


@dataclass
class AuditConfig:
    """The keys a connection chains and verifies with, and where its anchors go."""

    keyring: AuditKeyring
    anchors: AnchorStore | None
    """``None``: never anchor (and verify cannot detect a removed tail)."""
    anchor_every: int = 1
    """Anchor the committed head after every N appends through this config; 0 = never from
    append (only the seal timer, ``audit verify`` and ``audit anchor`` anchor)."""
    _appends_since_anchor: int = field(default=0, init=False, repr=False)


def audit_config(settings: Settings) -> AuditConfig:
    """The audit configuration for these settings; raises ConfigurationError when a
    deployment lacks its key or anchor store."""
    return AuditConfig(
        keyring=load_keyring(settings),
        anchors=default_anchor_store(settings),
        anchor_every=settings.audit_anchor_every,
    )


_bound: weakref.WeakKeyDictionary[AsyncConnection[Any], AuditConfig] = weakref.WeakKeyDictionary()


def bind(conn: AsyncConnection[Any], config: AuditConfig) -> None:
    """Make ``config`` the default for :func:`append` / :func:`verify` on ``conn``."""
    _bound[conn] = config


def _config_for(conn: AsyncConnection[Any], config: AuditConfig | None) -> AuditConfig:
    if config is not None:
        return config
    found = _bound.get(conn)
    if found is None:
        raise ConfigurationError(
            "no audit key for this connection: pass an AuditConfig or use the app pool (which binds one)"
        )
    return found


@dataclass(frozen=True)
class StoredAuditEntry:
    """An audit row as read back: the entry plus its id and chain columns."""

    id: int
    entry: AuditEntry
    key_id: str | None
    """``None`` for a row written before migration ``audit_hmac`` (unkeyed hash)."""
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
    """The newest row's hash (``GENESIS`` when empty); set only when the log verifies."""
    truncated: bool = False
    """Rows the last anchor names are gone: the log was cut back to (at least) that anchor."""
    anchors_checked: int = 0
    last_anchor: Anchor | None = None
    """The newest anchor of this chain (``None``: never anchored, a removed tail goes unseen)."""
    chain: str | None = None
    anchor_store: str | None = None


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
        name: _utc_iso(values[name], name) if name in _TIME_FIELDS else values[name]
        for name in _COLUMNS
        if name not in _HASHED_WHEN_SET or values.get(name) is not None
    }
    return json.dumps(normalised, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def legacy_row_hash(prev_hash: str, values: Mapping[str, Any]) -> str:
    """``sha256(prev_hash + canonical_json(values))`` as hex: rows before migration ``audit_hmac``.

    Anyone can compute it, which is why new rows are chained with :func:`keyed_row_hash`.
    """
    return hashlib.sha256((prev_hash + canonical_json(values)).encode("ascii")).hexdigest()


def _keyed_message(row_id: int, key_id: str, prev_hash: str, values: Mapping[str, Any]) -> bytes:
    # Newline-separated: the id is digits, key ids and hashes cannot hold a newline, and
    # canonical JSON escapes them; the id is covered so a row cannot be renumbered.
    return "\n".join((_ROW_PREFIX, str(row_id), key_id, prev_hash, canonical_json(values))).encode("ascii")


def keyed_row_hash(key: AuditKey, row_id: int, prev_hash: str, values: Mapping[str, Any]) -> str:
    """``HMAC-SHA256(key, id, key id, prev_hash, canonical_json(values))`` as hex."""
    return key.mac(_keyed_message(row_id, key.key_id, prev_hash, values))


def _entry_values(entry: AuditEntry) -> dict[str, Any]:
    return {name: getattr(entry, name) for name in _COLUMNS}


async def append(conn: AsyncConnection[Any], entry: AuditEntry, *, config: AuditConfig | None = None) -> int:
    """Append one row to the chain, keyed with the newest audit key; returns its id.

    Runs in a transaction on ``conn`` (a savepoint if ``conn`` is already in one, e.g. an
    idempotency claim's, and then the row commits with it). When that transaction was the
    outermost one, the row is committed on return and anchored (:func:`anchor_committed`);
    inside a caller's transaction, the caller calls :func:`anchor_committed` after its
    commit. A failing anchor store is logged, never fails the append (the write it records
    has already happened); the seal timer anchors the row within :data:`SEAL_INTERVAL`.
    """
    if entry.decision not in ("approve", "edit"):
        raise ValueError(f"audit decision must be 'approve' or 'edit', not {entry.decision!r}")
    cfg = _config_for(conn, config)
    key = cfg.keyring.current
    values = _entry_values(entry)
    canonical_json(values)  # refuse naive timestamps before touching the database
    outermost = conn.info.transaction_status == TransactionStatus.IDLE
    async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        # What jsonb will hand back later, so the hash matches on verify.
        await cur.execute(_ROUND_TRIP_JSON, tuple(_jsonb(values[name]) for name in _JSON_FIELDS))
        stored_json = await cur.fetchone()
        assert stored_json is not None
        values.update(stored_json)
        # One appender at a time: the head read below stays the head until we commit.
        # Ids are taken under the lock too, so rows commit in id order.
        await cur.execute(_LOCK, (_APPEND_LOCK_KEY,))
        await cur.execute(_SELECT_HEAD)
        head = await cur.fetchone()
        prev_hash = GENESIS if head is None else str(head["row_hash"])
        await cur.execute(_NEXT_ID)
        next_id = await cur.fetchone()
        assert next_id is not None
        row_id = int(next_id["id"])
        params = {name: _jsonb(values[name]) if name in _JSON_FIELDS else values[name] for name in _COLUMNS}
        await cur.execute(
            _INSERT,
            {
                **params,
                "id": row_id,
                "key_id": key.key_id,
                "prev_hash": prev_hash,
                "row_hash": keyed_row_hash(key, row_id, prev_hash, values),
            },
        )
    cfg._appends_since_anchor += 1
    if outermost:
        await anchor_committed(conn, config=cfg)
    return row_id


async def anchor_committed(conn: AsyncConnection[Any], *, config: AuditConfig | None = None) -> Anchor | None:
    """Anchor the committed head, if this config's appends are due one; returns the anchor written.

    Call it after the transaction that appended has committed (``conn`` must not be in a
    transaction: an anchor of a row that then rolls back would read as a removed row). It
    anchors whatever head is committed now (a later row of another process covers ours: the
    chain runs through it). Nothing is due when ``anchor_every`` is 0 or fewer than
    ``anchor_every`` appends happened since the last anchor. A failing store is logged and
    the anchor stays due (the next append, or the seal timer, writes it).
    """
    cfg = _config_for(conn, config)
    if cfg.anchors is None or cfg.anchor_every == 0 or cfg._appends_since_anchor < cfg.anchor_every:
        return None
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise RuntimeError("anchor_committed runs after the audit row's transaction has committed")
    async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_SELECT_COMMITTED_HEAD)
        head = await cur.fetchone()
    if head is None:
        return None
    anchor = sign_anchor(
        cfg.keyring.current,
        chain=await chain_id(conn),
        last_id=int(head["id"]),
        head_hash=str(head["row_hash"]),
        rows=int(head["rows"]),
    )
    try:
        await cfg.anchors.append(anchor.to_record())
    except AnchorStoreError as exc:
        logger.warning(
            "audit head not anchored (retried on the next append; the seal timer anchors it within %s): %s",
            SEAL_INTERVAL,
            exc,
        )
        return None
    cfg._appends_since_anchor = 0
    return anchor


def _jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def _failure(checked: int, row_id: int | None, problem: str, **extra: Any) -> VerifyReport:
    return VerifyReport(ok=False, rows_checked=checked, first_bad_id=row_id, problem=problem, **extra)


async def verify(conn: AsyncConnection[Any], *, config: AuditConfig | None = None) -> VerifyReport:
    """Check the anchors' signatures, recompute the chain in id order, and compare it
    with the anchors; report the first thing that does not fit.

    Read-only: it never writes an anchor (see :func:`seal`).
    """
    cfg = _config_for(conn, config)
    chain = await chain_id(conn)
    store = None if cfg.anchors is None else cfg.anchors.location
    anchors = AnchorCheck()
    if cfg.anchors is not None:
        try:
            records = await cfg.anchors.read()
        except AnchorStoreAltered as exc:
            anchors = AnchorCheck(problem=f"the anchor store was altered: {exc}")
        else:
            anchors = check_anchors(records, cfg.keyring, chain, cfg.anchors.location)
    context: dict[str, Any] = {
        "anchors_checked": len(anchors.anchors),
        "last_anchor": anchors.latest,
        "chain": chain,
        "anchor_store": store,
    }
    if anchors.problem is not None:
        return _failure(0, None, anchors.problem, **context)
    by_row: dict[int, list[Anchor]] = {}
    for anchor in anchors.anchors:
        if anchor.last_id is not None:
            by_row.setdefault(anchor.last_id, []).append(anchor)
    # Unkeyed rows may only precede everything ever anchored (see the module docstring).
    latest = anchors.latest
    unkeyed_limit = None if latest is None else (latest.last_id or 0)

    expected_prev = GENESIS
    checked = 0
    last_id: int | None = None
    keyed_seen = False
    seen_anchored: set[int] = set()
    async with conn.cursor(row_factory=dict_row) as cur:
        while True:
            try:
                await cur.execute(_SELECT_ROWS, (-1 if last_id is None else last_id, _VERIFY_BATCH))
            except (UndefinedTable, UndefinedColumn) as exc:
                raise MigrationError(
                    "the audit log is missing or not migrated: run `python -m copilot db migrate`"
                ) from exc
            rows = await cur.fetchall()
            if not rows:
                break
            for row in rows:
                row_id = int(row["id"])
                problem = _row_problem(row, expected_prev, cfg.keyring, keyed_seen, unkeyed_limit)
                if problem is not None:
                    return _failure(checked, row_id, problem, last_id=last_id, **context)
                checked += 1
                keyed_seen = keyed_seen or row["key_id"] is not None
                for anchor in by_row.get(row_id, ()):
                    if anchor.head_hash != row["row_hash"] or anchor.rows != checked:
                        return _failure(
                            checked - 1,
                            row_id,
                            f"it does not match the anchor of {anchor.time.isoformat()} (anchored as row "
                            f"{anchor.rows} of the log with hash {anchor.head_hash[:16]}…; found as row "
                            f"{checked}): the log before it was rewritten",
                            last_id=last_id,
                            **context,
                        )
                    seen_anchored.add(row_id)
                expected_prev = str(row["row_hash"])
                last_id = row_id
    missing = sorted(set(by_row) - seen_anchored)
    if missing:
        gone = max(by_row[missing[-1]], key=lambda a: a.rows)
        end = "has no rows at all" if last_id is None else f"ends at row {last_id} ({checked} rows)"
        return _failure(
            checked,
            gone.last_id,
            f"the log was truncated back to the last anchor: the anchor of {gone.time.isoformat()} "
            f"names row {gone.last_id} ({gone.rows} rows, head {gone.head_hash[:16]}…), which the log "
            f"no longer has (it {end}): rows were removed",
            last_id=last_id,
            truncated=True,
            **context,
        )
    return VerifyReport(ok=True, rows_checked=checked, last_id=last_id, head_hash=expected_prev, **context)


def _row_problem(
    row: Mapping[str, Any],
    expected_prev: str,
    keyring: AuditKeyring,
    keyed_seen: bool,
    unkeyed_limit: int | None,
) -> str | None:
    if row["prev_hash"] != expected_prev:
        return "its prev_hash does not match the row before it (a row was deleted, inserted or reordered)"
    key_id = row["key_id"]
    if key_id is None:
        if keyed_seen:
            return "it has no key id after keyed rows: it was written outside the application (forged)"
        if unkeyed_limit is not None and int(row["id"]) > unkeyed_limit:
            return (
                "it has no key id and comes after the anchored head: it was written outside the application"
            )
        if legacy_row_hash(row["prev_hash"], row) != row["row_hash"]:
            return "its contents do not match its hash (a field was altered)"
        return None
    key = keyring.get(str(key_id))
    if key is None:
        return (
            f"its key id {key_id!r} is not among the configured audit keys {list(keyring.key_ids)}: "
            "configure that key (COPILOT_AUDIT_HMAC_KEYS), or the row was forged"
        )
    if not key.matches(
        _keyed_message(int(row["id"]), key.key_id, row["prev_hash"], row), str(row["row_hash"])
    ):
        return (
            "its contents do not match its HMAC (a field was altered, or the row was written "
            "without the audit key: forged)"
        )
    return None


async def assert_intact(conn: AsyncConnection[Any], *, config: AuditConfig | None = None) -> VerifyReport:
    """:func:`verify`, raising :class:`AuditTamperDetected` when the log does not verify."""
    report = await verify(conn, config=config)
    if not report.ok:
        where = f"at row {report.first_bad_id}" if report.first_bad_id is not None else "(anchors)"
        raise AuditTamperDetected(
            f"audit log TAMPERED {where}: {report.problem}",
            first_bad_id=report.first_bad_id,
            truncated=report.truncated,
        )
    return report


async def seal(
    conn: AsyncConnection[Any],
    report: VerifyReport,
    *,
    config: AuditConfig | None = None,
    only_if_advanced: bool = False,
    time: datetime | None = None,
) -> Anchor | None:
    """Anchor the head a successful :func:`verify` found; returns the anchor written.

    With ``only_if_advanced``, nothing is written when the newest anchor already names
    that head. ``time`` is the anchor's timestamp (default now). Refuses
    (AuditTamperDetected) to anchor a report that did not verify.
    """
    cfg = _config_for(conn, config)
    if not report.ok or report.head_hash is None:
        raise AuditTamperDetected("refusing to anchor an audit log that does not verify")
    if cfg.anchors is None:
        raise ConfigurationError("no anchor store is configured for the audit log")
    last = report.last_anchor
    if only_if_advanced and last is not None and last.last_id == report.last_id:
        return None
    anchor = sign_anchor(
        cfg.keyring.current,
        chain=report.chain or await chain_id(conn),
        last_id=report.last_id,
        head_hash=report.head_hash,
        rows=report.rows_checked,
        time=time,
    )
    await cfg.anchors.append(anchor.to_record())
    return anchor


async def anchor_now(conn: AsyncConnection[Any], *, config: AuditConfig | None = None) -> Anchor:
    """Verify the log, then anchor its head (``python -m copilot audit anchor``)."""
    report = await assert_intact(conn, config=config)
    anchor = await seal(conn, report, config=config)
    assert anchor is not None
    return anchor


@dataclass(frozen=True)
class SealResult:
    """What one :func:`seal_head` run found and wrote."""

    report: VerifyReport
    """The verification of the whole log (it passed)."""
    anchor: Anchor | None
    """The anchor written now; ``None`` when the newest anchor already named the head."""


async def seal_head(
    conn: AsyncConnection[Any], *, config: AuditConfig | None = None, now: datetime | None = None
) -> SealResult:
    """The seal timer's run: verify the whole log, then anchor its head if no anchor names it yet.

    Raises :class:`AuditTamperDetected` when the log does not verify (and anchors nothing):
    run every :data:`SEAL_INTERVAL`, this bounds both how long a committed row can stay
    unanchored and how long a removed anchored row goes unreported. ``now`` stamps the
    anchor (tests drive time through it). Raises :class:`AnchorStoreError` when the store
    cannot be read or appended to.
    """
    report = await assert_intact(conn, config=config)
    anchor = await seal(conn, report, config=config, only_if_advanced=True, time=now)
    return SealResult(report, anchor)


async def list_entries(
    conn: AsyncConnection[Any], *, thread_id: str | None = None, limit: int = 100
) -> list[StoredAuditEntry]:
    """The newest audit rows first, optionally for one thread."""
    where = "WHERE thread_id = %(thread_id)s" if thread_id is not None else ""
    return await _select_entries(conn, where, {"thread_id": thread_id, "limit": limit})


async def get_entry(conn: AsyncConnection[Any], audit_id: int) -> StoredAuditEntry | None:
    """One audit row by id, or None."""
    rows = await _select_entries(conn, "WHERE id = %(id)s", {"id": audit_id, "limit": 1})
    return rows[0] if rows else None


async def undone_by(conn: AsyncConnection[Any], audit_id: int) -> int | None:
    """The audit id of the undo that reversed row ``audit_id``, or None if it was not undone."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute("SELECT id FROM audit_log WHERE undoes_audit_id = %s", (audit_id,))
        row = await cur.fetchone()
    return None if row is None else int(row["id"])


async def recent_entries(
    conn: AsyncConnection[Any], *, tenant_id: str, rep_aad_id: str, since: datetime, limit: int = 10
) -> list[tuple[StoredAuditEntry, int | None]]:
    """The rep's own writes executed since ``since``, newest first, each with the id of the
    undo that reversed it (None if it was not undone)."""
    rows = await _select_entries(
        conn,
        "WHERE tenant_id = %(tenant)s AND rep_aad_id = %(rep)s AND executed_at >= %(since)s",
        {"tenant": tenant_id, "rep": rep_aad_id, "since": since, "limit": limit},
    )
    undone: dict[int, int] = {}
    if rows:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT id, undoes_audit_id FROM audit_log WHERE undoes_audit_id = ANY(%s)",
                ([r.id for r in rows],),
            )
            undone = {int(r["undoes_audit_id"]): int(r["id"]) for r in await cur.fetchall()}
    return [(row, undone.get(row.id)) for row in rows]


async def _select_entries(
    conn: AsyncConnection[Any], where: str, params: dict[str, Any]
) -> list[StoredAuditEntry]:
    # ``where`` is one of this module's fixed clauses, never input.
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT id, {', '.join(_COLUMNS)}, key_id, prev_hash, row_hash FROM audit_log {where}"
            " ORDER BY id DESC LIMIT %(limit)s",
            params,
        )
        rows = await cur.fetchall()
    return [
        StoredAuditEntry(
            id=int(row["id"]),
            entry=AuditEntry(**{name: row[name] for name in _COLUMNS}),
            key_id=None if row["key_id"] is None else str(row["key_id"]),
            prev_hash=str(row["prev_hash"]),
            row_hash=str(row["row_hash"]),
        )
        for row in rows
    ]
