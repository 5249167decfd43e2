"""How many checkpoints one thread holds in PostgreSQL, and their bytes (a read-only measurement).

The checkpointer's API has no size, so the bytes are PostgreSQL's own ``pg_column_size``
of each row of LangGraph's three tables for the thread (``checkpoints``,
``checkpoint_blobs``, ``checkpoint_writes``): what the rows take before indexes and TOAST
compression is accounted for separately. Only read here; retention changes these tables
through the checkpointer's API alone (``copilot/persistence/retention.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

THREAD_CHECKPOINT_BYTES = """
SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = %(thread)s) AS checkpoints,
       (SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM checkpoints c WHERE c.thread_id = %(thread)s)
     + (SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM checkpoint_blobs b WHERE b.thread_id = %(thread)s)
     + (SELECT coalesce(sum(pg_column_size(w.*)), 0) FROM checkpoint_writes w WHERE w.thread_id = %(thread)s)
       AS bytes
"""


@dataclass(frozen=True)
class ThreadCheckpoints:
    """A thread's checkpoints and the bytes of their rows (checkpoint, blobs, writes)."""

    checkpoints: int
    bytes: int


async def thread_checkpoints(conn: AsyncConnection[Any], thread_id: str) -> ThreadCheckpoints:
    """The checkpoints ``thread_id`` holds now, and their bytes."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(THREAD_CHECKPOINT_BYTES, {"thread": thread_id})
        row = await cur.fetchone()
    assert row is not None
    return ThreadCheckpoints(checkpoints=int(row["checkpoints"]), bytes=int(row["bytes"]))
