"""The async connection pool, tuned for serverless PostgreSQL and PgBouncer.

* Azure Database for PostgreSQL (and any NAT in between) drops idle connections:
  every checkout is checked with a round trip and replaced if dead, and connections
  are recycled after ``max_lifetime`` / ``max_idle``.
* PgBouncer in transaction mode cannot keep server-side prepared statements across
  transactions: automatic preparation is disabled (``prepare_threshold=None``).
* LangGraph's Postgres saver and store expect autocommit connections with dict rows.
* Least privilege (invariant 6): each new connection runs ``SET ROLE <db_app_role>``
  (``copilot_app``), which may not UPDATE/DELETE/TRUNCATE the audit log, whatever the
  login user may do. ``SET ROLE`` is session state, so behind PgBouncer in *transaction*
  mode log in as a user that only has the app role's rights and set
  ``COPILOT_DB_APP_ROLE=""`` instead.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg import AsyncConnection, OperationalError, sql
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from copilot.errors import DatabaseError
from copilot.settings import Settings

logger = logging.getLogger(__name__)

ConnectionKwargs = dict[str, Any]

CONNECTION_KWARGS: ConnectionKwargs = {
    "autocommit": True,
    "prepare_threshold": None,
    "row_factory": dict_row,
}


async def open_pool(
    conninfo: str, settings: Settings, *, open_timeout: float = 30.0
) -> AsyncConnectionPool[AsyncConnection[DictRow]]:
    """Open a pool on ``conninfo`` and wait until its minimum connections are up.

    With ``settings.db_app_role`` set, every connection the pool opens switches to that
    role before it is handed out.
    """
    configure = None
    if settings.db_app_role and await _role_usable(conninfo, settings.db_app_role):
        configure = set_role_configure(settings.db_app_role)
    pool: AsyncConnectionPool[AsyncConnection[DictRow]] = AsyncConnectionPool(
        conninfo,
        min_size=settings.db_pool_min_size,
        max_size=settings.db_pool_max_size,
        max_lifetime=settings.db_pool_max_lifetime_seconds,
        max_idle=settings.db_pool_max_idle_seconds,
        check=AsyncConnectionPool.check_connection,
        kwargs=CONNECTION_KWARGS,
        configure=configure,
        open=False,
        name="copilot",
    )
    try:
        await pool.open(wait=True, timeout=open_timeout)
    except (PoolTimeout, OperationalError) as exc:
        await pool.close()
        raise DatabaseError(f"could not connect to PostgreSQL: {exc}") from exc
    return pool


def set_role_configure(role: str) -> Callable[[AsyncConnection[Any]], Awaitable[None]]:
    """A pool ``configure`` callback that makes each new connection act as ``role``."""
    statement = sql.SQL("SET ROLE {}").format(sql.Identifier(role))

    async def configure(conn: AsyncConnection[Any]) -> None:
        # Autocommit connection: the SET is session state and outlives this statement.
        await conn.execute(statement)

    return configure


async def _role_usable(conninfo: str, role: str) -> bool:
    """Whether to ``SET ROLE role``; refuses to open without it on a migrated database.

    The role is created by migration 0002. Before that there is nothing it protects (no
    audit log yet, and request paths refuse an unmigrated schema), so the pool opens as
    the login user with a warning. On a migrated database a missing role is a
    misconfiguration (e.g. a typo in ``COPILOT_DB_APP_ROLE``): fail closed, and fast,
    rather than let the pool retry ``SET ROLE`` until its open timeout.
    """
    try:
        conn = await AsyncConnection.connect(conninfo, **CONNECTION_KWARGS)
    except OperationalError as exc:
        raise DatabaseError(f"could not connect to PostgreSQL: {exc}") from exc
    try:
        cur = await conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s) AS role_exists,"
            " pg_has_role(current_user, oid, 'MEMBER') AS is_member,"
            " to_regclass('audit_log') IS NOT NULL AS migrated"
            " FROM (SELECT (SELECT oid FROM pg_roles WHERE rolname = %s) AS oid) AS r",
            (role, role),
        )
        row = await cur.fetchone()
    finally:
        await conn.close()
    assert row is not None
    if row["role_exists"] and row["is_member"]:
        return True
    if row["migrated"]:
        problem = "does not exist" if not row["role_exists"] else "is not granted to the login user"
        raise DatabaseError(
            f"database role {role!r} (COPILOT_DB_APP_ROLE) {problem}: "
            "run `python -m copilot db migrate` or fix the setting",
            role=role,
        )
    logger.warning("database role %r does not exist yet (database not migrated): not switching role", role)
    return False
