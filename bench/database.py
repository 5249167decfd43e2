"""A fresh PostgreSQL database for one bench run, migrated as ``db migrate`` does; dropped after.

The server is the product's: ``DATABASE_URL`` if set, else the embedded PostgreSQL
(``copilot.persistence.embedded``), started on demand like every other local process does.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from psycopg import AsyncConnection, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from copilot.persistence.checkpoint import setup_langgraph
from copilot.persistence.embedded import resolve_database_url
from copilot.persistence.migrations import migrate
from copilot.persistence.pool import CONNECTION_KWARGS
from copilot.settings import Settings


@asynccontextmanager
async def fresh_database(server: Settings, *, app_role: str) -> AsyncIterator[str]:
    """A new database on ``server``'s PostgreSQL, migrated; its URL. Dropped afterwards."""
    server_url = resolve_database_url(server)
    name = f"bench_{uuid.uuid4().hex[:16]}"
    admin = await AsyncConnection.connect(server_url, autocommit=True)
    try:
        await admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    finally:
        await admin.close()
    params = conninfo_to_dict(server_url)
    params["dbname"] = name
    url = make_conninfo("", **params)
    try:
        conn = await AsyncConnection.connect(url, **CONNECTION_KWARGS)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        await setup_langgraph(url, app_role=app_role)
        yield url
    finally:
        admin = await AsyncConnection.connect(server_url, autocommit=True)
        try:
            await admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
        finally:
            await admin.close()
