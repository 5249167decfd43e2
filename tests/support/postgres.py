"""Throwaway databases on the test PostgreSQL server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
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
def fresh_database(server_url: str, prefix: str = "test") -> Iterator[str]:
    """A new, empty database on the server at ``server_url``; dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        # FILE_COPY copies template1's files instead of writing every page to the WAL
        # (PostgreSQL 15+'s default): a third of the time on an unflushed server.
        admin.execute(sql.SQL("CREATE DATABASE {} STRATEGY FILE_COPY").format(sql.Identifier(name)))
    params = conninfo_to_dict(server_url)
    params["dbname"] = name
    try:
        yield make_conninfo("", **params)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
