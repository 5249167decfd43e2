"""LangGraph's Postgres checkpointer and store: created by ``db migrate``, used on the app pool.

LangGraph manages its own tables (and their migrations). :func:`setup_langgraph` runs
them as the migrating user, then grants the app role what it needs on every table,
re-establishing the audit log's append-only grants afterwards. Request paths only
construct the saver and store on the app pool (:func:`make_saver_and_store`), never
set them up: setup needs DDL rights the app role does not have.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg import AsyncConnection, OperationalError, sql
from psycopg.errors import InvalidParameterValue, UndefinedObject
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from copilot.errors import DatabaseError
from copilot.persistence.pool import CONNECTION_KWARGS

# Arbitrary but fixed: concurrent `db migrate` runs serialise on it. A session lock, not
# a transaction one, because LangGraph's setup runs CREATE INDEX CONCURRENTLY, which
# refuses to run inside a transaction.
_SETUP_LOCK_KEY = 0x0C0_0117_0002
_SETUP_LOCK_TIMEOUT_SECONDS = 300.0
_SETUP_LOCK_POLL_SECONDS = 0.1

APP_TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")
"""What the app role may do on a table of the schema: DML, nothing more (no TRUNCATE,
REFERENCES or TRIGGER, no grant option); the tables below get less."""

READ_ONLY_TABLES = ("schema_migrations", "checkpoint_migrations", "store_migrations")
"""Version tables are written only by migrators; the app may read them (schema check)."""

APPEND_ONLY_TABLES = ("audit_log",)
"""Invariant 6: the app role may read and append (SELECT, INSERT), never change or remove."""
APPEND_ONLY_PRIVILEGES = ("SELECT", "INSERT")


async def setup_langgraph(conn_string: str, *, app_role: str = "copilot_app") -> None:
    """Create or upgrade LangGraph's checkpoint and store tables, then grant ``app_role``.

    Safe to run again and concurrently. Run after :func:`copilot.persistence.migrations.migrate`
    (the app role comes from migration 0002). An empty ``app_role`` skips the grants.
    """
    try:
        conn: AsyncConnection[DictRow] = await AsyncConnection.connect(conn_string, **CONNECTION_KWARGS)
    except OperationalError as exc:
        raise DatabaseError(f"could not connect to PostgreSQL: {exc}") from exc
    try:
        await _acquire_setup_lock(conn)
        try:
            # LangGraph's setup needs an autocommit connection (CREATE INDEX CONCURRENTLY):
            # CONNECTION_KWARGS gives one, with the dict rows both classes expect.
            await AsyncPostgresSaver(conn=conn).setup()
            await AsyncPostgresStore(conn=conn).setup()
            if app_role:
                await grant_app_role(conn, app_role)
        finally:
            # If the session is gone its lock went with it; keep the original error.
            with contextlib.suppress(OperationalError):
                await conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK_KEY,))
    finally:
        await conn.close()


async def _acquire_setup_lock(conn: AsyncConnection[Any]) -> None:
    # Poll instead of blocking in pg_advisory_lock(): CREATE INDEX CONCURRENTLY in the
    # holder's setup waits for every open transaction in the database, including a
    # waiter's blocked lock statement, and PostgreSQL would report a deadlock.
    deadline = time.monotonic() + _SETUP_LOCK_TIMEOUT_SECONDS
    while True:
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s) AS locked", (_SETUP_LOCK_KEY,))
        if _field(await cur.fetchone(), "locked"):
            return
        if time.monotonic() > deadline:
            raise DatabaseError("timed out waiting for another `db migrate` to finish the LangGraph setup")
        await asyncio.sleep(_SETUP_LOCK_POLL_SECONDS)


async def grant_app_role(conn: AsyncConnection[Any], app_role: str) -> None:
    """Grant ``app_role`` DML on every table in the current schema, except where it must not.

    Runs in one transaction so there is no moment where the role may change the audit log.
    """
    role = sql.Identifier(app_role)
    try:
        async with conn.transaction():
            cur = await conn.execute("SELECT current_schema() AS schema")
            row = await cur.fetchone()
            schema = sql.Identifier(_field(row, "schema"))
            await conn.execute(
                sql.SQL("GRANT {} ON ALL TABLES IN SCHEMA {} TO {}").format(
                    sql.SQL(", ").join(sql.SQL(p) for p in APP_TABLE_PRIVILEGES), schema, role
                )
            )
            await conn.execute(
                sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {} TO {}").format(schema, role)
            )
            for table in READ_ONLY_TABLES:
                await conn.execute(
                    sql.SQL("REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON {} FROM {}").format(
                        sql.Identifier(table), role
                    )
                )
            # Invariant 6: the blanket grant above included audit_log; take back all but
            # SELECT and INSERT.
            for table in APPEND_ONLY_TABLES:
                await conn.execute(
                    sql.SQL("REVOKE UPDATE, DELETE, TRUNCATE ON {} FROM PUBLIC, {}").format(
                        sql.Identifier(table), role
                    )
                )
    except (UndefinedObject, InvalidParameterValue) as exc:
        raise DatabaseError(
            f"could not grant privileges to database role {app_role!r}: {exc}", role=app_role
        ) from exc


def make_saver_and_store(
    pool: AsyncConnectionPool[AsyncConnection[DictRow]],
) -> tuple[AsyncPostgresSaver, AsyncPostgresStore]:
    """The checkpointer and store on the app pool; call inside the running event loop.

    Both bind to the running loop at construction (LangGraph reads it then), hence not at
    import. No ``setup()`` here: that is ``db migrate``'s job.
    """
    return AsyncPostgresSaver(conn=pool), AsyncPostgresStore(conn=pool)


def _field(row: Any, key: str) -> Any:
    if row is None:
        raise DatabaseError("PostgreSQL returned no row for a catalog query")
    return row[key] if isinstance(row, dict) else row[0]
