"""The retention policy: expire idle threads, prune old checkpoint versions of the rest, and
drop rows past their expiry (the bot's expired SSO tokens).

The copilot's own ``threads`` table decides which threads exist and which are idle; the
graph state of a thread is LangGraph's, and is only ever touched through the
checkpointer's public API (``langgraph-checkpoint-postgres`` 3.2), never with SQL on its
tables:

* an idle thread is deleted with :meth:`AsyncPostgresSaver.adelete_thread`, in the same
  transaction as its ``threads`` row (delegations, conversations and approval cards go
  with it by ``ON DELETE CASCADE``) and its idempotency keys;
* every other thread is pruned with :meth:`AsyncPostgresSaver.aprune` and the
  ``"keep_latest"`` strategy: per namespace, the newest checkpoint (the thread's state)
  is kept with its pending writes (an interrupted run's pending approvals) and the blobs
  it names; older versions, history only (time travel, which the copilot does not
  offer), go. LangGraph refuses to prune threads that use a ``DeltaChannel`` (their
  state depends on history): they are left alone and reported as skipped.

:func:`plan_retention` says what the policy keeps and removes without changing anything
(``python -m copilot retention status``); :func:`apply_retention` computes the same plan
and carries it out (``retention run``, and the daily timer). The plan's checkpoint counts
are read through :meth:`AsyncPostgresSaver.alist` (every namespace of a thread), and what
``keep_latest`` keeps is predicted from the same listing: the newest checkpoint of each
namespace, except a finished subgraph call's namespace, which goes whole.

Rows that expire by a column of their own are declared in the layers' data maps
(:mod:`copilot.persistence.data_map`, ``"expires"``), so the copilot prunes the bot's
``user_tokens`` without importing the bot. The audit log and the rejections are records
of what happened and are never touched here.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection, sql
from psycopg.errors import DeadlockDetected, SerializationFailure
from psycopg.rows import dict_row

from copilot.persistence import threads
from copilot.persistence.data_map import LayerDataMap, load_data_maps

logger = logging.getLogger(__name__)

_THREADS_SQL = (
    "SELECT thread_id, last_active_at, last_active_at < %s - %s AS idle FROM threads ORDER BY thread_id"
)

# Re-checked under the row lock the DELETE takes: a thread touched since it was listed
# stays (its activity waits for this transaction, then finds it either gone or kept).
_DELETE_IDLE_THREAD_SQL = (
    "DELETE FROM threads WHERE thread_id = %s AND last_active_at < %s - %s RETURNING thread_id"
)

# What a DeltaChannel leaves in checkpoint metadata (langgraph-checkpoint-postgres documents
# that keep_latest refuses such threads); read from the metadata alist returns.
_DELTA_METADATA_KEYS = ("counters_since_delta_snapshot", "delta_writes_versioned")


@dataclass(frozen=True)
class ThreadCheckpoints:
    """One thread's checkpoints (every namespace) and how many the policy removes."""

    thread_id: str
    checkpoints: int
    removes: int
    last_active_at: dt.datetime | None = None

    @property
    def keeps(self) -> int:
        return self.checkpoints - self.removes

    def to_json(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "checkpoints": self.checkpoints,
            "removes": self.removes,
            "keeps": self.keeps,
            "last_active_at": self.last_active_at.isoformat() if self.last_active_at else None,
        }


@dataclass(frozen=True)
class ExpiringRows:
    """Rows of a table with an expiry column: how many have expired, how many are live."""

    table: str
    expired: int
    live: int


@dataclass
class RetentionPlan:
    """What the policy keeps and removes, now (``retention status``)."""

    older_than: timedelta
    expired_threads: list[ThreadCheckpoints] = field(default_factory=list)
    """Idle longer than ``older_than``: deleted with all their state."""
    pruned_threads: list[ThreadCheckpoints] = field(default_factory=list)
    """Live threads with older checkpoint versions to remove."""
    kept_threads: list[ThreadCheckpoints] = field(default_factory=list)
    """Live threads already at their newest checkpoint per namespace: untouched."""
    skipped_threads: list[ThreadCheckpoints] = field(default_factory=list)
    """Live threads whose state uses a ``DeltaChannel``: LangGraph refuses to prune them."""
    expiring: list[ExpiringRows] = field(default_factory=list)

    @property
    def checkpoints_removed(self) -> int:
        return sum(t.checkpoints for t in self.expired_threads) + sum(t.removes for t in self.pruned_threads)

    @property
    def checkpoints_kept(self) -> int:
        return sum(t.keeps for t in self.pruned_threads) + sum(
            t.checkpoints for t in (*self.kept_threads, *self.skipped_threads)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "older_than_days": self.older_than / timedelta(days=1),
            "threads": {
                "expire": [t.to_json() for t in self.expired_threads],
                "prune": [t.to_json() for t in self.pruned_threads],
                "keep": [t.to_json() for t in self.kept_threads],
                "skip": [t.to_json() for t in self.skipped_threads],
            },
            "checkpoints": {"remove": self.checkpoints_removed, "keep": self.checkpoints_kept},
            "rows": {r.table: {"remove": r.expired, "keep": r.live} for r in self.expiring},
        }


