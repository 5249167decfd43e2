"""The async connection pool, tuned for serverless PostgreSQL and PgBouncer.

* Azure Database for PostgreSQL (and any NAT, load balancer or serverless pause in
  between) drops *idle* connections, after minutes: a checkout of a connection idle for
  ``CHECK_IDLE_SECONDS`` or more (or never checked out before) is checked with a round trip
  and replaced if dead; one used more recently is handed out as is
  (:func:`idle_check`), so a turn's many short checkouts cost no extra round trips. A
  connection found dead, or returned broken, makes every connection idle since before
  then be checked at its next checkout (a restart or failover kills them all at once).
  Connections are also recycled after ``max_lifetime`` / ``max_idle``.
* PgBouncer in transaction mode cannot keep server-side prepared statements across
  transactions: automatic preparation is disabled (``prepare_threshold=None``).
* LangGraph's Postgres saver and store expect autocommit connections with dict rows.
* Least privilege (invariant 6): the app never *logs in* as a superuser or as the audit
  log's owner. When the URL it is given is one (the embedded default, whose login is the
  superuser; tests; an admin ``DATABASE_URL``), the pool logs in as ``db_app_login``
  (``copilot_app_login``, created by migration ``audit_hmac``: a member of ``copilot_app`` and
  nothing else), so ``RESET ROLE`` or ``SET ROLE postgres`` gain it nothing. A URL whose
  login is already unprivileged is used as given (e.g. behind PgBouncer in transaction
  mode, where session state such as ``SET ROLE`` does not stick). Each connection also
  runs ``SET ROLE <db_app_role>`` (``copilot_app``) when it may.
* Every connection is bound to the audit configuration (HMAC keys, anchor store), so
  ``audit.append(conn, entry)`` chains with the configured key.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from time import monotonic
from typing import Any

from psycopg import AsyncConnection, OperationalError, sql
from psycopg import Error as PsycopgError
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from copilot.errors import DatabaseError
from copilot.persistence import audit
from copilot.persistence.entra_login import connection_class
from copilot.settings import Settings

logger = logging.getLogger(__name__)

ConnectionKwargs = dict[str, Any]

CHECK_IDLE_SECONDS = 5.0

CONNECTIONS_PER_POOL_MAX = 6
"""Server connections one worker process may hold per unit of ``COPILOT_DB_POOL_MAX``: the
service's pool (1x), its run-lock pool (4x, ``runner.open_service``) and the webhook edge's (1x,
``functions/host.py``). ``infra/main.bicep`` sizes the pool with it and the doctor's
``database.connections`` check compares it with the server (tests/infra reads the factor from
the ``open_pool`` calls themselves)."""
"""A pooled connection is checked with a round trip at checkout only after this long
unused: far below any idle timeout that drops connections (load balancers and NAT: about
4 minutes; serverless pauses: minutes; PgBouncer's ``client_idle_timeout``: off or minutes),
far above the gaps between one turn's checkouts."""

CONNECTION_KWARGS: ConnectionKwargs = {
    "autocommit": True,
    "prepare_threshold": None,
    "row_factory": dict_row,
}

# What the login may do, seen from the login itself. "Privileged" = it could get past
# the audit log's grants: a superuser, or a member of the role owning audit_log (owners
# may ALTER TABLE ... DISABLE TRIGGER and keep UPDATE/DELETE).
_PROBE = """
SELECT session_user AS login,
       s.rolsuper AS superuser,
       to_regclass('audit_log') IS NOT NULL AS migrated,
       coalesce(pg_has_role(session_user,
           (SELECT relowner FROM pg_class WHERE oid = to_regclass('audit_log')), 'MEMBER'), false) AS owner,
       EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %(login)s) AS login_exists,
       EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %(role)s) AS role_exists,
       coalesce(pg_has_role(session_user,
           (SELECT oid FROM pg_roles WHERE rolname = %(role)s), 'MEMBER'), false) AS is_member
FROM pg_roles AS s WHERE s.rolname = session_user
"""


@dataclass(frozen=True)
class _Probe:
    login: str
    privileged: bool
    migrated: bool
    login_exists: bool
    role_exists: bool
    is_member: bool


@dataclass(frozen=True)
class AppLogin:
    """How the pool connects: the connection string, and the role to ``SET ROLE`` to."""

    conninfo: str
    login: str
    set_role: str | None


async def open_pool(
    conninfo: str,
    settings: Settings,
    *,
    open_timeout: float = 30.0,
    min_size: int | None = None,
    max_size: int | None = None,
    name: str = "copilot",
    check_idle_seconds: float = CHECK_IDLE_SECONDS,
) -> AsyncConnectionPool[AsyncConnection[DictRow]]:
    """Open a pool on ``conninfo`` and wait until its minimum connections are up.

    The pool logs in as an unprivileged login (see the module docstring), switches each
    connection to ``settings.db_app_role`` when set, and binds it to the audit
    configuration. Raises ConfigurationError when a deployment lacks its audit key, and
    DatabaseError when the database cannot give the app an unprivileged login.
    """
    audit_config = audit.audit_config(settings)
    connection = connection_class(settings)
    app = await resolve_app_login(conninfo, settings, connection)
    check = IdleCheck(check_idle_seconds)
    pool: AsyncConnectionPool[AsyncConnection[DictRow]] = AsyncConnectionPool(
        app.conninfo,
        min_size=settings.db_pool_min_size if min_size is None else min_size,
        max_size=settings.db_pool_max_size if max_size is None else max_size,
        max_lifetime=settings.db_pool_max_lifetime_seconds,
        max_idle=settings.db_pool_max_idle_seconds,
        check=check,
        kwargs=CONNECTION_KWARGS,
        connection_class=connection,
        configure=app_configure(app.set_role, audit_config),
        open=False,
        name=name,
    )
    check.watch(pool)
    try:
        await pool.open(wait=True, timeout=open_timeout)
    except (PoolTimeout, OperationalError) as exc:
        await pool.close()
        raise DatabaseError(f"could not connect to PostgreSQL as {app.login!r}: {exc}") from exc
    return pool


class IdleCheck:
    """A pool ``check`` that makes a round trip only for a connection that may have died idle.

    The round trip (``AsyncConnectionPool.check_connection``) runs when the connection was
    never handed out before, was last handed out ``idle_seconds`` ago or more (its last use
    ended at most that long ago), or was last handed out before a connection of the pool was
    found dead (by this check) or returned broken (the pool's ``returns_bad`` /
    ``connections_lost`` counters moved). A failed round trip raises, so the pool discards
    the connection and hands out another (reconnecting if need be): the caller never sees
    the dead one. A connection already known to be closed is refused without a round trip.
    """

    def __init__(self, idle_seconds: float = CHECK_IDLE_SECONDS):
        self.idle_seconds = idle_seconds
        self._handed_out: weakref.WeakKeyDictionary[AsyncConnection[Any], float] = weakref.WeakKeyDictionary()
        self._suspect_before = 0.0
        self._pool: weakref.ReferenceType[AsyncConnectionPool[Any]] | None = None
        self._losses = 0

    def watch(self, pool: AsyncConnectionPool[Any]) -> None:
        """Follow ``pool``'s counts of broken connections (see the class docstring)."""
        self._pool = weakref.ref(pool)

    def _lost(self) -> int:
        pool = self._pool() if self._pool is not None else None
        if pool is None:
            return 0
        stats = pool.get_stats()
        return int(stats.get("returns_bad", 0)) + int(stats.get("connections_lost", 0))

    async def __call__(self, conn: AsyncConnection[Any]) -> None:
        now = monotonic()
        if conn.closed or conn.broken:
            raise OperationalError("the connection is closed")
        lost = self._lost()
        if lost != self._losses:
            # Some connection broke since the last checkout: the others may have too.
            self._losses = lost
            self._suspect_before = now
        last = self._handed_out.get(conn)
        if last is None or now - last >= self.idle_seconds or last < self._suspect_before:
            try:
                await AsyncConnectionPool.check_connection(conn)
            except (PsycopgError, OSError):
                self._handed_out.pop(conn, None)
                self._suspect_before = monotonic()
                raise
        self._handed_out[conn] = now


def app_configure(
    role: str | None, audit_config: audit.AuditConfig
) -> Callable[[AsyncConnection[Any]], Awaitable[None]]:
    """A pool ``configure`` callback: bind the audit configuration, act as ``role``."""
    statement = None if not role else sql.SQL("SET ROLE {}").format(sql.Identifier(role))

    async def configure(conn: AsyncConnection[Any]) -> None:
        audit.bind(conn, audit_config)
        if statement is not None:
            # Autocommit connection: the SET is session state and outlives this statement.
            await conn.execute(statement)

    return configure


def with_login(conninfo: str, login: str, password: str | None) -> str:
    """``conninfo`` with its user (and password) replaced: same server, same database."""
    params = conninfo_to_dict(conninfo)
    params["user"] = login
    params.pop("password", None)
    if password is not None:
        params["password"] = password
    return make_conninfo("", **params)


async def resolve_app_login(
    conninfo: str, settings: Settings, connection: type[AsyncConnection[DictRow]] = AsyncConnection
) -> AppLogin:
    """The unprivileged login the pool uses on ``conninfo``'s database (see module doc).

    Before migration 0002 there is nothing to protect (no audit log, and request paths
    refuse an unmigrated schema), so the pool opens as the given login with a warning. On a
    migrated database a privileged login with no way down, or an app role that is missing
    (e.g. a typo in ``COPILOT_DB_APP_ROLE``), fails closed, and fast.
    """
    role = settings.db_app_role
    given = await _probe(connection, conninfo, settings.db_app_login, role)
    app_conninfo, probe = conninfo, given
    if given.privileged and given.migrated:
        login = settings.db_app_login
        if not login:
            raise DatabaseError(
                f"the database login {given.login!r} is a superuser or owns the audit log, and "
                "COPILOT_DB_APP_LOGIN is empty: the application must log in as an unprivileged role",
                login=given.login,
            )
        if not given.login_exists:
            raise DatabaseError(
                f"database login role {login!r} (COPILOT_DB_APP_LOGIN) does not exist: "
                "run `python -m copilot db migrate` or fix the setting",
                role=login,
            )
        password = None if settings.db_app_password is None else settings.db_app_password.get_secret_value()
        app_conninfo = with_login(conninfo, login, password)
        probe = await _probe(connection, app_conninfo, login, role)
        if probe.privileged:
            raise DatabaseError(
                f"database login role {login!r} (COPILOT_DB_APP_LOGIN) is a superuser or owns the audit "
                "log: the application must log in as an unprivileged role",
                role=login,
            )
    elif given.privileged:
        logger.warning(
            "database not migrated: the pool logs in as %r (run `python -m copilot db migrate`)", given.login
        )
    set_role: str | None = None
    if role:
        if probe.role_exists and probe.is_member:
            set_role = role
        elif probe.migrated:
            problem = "does not exist" if not probe.role_exists else f"is not granted to {probe.login!r}"
            raise DatabaseError(
                f"database role {role!r} (COPILOT_DB_APP_ROLE) {problem}: "
                "run `python -m copilot db migrate` or fix the setting",
                role=role,
            )
        else:
            logger.warning(
                "database role %r does not exist yet (database not migrated): not switching role", role
            )
    return AppLogin(app_conninfo, probe.login, set_role)


async def _probe(connection: type[AsyncConnection[DictRow]], conninfo: str, login: str, role: str) -> _Probe:
    try:
        conn = await connection.connect(conninfo, **CONNECTION_KWARGS)
    except OperationalError as exc:
        raise DatabaseError(f"could not connect to PostgreSQL: {exc}") from exc
    try:
        cur = await conn.execute(_PROBE, {"login": login, "role": role})
        row = await cur.fetchone()
    finally:
        await conn.close()
    assert row is not None
    return _Probe(
        login=str(row["login"]),
        privileged=bool(row["superuser"] or row["owner"]),
        migrated=bool(row["migrated"]),
        login_exists=bool(row["login_exists"]),
        role_exists=bool(row["role_exists"]),
        is_member=bool(row["is_member"]),
    )
