"""The async connection pool, tuned for serverless PostgreSQL and PgBouncer.

* Azure Database for PostgreSQL (and any NAT in between) drops idle connections:
  every checkout is checked with a round trip and replaced if dead, and connections
  are recycled after ``max_lifetime`` / ``max_idle``.
* PgBouncer in transaction mode cannot keep server-side prepared statements across
  transactions: automatic preparation is disabled (``prepare_threshold=None``).
* LangGraph's Postgres saver and store expect autocommit connections with dict rows.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection, OperationalError
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from copilot.errors import DatabaseError
from copilot.settings import Settings

ConnectionKwargs = dict[str, Any]

CONNECTION_KWARGS: ConnectionKwargs = {
    "autocommit": True,
    "prepare_threshold": None,
    "row_factory": dict_row,
}


async def open_pool(
    conninfo: str, settings: Settings, *, open_timeout: float = 30.0
) -> AsyncConnectionPool[AsyncConnection[DictRow]]:
    """Open a pool on ``conninfo`` and wait until its minimum connections are up."""
    pool: AsyncConnectionPool[AsyncConnection[DictRow]] = AsyncConnectionPool(
        conninfo,
        min_size=settings.db_pool_min_size,
        max_size=settings.db_pool_max_size,
        max_lifetime=settings.db_pool_max_lifetime_seconds,
        max_idle=settings.db_pool_max_idle_seconds,
        check=AsyncConnectionPool.check_connection,
        kwargs=CONNECTION_KWARGS,
        open=False,
        name="copilot",
    )
    try:
        await pool.open(wait=True, timeout=open_timeout)
    except (PoolTimeout, OperationalError) as exc:
        await pool.close()
        raise DatabaseError(f"could not connect to PostgreSQL: {exc}") from exc
    return pool