@dataclass
class RetentionReport:
    """What one retention run removed."""

    expired_threads: list[str] = field(default_factory=list)
    """Threads idle longer than the retention period, deleted with all their state."""
    pruned_threads: list[str] = field(default_factory=list)
    """Remaining threads whose older checkpoint versions were removed."""
    skipped_threads: list[str] = field(default_factory=list)
    """Threads left untouched: their state uses a ``DeltaChannel`` (history-dependent),
    or a concurrent save or prune conflicted (the next run tries again)."""
    checkpoints_deleted: int = 0
    """Checkpoints the pruning removed, counted through the saver's ``alist`` before and
    after (a run saving meanwhile can make it an undercount, never an overcount)."""
    checkpoints_expired: int = 0
    """Checkpoints deleted with the expired threads (their side threads' included)."""
    rows_deleted: dict[str, int] = field(default_factory=dict)
    """Expired rows removed, per table (e.g. ``user_tokens``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "expired_threads": len(self.expired_threads),
            "pruned_threads": len(self.pruned_threads),
            "skipped_threads": self.skipped_threads,
            "checkpoints_deleted": self.checkpoints_deleted,
            "checkpoints_expired": self.checkpoints_expired,
            "rows_deleted": self.rows_deleted,
        }


async def plan_retention(
    conn: AsyncConnection[Any],
    saver: AsyncPostgresSaver,
    *,
    older_than: timedelta,
    now: datetime,
    maps: Sequence[LayerDataMap] | None = None,
) -> RetentionPlan:
    """What :func:`apply_retention` would remove at ``now`` (the service's clock, never the
    database's), and what it keeps; changes nothing."""
    _check(older_than)
    on_conn = AsyncPostgresSaver(conn=conn, serde=saver.serde)
    plan = RetentionPlan(older_than)
    for row in await _fetch_all(conn, _THREADS_SQL, (now, older_than)):
        thread_id = str(row["thread_id"])
        # After the first run most live threads hold one checkpoint: two reads tell, and
        # the full listing (every checkpoint's state) is only read when there is more.
        listed = await _listing(on_conn, thread_id, limit=2)
        if len(listed) == 2 or row["idle"]:
            listed = await _listing(on_conn, thread_id)
        if row["idle"]:
            side = await _listing(on_conn, threads.side_thread_id(thread_id))
            plan.expired_threads.append(
                ThreadCheckpoints(
                    thread_id, len(listed) + len(side), len(listed) + len(side), row["last_active_at"]
                )
            )
            continue
        entry = ThreadCheckpoints(thread_id, len(listed), _keep_latest_removes(listed), row["last_active_at"])
        if any(key in (c.metadata or {}) for c in listed for key in _DELTA_METADATA_KEYS):
            plan.skipped_threads.append(ThreadCheckpoints(thread_id, len(listed), 0, row["last_active_at"]))
        elif entry.removes:
            plan.pruned_threads.append(entry)
        else:
            plan.kept_threads.append(entry)
    for table, column in _expiring_tables(maps):
        counts = await _fetch_all(
            conn,
            sql.SQL(
                "SELECT count(*) FILTER (WHERE {c} < %(now)s) AS expired,"
                " count(*) FILTER (WHERE {c} >= %(now)s) AS live FROM {t}"
            ).format(c=sql.Identifier(column), t=sql.Identifier(table)),
            {"now": now},
        )
        plan.expiring.append(ExpiringRows(table, int(counts[0]["expired"]), int(counts[0]["live"])))
    return plan


async def apply_retention(
    conn: AsyncConnection[Any],
    saver: AsyncPostgresSaver,
    *,
    older_than: timedelta,
    now: datetime,
    maps: Sequence[LayerDataMap] | None = None,
) -> RetentionReport:
    """Carry out the policy: expire threads idle longer than ``older_than``, prune the others
    to their newest checkpoint per namespace, delete expired rows.

    ``saver`` is the checkpointer whose threads these are; its operations run on ``conn``
    (an autocommit connection, e.g. from the app pool), so deleting one idle thread is one
    transaction with its copilot rows, and no second connection is needed. Each thread
    is expired or pruned in its own transaction, so a long run never holds many locks and
    a failure leaves every other thread consistent.
    """
    plan = await plan_retention(conn, saver, older_than=older_than, now=now, maps=maps)
    on_conn = AsyncPostgresSaver(conn=conn, serde=saver.serde)
    report = RetentionReport()
    for entry in plan.expired_threads:
        if await _expire_thread(conn, on_conn, entry.thread_id, older_than, now):
            report.expired_threads.append(entry.thread_id)
            report.checkpoints_expired += entry.checkpoints
    report.skipped_threads = [t.thread_id for t in plan.skipped_threads]
    for entry in plan.pruned_threads:
        await _prune_thread(on_conn, entry, report)
    for table, column in _expiring_tables(maps):
        cur = await conn.execute(
            sql.SQL("DELETE FROM {} WHERE {} < %s").format(sql.Identifier(table), sql.Identifier(column)),
            (now,),
        )
        report.rows_deleted[table] = max(cur.rowcount, 0)
    return report


def _check(older_than: timedelta) -> None:
    if older_than <= timedelta(0):
        raise ValueError("older_than must be positive: every thread would be idle")


def _expiring_tables(maps: Sequence[LayerDataMap] | None) -> list[tuple[str, str]]:
    return [(t.table, t.expires) for m in (maps or load_data_maps()) for t in m.tables if t.expires]


async def _expire_thread(
    conn: AsyncConnection[Any],
    saver: AsyncPostgresSaver,
    thread_id: str,
    older_than: timedelta,
    now: datetime,
) -> bool:
    async with conn.transaction():
        if not await _fetch_all(conn, _DELETE_IDLE_THREAD_SQL, (thread_id, now, older_than)):
            return False  # touched since it was listed: kept
        await conn.execute("DELETE FROM idempotency_keys WHERE thread_id = %s", (thread_id,))
        await saver.adelete_thread(thread_id)
        # A side run cut short by a crash may have left its side thread behind.
        await saver.adelete_thread(threads.side_thread_id(thread_id))
    return True


async def _prune_thread(saver: AsyncPostgresSaver, entry: ThreadCheckpoints, report: RetentionReport) -> None:
    # The plan's count is the "before": a run saving since then can make the count of
    # deleted checkpoints an undercount, never an overcount.
    thread_id, before = entry.thread_id, entry.checkpoints
    try:
        await saver.aprune([thread_id], strategy="keep_latest")
    except NotImplementedError:
        # keep_latest refuses threads that use a DeltaChannel (one the metadata check missed).
        report.skipped_threads.append(thread_id)
        return
    except (SerializationFailure, DeadlockDetected) as exc:
        logger.warning(
            "retention: pruning %s conflicted with a concurrent write, retried next run: %s", thread_id, exc
        )
        report.skipped_threads.append(thread_id)
        return
    deleted = max(before - len(await _listing(saver, thread_id)), 0)
    if deleted:
        report.pruned_threads.append(thread_id)
        report.checkpoints_deleted += deleted


async def _listing(saver: AsyncPostgresSaver, thread_id: str, *, limit: int | None = None) -> list[Any]:
    # No checkpoint_ns: every namespace of the thread, newest first within each.
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    return [checkpoint async for checkpoint in saver.alist(config, limit=limit)]


def _keep_latest_removes(listed: Sequence[Any]) -> int:
    """How many of a thread's checkpoints ``keep_latest`` removes: all but the newest of each
    namespace, and the whole namespace of a subgraph call (``ns`` with a task id after
    ``:``) that started from a saved root checkpoint other than the root's newest."""
    newest: dict[str, Any] = {}
    count: dict[str, int] = {}
    root_ids: set[str] = set()
    for c in listed:
        ns = c.config["configurable"].get("checkpoint_ns", "")
        identifier = c.config["configurable"]["checkpoint_id"]
        count[ns] = count.get(ns, 0) + 1
        if ns not in newest or identifier > newest[ns].config["configurable"]["checkpoint_id"]:
            newest[ns] = c
        if ns == "":
            root_ids.add(identifier)
    root_head = newest[""].config["configurable"]["checkpoint_id"] if "" in newest else None
    removes = 0
    for ns, head in newest.items():
        root = ((head.metadata or {}).get("parents") or {}).get("")
        if ":" in ns and root in root_ids and root != root_head:
            removes += count[ns]
        else:
            removes += count[ns] - 1
    return removes


async def _fetch_all(conn: AsyncConnection[Any], query: Any, params: Any) -> list[dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()
