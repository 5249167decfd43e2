"""Database checks: reachable, migrations current, an unprivileged login, grants no wider than the
code's, and room on the server for every pool the app may open."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, OperationalError

from copilot.doctor.framework import Check, CheckFailed, DoctorContext, settings_named
from copilot.doctor.settings_checks import aliases
from copilot.errors import DatabaseError, MigrationError
from copilot.persistence.checkpoint import (
    APP_TABLE_PRIVILEGES,
    APPEND_ONLY_PRIVILEGES,
    APPEND_ONLY_TABLES,
    READ_ONLY_TABLES,
)
from copilot.persistence.database import connect
from copilot.persistence.migrations import assert_schema_current, load_migrations
from copilot.persistence.pool import CONNECTION_KWARGS, CONNECTIONS_PER_POOL_MAX, resolve_app_login
from copilot.settings import Settings

SETTINGS = "the copilot's settings (settings.copilot)"

_ALL_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")


@dataclass(frozen=True)
class Database:
    """The database answered (for the checks after ``database.reachable``)."""

    url: str


@dataclass(frozen=True)
class SchemaCurrent:
    """The database's schema is the code's (checks that read the copilot's tables need it)."""

    version: int


@dataclass(frozen=True)
class AppRole:
    """The role the app's connections act as, and the login they use."""

    login: str
    role: str
    conninfo: str


async def reachable(ctx: DoctorContext) -> str:
    settings = ctx.need(Settings, SETTINGS)
    if settings.database_url is None:
        raise CheckFailed(
            "DATABASE_URL is not set: a deployment has no embedded PostgreSQL",
            setting="DATABASE_URL",
            fix="set DATABASE_URL to the Flexible Server's connection string (a Key Vault reference)",
        )
    try:
        async with connect(settings) as conn:
            cur = await conn.execute(
                "SELECT current_database() AS db, current_setting('server_version') AS v"
            )
            row = await cur.fetchone()
    except DatabaseError as exc:
        raise CheckFailed(
            str(exc),
            setting="DATABASE_URL",
            fix="check the server name, port, database, login and password in DATABASE_URL, and that "
            "the server's firewall or private endpoint lets the Function App in",
        ) from exc
    assert row is not None
    ctx.provide(Database(settings.database_url.get_secret_value()))
    return f"PostgreSQL {row['v']}, database {row['db']!r}"


async def migrations(ctx: DoctorContext) -> str:
    settings = ctx.need(Settings, SETTINGS)
    ctx.need(Database, "a reachable database (database.reachable)")
    total = len(load_migrations())
    async with connect(settings) as conn:
        try:
            await assert_schema_current(conn)
        except MigrationError as exc:
            raise CheckFailed(
                str(exc),
                setting="DATABASE_URL",
                fix="run `python -m copilot db migrate` with the schema owner's DATABASE_URL "
                "(and deploy the code that matches the database)",
            ) from exc
    ctx.provide(SchemaCurrent(total))
    return f"schema at version {total} of {total}"


_LOGIN_SQL = """
SELECT r.rolname AS login, r.rolsuper AS superuser, r.rolcreaterole AS createrole, r.rolcreatedb AS createdb,
       r.rolbypassrls AS bypassrls, r.rolreplication AS replication,
       (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
           AND pg_has_role(r.oid, c.relowner, 'MEMBER')) AS owned
FROM pg_roles r WHERE r.rolname = session_user
"""


async def login(ctx: DoctorContext) -> str:
    """The login the app's pool would use is neither a superuser nor an owner of any table."""
    settings = ctx.need(Settings, SETTINGS)
    database = ctx.need(Database, "a reachable database (database.reachable)")
    try:
        app = await resolve_app_login(database.url, settings)
    except DatabaseError as exc:
        names = settings_named(str(exc), aliases(Settings)) or "COPILOT_DB_APP_LOGIN"
        raise CheckFailed(
            str(exc),
            setting=names,
            fix=f"point {names} at an unprivileged login that is a member of the app role only "
            "(`python -m copilot db migrate` creates copilot_app and copilot_app_login)",
        ) from exc
    conn = await _connect(app.conninfo)
    try:
        cur = await conn.execute(_LOGIN_SQL)
        row = await cur.fetchone()
    finally:
        await conn.close()
    assert row is not None
    powers = [
        name for name in ("superuser", "createrole", "createdb", "bypassrls", "replication") if row[name]
    ]
    if powers or row["owned"]:
        what = ", ".join(powers + ([f"owns {row['owned']} table(s)"] if row["owned"] else []))
        raise CheckFailed(
            f"the app logs in as {row['login']!r}, which is privileged ({what})",
            setting="COPILOT_DB_APP_LOGIN",
            fix=f"ALTER ROLE {row['login']} NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS NOREPLICATION, "
            "and let the migrating role own the tables",
        )
    role = app.set_role or app.login
    ctx.provide(AppRole(app.login, role, app.conninfo))
    return f"the app logs in as {app.login!r} (no superuser, owns no table) and acts as {role!r}"


_GRANTS_SQL = """
SELECT c.relname AS table, p.privilege, has_table_privilege(%(role)s, c.oid, p.privilege) AS granted,
       has_table_privilege(%(role)s, c.oid, p.privilege || ' WITH GRANT OPTION') AS grantable
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN unnest(%(privileges)s::text[]) AS p(privilege)
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
ORDER BY c.relname, p.privilege
"""


def allowed_privileges(table: str) -> tuple[str, ...]:
    """What the code grants the app role on ``table`` (``copilot.persistence.checkpoint``)."""
    if table in APPEND_ONLY_TABLES:
        return APPEND_ONLY_PRIVILEGES
    if table in READ_ONLY_TABLES:
        return ("SELECT",)
    return APP_TABLE_PRIVILEGES


async def grants(ctx: DoctorContext) -> str:
    """The app role's table privileges are within the code's grants (``grant_app_role``)."""
    app = ctx.need(AppRole, "an unprivileged app login (database.login)")
    wider: dict[str, set[str]] = {}
    tables: set[str] = set()
    can_create = False
    conn = await _connect(app.conninfo)
    try:
        # The role's grants, and the login's own (anything granted to it directly).
        for who in dict.fromkeys((app.role, app.login)):
            cur = await conn.execute(_GRANTS_SQL, {"role": who, "privileges": list(_ALL_PRIVILEGES)})
            for row in await cur.fetchall():
                tables.add(row["table"])
                if row["granted"] and row["privilege"] not in allowed_privileges(row["table"]):
                    wider.setdefault(row["table"], set()).add(row["privilege"])
                elif row["grantable"]:
                    wider.setdefault(row["table"], set()).add(f"{row['privilege']} WITH GRANT OPTION")
            cur = await conn.execute(
                "SELECT has_schema_privilege(%s, current_schema(), 'CREATE') AS can_create", (who,)
            )
            schema = await cur.fetchone()
            can_create = can_create or bool(schema is not None and schema["can_create"])
    finally:
        await conn.close()
    problems = [f"{', '.join(sorted(privs))} on {table}" for table, privs in sorted(wider.items())]
    if can_create:
        problems.append("CREATE on the schema")
    if problems:
        raise CheckFailed(
            f"the app role {app.role!r} may do more than the code grants it: {'; '.join(problems)}",
            setting="COPILOT_DB_APP_ROLE",
            fix=f"REVOKE those privileges from {app.role} (`python -m copilot db migrate` re-applies the "
            "code's grants and revokes UPDATE, DELETE, TRUNCATE on audit_log)",
        )
    return f"{app.role!r}: DML only on {len(tables)} tables, SELECT and INSERT only on {', '.join(APPEND_ONLY_TABLES)}"


USAGE_ALERT_FRACTION = 0.8
"""Connections in use above this share of ``max_connections`` are pointed out (the template's
alert fires at the same share)."""

_CONNECTIONS_SQL = """
SELECT current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int
         + coalesce(current_setting('reserved_connections', true), '0')::int AS reserved,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int AS in_use
"""


async def connections(ctx: DoctorContext) -> str:
    """The server's ``max_connections`` holds every pool the app may open; the live figures.

    The ceiling is ``COPILOT_DB_MAX_INSTANCES`` x ``CONNECTIONS_PER_POOL_MAX`` x
    ``COPILOT_DB_POOL_MAX``: each instance's worker at its pools' maximum.
    """
    settings = ctx.need(Settings, SETTINGS)
    ctx.need(Database, "a reachable database (database.reachable)")
    async with connect(settings) as conn:
        cur = await conn.execute(_CONNECTIONS_SQL)
        row = await cur.fetchone()
    assert row is not None
    limit, reserved, in_use = int(row["max_connections"]), int(row["reserved"]), int(row["in_use"])
    per_instance = CONNECTIONS_PER_POOL_MAX * settings.db_pool_max_size
    ceiling = settings.db_max_instances * per_instance
    usable = limit - reserved
    figures = (
        f"max_connections {limit} ({reserved} reserved), {in_use} in use ({in_use * 100 // limit} %), "
        f"the app may open {ceiling} ({settings.db_max_instances} instance(s) x {per_instance})"
    )
    if ceiling > usable:
        fitting = usable // (settings.db_max_instances * CONNECTIONS_PER_POOL_MAX)
        raise CheckFailed(
            f"{figures}: more than the server's {usable} usable connections",
            setting="COPILOT_DB_POOL_MAX, COPILOT_DB_MAX_INSTANCES",
            fix=(
                f"set COPILOT_DB_POOL_MAX to {fitting} or less"
                if fitting >= 2
                else "choose a larger PostgreSQL SKU (infra/main.bicep postgresSkuName) or fewer instances"
            )
            + " (redeploying infra/main.bicep computes it from postgresSkuName and maximumInstanceCount)",
        )
    if in_use > USAGE_ALERT_FRACTION * limit:
        # Reported, not failed: a burst is no misconfiguration (the template's alert watches it).
        figures += (
            f"; above {USAGE_ALERT_FRACTION:.0%}: see who holds them in pg_stat_activity (usename, "
            "application_name)"
        )
    return figures


async def _connect(conninfo: str) -> AsyncConnection[Any]:
    try:
        return await AsyncConnection.connect(conninfo, **CONNECTION_KWARGS)
    except OperationalError as exc:
        raise CheckFailed(
            f"could not connect as the app login: {exc}",
            setting="COPILOT_DB_APP_LOGIN, COPILOT_DB_APP_PASSWORD",
            fix="check the app login's name and password (or its Entra mapping) on the server",
        ) from exc


CHECKS = (
    Check("database.reachable", reachable),
    Check("database.migrations", migrations),
    Check("database.login", login),
    Check("database.grants", grants),
    Check("database.connections", connections),
)
