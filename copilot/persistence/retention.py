"""The retention policy: expire idle threads, prune old checkpoint versions of the rest.

The copilot's own ``threads`` table decides which threads exist and which are idle; the
graph state of a thread is LangGraph's, and is only ever touched through the
checkpointer's API (``langgraph-checkpoint-postgres``), never with SQL on its tables:

* an idle thread is deleted with :meth:`AsyncPostgresSaver.adelete_thread`, in the same
  transaction as its ``threads`` row (delegations, conversations and approval cards go
  with it by ``ON DELETE CASCADE``) and its idempotency keys;
* every other thread is pruned with :meth:`AsyncPostgresSaver.aprune` and the
  ``"keep_latest"`` strategy: per namespace, the newest checkpoint (the thread's state)
  is kept with its pending writes (an interrupted run's pending approvals) and the blobs
  it names; older versions, history only (time travel, which the copilot does not
  offer), go. LangGraph refuses to prune threads that use a ``DeltaChannel`` (their
  state depends on history): they are left alone and reported as skipped.

The audit log and the rejections are records of what happened and are never touched here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection
from psycopg.errors import DeadlockDetected, SerializationFailure
from psycopg.rows import dict_row

from copilot.persistence import threads

logger = logging.getLogger(__name__)

_IDLE_THREADS_SQL = "SELECT thread_id FROM threads WHERE last_active_at < now() - %s ORDER BY thread_id"

# Re-checked under the row lock the DELETE takes: a thread touched since it was listed
# stays (its activity waits for this transaction, then finds it either gone or kept).
_DELETE_IDLE_THREAD_SQL = (
    "DELETE FROM threads WHERE thread_id = %s AND last_active_at < now() - %s RETURNING thread_id"
)

_REMAINING_THREADS_SQL = "SELECT thread_id FROM threads ORDER BY thread_id"


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

    def to_json(self) -> dict[str, Any]:
        return {
            "expired_threads": len(self.expired_threads),
            "pruned_threads": len(self.pruned_threads),
            "skipped_threads": self.skipped_threads,
            "checkpoints_deleted": self.checkpoints_deleted,
        }


async def apply_retention(
    conn: AsyncConnection[Any], saver: AsyncPostgresSaver, *, older_than: timedelta
) -> RetentionReport:
    """Expire threads idle longer than ``older_than``; prune the others to their newest
    checkpoint per namespace.

    ``saver`` is the checkpointer whose threads these are; its operations run on ``conn``
    (an autocommit connection, e.g. from the app pool), so deleting one idle thread is one
    transaction with its copilot rows, and no second connection is needed. Each thread
    is expired or pruned in its own transaction, so a long run never holds many locks and
    a failure leaves every other thread consistent.
    """
    if older_than <= timedelta(0):
        raise ValueError("older_than must be positive: every thread would be idle")
    # The same serializer, on this connection.
    on_conn = AsyncPostgresSaver(conn=conn, serde=saver.serde)
    report = RetentionReport()
    report.expired_threads = await _expire_idle_threads(conn, on_conn, older_than)
    for thread_id in [str(row["thread_id"]) for row in await _fetch_all(conn, _REMAINING_THREADS_SQL, ())]:
        await _prune_thread(on_conn, thread_id, report)
    return report


async def _expire_idle_threads(
    conn: AsyncConnection[Any], saver: AsyncPostgresSaver, older_than: timedelta
) -> list[str]:
    expired: list[str] = []
    for row in await _fetch_all(conn, _IDLE_THREADS_SQL, (older_than,)):
        thread_id = str(row["thread_id"])
        async with conn.transaction():
            if not await _fetch_all(conn, _DELETE_IDLE_THREAD_SQL, (thread_id, older_than)):
                continue
            await conn.execute("DELETE FROM idempotency_keys WHERE thread_id = %s", (thread_id,))
            await saver.adelete_thread(thread_id)
            # A side run cut short by a crash may have left its side thread behind.
            await saver.adelete_thread(threads.side_thread_id(thread_id))
        expired.append(thread_id)
    return expired


async def _prune_thread(saver: AsyncPostgresSaver, thread_id: str, report: RetentionReport) -> None:
    # A thread with at most one checkpoint (in all namespaces) has nothing to prune; after
    # the first run that is most of them, and it costs one state read to tell.
    if await _count_checkpoints(saver, thread_id, limit=2) < 2:
        return
    before = await _count_checkpoints(saver, thread_id)
    try:
        await saver.aprune([thread_id], strategy="keep_latest")
    except NotImplementedError:
        # keep_latest refuses threads that use a DeltaChannel.
        report.skipped_threads.append(thread_id)
        return
    except (SerializationFailure, DeadlockDetected) as exc:
        logger.warning(
            "retention: pruning %s conflicted with a concurrent write, retried next run: %s", thread_id, exc
        )
        report.skipped_threads.append(thread_id)
        return
    deleted = max(before - await _count_checkpoints(saver, thread_id), 0)
    if deleted:
        report.pruned_threads.append(thread_id)
        report.checkpoints_deleted += deleted


async def _count_checkpoints(saver: AsyncPostgresSaver, thread_id: str, *, limit: int | None = None) -> int:
    # No checkpoint_ns: every namespace of the thread.
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    return len([checkpoint async for checkpoint in saver.alist(config, limit=limit)])


async def _fetch_all(conn: AsyncConnection[Any], query: str, params: Any) -> list[dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()
