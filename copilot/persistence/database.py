"""One-shot database access for commands: resolve the URL, connect, run, close."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from psycopg import AsyncConnection, OperationalError
from psycopg.rows import DictRow

from copilot.errors import DatabaseError
from copilot.persistence.embedded import resolve_database_url
from copilot.persistence.entra_login import connection_class
from copilot.persistence.pool import CONNECTION_KWARGS
from copilot.settings import Settings


@asynccontextmanager
async def connect(settings: Settings) -> AsyncIterator[AsyncConnection[DictRow]]:
    """A single autocommit connection (for CLI commands; request paths use the pool).

    It logs in as ``DATABASE_URL`` (or the embedded server) gives it: the owner, which
    ``db migrate`` needs. The application's pool logs in as an unprivileged role instead
    (see :mod:`copilot.persistence.pool`).
    """
    url = resolve_database_url(settings)
    try:
        conn: AsyncConnection[DictRow] = await connection_class(settings).connect(url, **CONNECTION_KWARGS)
    except OperationalError as exc:
        raise DatabaseError(f"could not connect to PostgreSQL: {exc}") from exc
    try:
        yield conn
    finally:
        await conn.close()
