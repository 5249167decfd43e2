"""Throwaway databases on the test PostgreSQL server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

# A test server's data lives for one pytest session and is thrown away after it: nothing
# in it needs to survive an operating-system crash, so flushing to disk is wasted time.
# (A killed postgres process still recovers without fsync; only the kernel's buffers go
# unflushed.) These are reloadable settings, so a running server takes them at once.
_THROWAWAY_SERVER_SETTINGS = ("fsync = off", "synchronous_commit = off", "full_page_writes = off")


def tune_throwaway_server(server_url: str) -> None:
    """Turn off disk flushing on a test-only server (never on a ``DATABASE_URL`` server)."""
    with psycopg.connect(server_url, autocommit=True) as admin:
        for setting in _THROWAWAY_SERVER_SETTINGS:
            admin.execute(f"ALTER SYSTEM SET {setting}")
        admin.execute("SELECT pg_reload_conf()")


@contextmanager
def fresh_database(
    server_url: str, prefix: str = "test", *, template: str | None = None, name: str | None = None
) -> Iterator[str]:
    """A new database on the server at ``server_url``, dropped afterwards: empty, or a copy
    of the database named ``template`` (which nothing may be connected to). Its name is
    ``name``, or ``prefix`` and a random suffix."""
    name = name or f"{prefix}_{uuid.uuid4().hex[:16]}"
    # FILE_COPY copies the template's files instead of writing every page to the WAL
    # (PostgreSQL 15+'s default): a third of the time on an unflushed server.
    create = sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
        sql.Identifier(name), sql.Identifier(template or "template1")
    )
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(create)
    try:
        yield database_on(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def database_on(server_url: str, name: str) -> str:
    """The connection string of database ``name`` on the server at ``server_url``."""
    params = conninfo_to_dict(server_url)
    params["dbname"] = name
    return make_conninfo("", **params)


@contextmanager
def migrated_template(server_url: str) -> Iterator[str]:
    """A database migrated as ``python -m copilot db migrate`` does (the product's migrations,
    LangGraph's tables, the app role's grants), to copy with :func:`fresh_database`; its name.

    Migrating costs about 0.4 s and copying about 0.04 s, and most tests start from a
    migrated database. The copy is the same schema, so a test's own migrate finds nothing
    to apply, just as on a database migrated in the test."""
    # Imported here: the product's persistence layer is not needed for empty databases.
    from copilot.persistence.checkpoint import setup_langgraph
    from copilot.persistence.migrations import migrate

    async def prepare(url: str) -> None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await migrate(conn)
        await setup_langgraph(url)

    name = f"migrated_template_{uuid.uuid4().hex[:16]}"
    with fresh_database(server_url, name=name) as url:
        # In a thread of its own: a test session's event loop may be current here.
        with ThreadPoolExecutor(max_workers=1) as thread:
            thread.submit(asyncio.run, prepare(url)).result()
        yield name
