"""The retention policy: expire idle threads, prune old checkpoint versions of the rest.

Pure SQL over the copilot's tables and LangGraph's (``langgraph-checkpoint-postgres``):

* ``checkpoints`` (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
  checkpoint JSONB, metadata): one row per saved state; ``checkpoint_id`` is a
  time-ordered UUID6, so the newest sorts last. ``checkpoint -> 'channel_versions'``
  names the version of each channel the state consists of.
* ``checkpoint_blobs`` (thread_id, checkpoint_ns, channel, version, ...): the
  channel values, shared by every checkpoint naming that (channel, version).
* ``checkpoint_writes`` (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, ...):
  pending writes *of one checkpoint* — an interrupted run's pending approvals live
  here, on the newest checkpoint, which is therefore always kept with its writes.

A thread's state is its newest checkpoint (plus its writes and the blobs it names), so
older versions are history only (time travel), which the copilot does not offer. The
audit log and the rejections are records of what happened and are never touched here.

Deliberately conservative: a blob is deleted only if a *deleted* checkpoint named it
and no remaining checkpoint of that namespace does (blobs of a run that is saving right
now are never candidates), and threads whose state depends on history — LangGraph's
``DeltaChannel``, or pre-v4 checkpoints that read pending sends from their parent — are
left alone and reported as skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from copilot.persistence import threads

_LANGGRAPH_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")

# Threads with some namespace holding more checkpoints than we keep.
_CANDIDATES_SQL = """
SELECT DISTINCT thread_id
  FROM (SELECT thread_id, checkpoint_ns FROM checkpoints
         GROUP BY thread_id, checkpoint_ns HAVING count(*) > %(keep)s) AS crowded
 ORDER BY thread_id
"""

# Threads whose state cannot be read from the newest checkpoint alone (see module doc).
_HISTORY_DEPENDENT_SQL = """
SELECT DISTINCT c.thread_id
  FROM checkpoints c
 WHERE c.thread_id = ANY(%(threads)s)
   AND (c.metadata ? 'counters_since_delta_snapshot'
        OR c.metadata ? 'delta_writes_versioned'
        OR COALESCE((c.checkpoint ->> 'v')::int, 0) < 4)
"""

# Per (thread, namespace), every checkpoint but the newest ``keep``.
_UNKEPT_SQL = """
SELECT checkpoint_ns, checkpoint_id
  FROM (SELECT checkpoint_ns, checkpoint_id,
               row_number() OVER (PARTITION BY checkpoint_ns ORDER BY checkpoint_id DESC) AS rank
          FROM checkpoints
         WHERE thread_id = %(thread)s) AS ranked
 WHERE rank > %(keep)s
"""

_DELETE_WRITES_SQL = """
DELETE FROM checkpoint_writes
 WHERE thread_id = %(thread)s AND checkpoint_ns = %(ns)s AND checkpoint_id = ANY(%(ids)s)
"""

# Returns the (channel, version) pairs the deleted checkpoints named.
_DELETE_CHECKPOINTS_SQL = """
WITH deleted AS (
    DELETE FROM checkpoints
     WHERE thread_id = %(thread)s AND checkpoint_ns = %(ns)s AND checkpoint_id = ANY(%(ids)s)
    RETURNING checkpoint -> 'channel_versions' AS versions
)
SELECT DISTINCT v.key AS channel, v.value AS version
  FROM deleted CROSS JOIN LATERAL jsonb_each_text(deleted.versions) AS v
"""

# A kept checkpoint must not point at a parent that no longer exists.
_DETACH_PARENTS_SQL = """
UPDATE checkpoints SET parent_checkpoint_id = NULL
 WHERE thread_id = %(thread)s AND checkpoint_ns = %(ns)s AND parent_checkpoint_id = ANY(%(ids)s)
"""

# Of the freed (channel, version) pairs, delete those no remaining checkpoint names.
# A separate statement from the DELETE above: within one statement the deleted rows
# would still be visible to NOT EXISTS.
_DELETE_BLOBS_SQL = """
DELETE FROM checkpoint_blobs b
 USING unnest(%(channels)s::text[], %(versions)s::text[]) AS freed(channel, version)
 WHERE b.thread_id = %(thread)s AND b.checkpoint_ns = %(ns)s
   AND b.channel = freed.channel AND b.version = freed.version
   AND NOT EXISTS (
        SELECT 1 FROM checkpoints c
         WHERE c.thread_id = %(thread)s AND c.checkpoint_ns = %(ns)s
           AND c.checkpoint -> 'channel_versions' ->> freed.channel = freed.version)
