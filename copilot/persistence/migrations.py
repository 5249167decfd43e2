"""Schema migrations: an ordered list of SQL files, a version table, one migrator at a time.

Applied only by ``python -m copilot db migrate`` (and by test fixtures), never per
request: request paths call :func:`assert_schema_current`, which only reads.
Each migration runs in its own transaction under an advisory lock, so concurrent
migrators serialise and a failed migration leaves nothing half-applied. Applied
migrations are checksummed: editing one after it shipped is refused.

The schema is one numbered sequence, but each layer ships the SQL of its own tables in a
``sql/`` folder of its package (:data:`SCHEMA_PACKAGES`): the copilot's in
``copilot/persistence/sql/``, the bot's in ``bot/sql/``, the Functions app's in
``functions/sql/``. The packages are located by name with :mod:`importlib.resources`
(which loads only each package's ``__init__``), so this module has no import of the
layers above it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from psycopg import AsyncConnection, sql

from copilot.errors import MigrationError

# Arbitrary but fixed: all copilot processes agree on it to serialise migrators.
_ADVISORY_LOCK_KEY = 0x0C0_0117_0001

VERSION_TABLE_DDL = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


SCHEMA_PACKAGES: tuple[str, ...] = ("copilot.persistence", "bot", "functions")
"""The packages whose ``sql/`` folders make up the schema: the copilot's own tables, the
bot's (conversations, approval cards, SSO tokens), the Functions app's (webhook
de-duplication). One sequence of versions across all of them."""


def load_migrations(packages: Sequence[str] = SCHEMA_PACKAGES) -> tuple[Migration, ...]:
    """The migrations shipped with the code, ordered by version: every ``sql/NNNN_name.sql``
    of the named ``packages``, located by name; leaving one out leaves a gap, refused."""
    if isinstance(packages, str):
        raise TypeError("packages must be a sequence of package names, not a str")
    found: list[Migration] = []
    for package in packages:
        try:
            folder = resources.files(package) / "sql"
        except ModuleNotFoundError as exc:
            raise MigrationError(f"the migrations' package {package!r} is not installed") from exc
        if not folder.is_dir():
            raise MigrationError(f"the package {package!r} has no sql/ folder of migrations")
        for entry in folder.iterdir():
            if not entry.name.endswith(".sql"):
                continue
            number, _, rest = entry.name.partition("_")
            found.append(Migration(int(number), rest.removesuffix(".sql"), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions) or versions != list(range(1, len(versions) + 1)):
        raise MigrationError(f"migration versions must be 1..N without gaps, got {versions}")
    return tuple(found)


@dataclass(frozen=True)
class MigrationReport:
    applied: tuple[Migration, ...]
    current_version: int


async def _applied(conn: AsyncConnection[Any]) -> dict[int, str]:
    cur = await conn.execute("SELECT version, checksum FROM schema_migrations ORDER BY version")
    rows = await cur.fetchall()
    return {_row_value(r, 0, "version"): _row_value(r, 1, "checksum") for r in rows}


def _row_value(row: Any, index: int, key: str) -> Any:
    return row[key] if isinstance(row, dict) else row[index]


def _check_known(applied: dict[int, str], migrations: tuple[Migration, ...]) -> None:
    by_version = {m.version: m for m in migrations}
    for version, checksum in applied.items():
        known = by_version.get(version)
        if known is None:
            raise MigrationError(
                f"the database is at migration {version}, newer than this code knows; deploy newer code",
                version=version,
            )
        if known.checksum != checksum:
            raise MigrationError(
                f"migration {version} ({known.name}) changed after it was applied; add a new migration instead",
                version=version,
            )


async def migrate(
    conn: AsyncConnection[Any], migrations: tuple[Migration, ...] | None = None
) -> MigrationReport:
    """Apply every pending migration in order; a second run applies nothing."""
    migrations = load_migrations() if migrations is None else migrations
    async with conn.transaction():
        # CREATE TABLE IF NOT EXISTS itself races between migrators: lock first.
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_ADVISORY_LOCK_KEY,))
        await conn.execute(VERSION_TABLE_DDL)
    applied_now: list[Migration] = []
    for migration in migrations:
        async with conn.transaction():
            # Taken per migration and re-checked under the lock, so a concurrent
            # migrator that got here first makes this one a no-op.
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_ADVISORY_LOCK_KEY,))
            applied = await _applied(conn)
            _check_known(applied, migrations)
            if migration.version in applied:
                continue
            await conn.execute(sql.SQL(migration.sql))
            await conn.execute(
                "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                (migration.version, migration.name, migration.checksum),
            )
            applied_now.append(migration)
    return MigrationReport(applied=tuple(applied_now), current_version=len(migrations))


async def assert_schema_current(conn: AsyncConnection[Any]) -> None:
    """Refuse to serve on a database whose schema is behind or ahead of this code."""
    migrations = load_migrations()
    cur = await conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL AS present")
    row = await cur.fetchone()
    applied = await _applied(conn) if row is not None and _row_value(row, 0, "present") else {}
    _check_known(applied, migrations)
    pending = [m.version for m in migrations if m.version not in applied]
    if pending:
        raise MigrationError(
            f"the database is missing migrations {pending}: run `python -m copilot db migrate`",
            pending=pending,
        )