"""


@dataclass
class RetentionReport:
    """What one retention run removed."""

    expired_threads: list[str] = field(default_factory=list)
    """Threads idle longer than the retention period, deleted with all their state."""
    pruned_threads: list[str] = field(default_factory=list)
    """Remaining threads whose older checkpoint versions were removed."""
    skipped_threads: list[str] = field(default_factory=list)
    """Threads whose state depends on checkpoint history, left untouched."""
    checkpoints_deleted: int = 0
    writes_deleted: int = 0
    blobs_deleted: int = 0
    inbound_activities_deleted: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "expired_threads": len(self.expired_threads),
            "pruned_threads": len(self.pruned_threads),
            "skipped_threads": self.skipped_threads,
            "checkpoints_deleted": self.checkpoints_deleted,
            "writes_deleted": self.writes_deleted,
            "blobs_deleted": self.blobs_deleted,
            "inbound_activities_deleted": self.inbound_activities_deleted,
        }


async def apply_retention(
    conn: AsyncConnection[Any], *, older_than: timedelta, keep_checkpoints: int = 1
) -> RetentionReport:
    """Expire threads idle longer than ``older_than``; keep the newest ``keep_checkpoints``
    checkpoints per (thread, namespace) of the others and delete the rest.

    Each thread is pruned in its own transaction, so a long run never holds many locks
    and a failure leaves every other thread consistent.
    """
    if keep_checkpoints < 1:
        raise ValueError("keep_checkpoints must be at least 1: the newest checkpoint is the thread's state")
    report = RetentionReport()
    report.expired_threads = await threads.expire_threads(conn, older_than=older_than)
    # Webhook de-duplication only needs to outlive Teams' retries (minutes).
    cur = await conn.execute("DELETE FROM inbound_activities WHERE received_at < now() - interval '2 days'")
    report.inbound_activities_deleted = cur.rowcount
    if not await _langgraph_present(conn):
        return report
    candidates = [
        str(row["thread_id"]) for row in await _fetch_all(conn, _CANDIDATES_SQL, {"keep": keep_checkpoints})
    ]
    if not candidates:
        return report
    history_dependent = {
        str(row["thread_id"])
        for row in await _fetch_all(conn, _HISTORY_DEPENDENT_SQL, {"threads": candidates})
    }
    report.skipped_threads = sorted(history_dependent)
    for thread_id in candidates:
        if thread_id in history_dependent:
            continue
        if await _prune_thread(conn, thread_id, keep_checkpoints, report):
            report.pruned_threads.append(thread_id)
    return report


async def _prune_thread(
    conn: AsyncConnection[Any], thread_id: str, keep: int, report: RetentionReport
) -> bool:
    async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_UNKEPT_SQL, {"thread": thread_id, "keep": keep})
        by_namespace: dict[str, list[str]] = {}
        for row in await cur.fetchall():
            by_namespace.setdefault(str(row["checkpoint_ns"]), []).append(str(row["checkpoint_id"]))
        for ns, ids in by_namespace.items():
            params: dict[str, Any] = {"thread": thread_id, "ns": ns, "ids": ids}
            await cur.execute(_DELETE_WRITES_SQL, params)
            report.writes_deleted += max(cur.rowcount, 0)
            await cur.execute(_DELETE_CHECKPOINTS_SQL, params)
            freed = await cur.fetchall()
            report.checkpoints_deleted += len(ids)
            await cur.execute(_DETACH_PARENTS_SQL, params)
            if freed:
                await cur.execute(
                    _DELETE_BLOBS_SQL,
                    {
                        "thread": thread_id,
                        "ns": ns,
                        "channels": [str(r["channel"]) for r in freed],
                        "versions": [str(r["version"]) for r in freed],
                    },
                )
                report.blobs_deleted += max(cur.rowcount, 0)
    return bool(by_namespace)


async def _langgraph_present(conn: AsyncConnection[Any]) -> bool:
    rows = await _fetch_all(
        conn,
        "SELECT bool_and(to_regclass(t) IS NOT NULL) AS present FROM unnest(%(tables)s::text[]) AS t",
        {"tables": list(_LANGGRAPH_TABLES)},
    )
    return bool(rows and rows[0]["present"])


async def _fetch_all(conn: AsyncConnection[Any], query: str, params: Any) -> list[dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()
