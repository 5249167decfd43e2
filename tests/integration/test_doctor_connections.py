"""The doctor's ``database.connections`` check on the real (embedded) PostgreSQL: it reports the
server's ``max_connections``, the connections in use and the ceiling the app's pools may reach,
and fails, naming the pool setting and a size that fits, when that ceiling exceeds the server.
"""

from __future__ import annotations

import re
from contextlib import ExitStack

import psycopg
import pytest

from copilot.doctor.database_checks import Database, connections
from copilot.doctor.framework import Check, DoctorContext, run_check
from copilot.persistence.pool import CONNECTIONS_PER_POOL_MAX
from copilot.settings import Settings

pytestmark = pytest.mark.integration


def _context(url: str, *, pool_max: int, instances: int) -> DoctorContext:
    ctx = DoctorContext(environ={})
    settings = Settings.model_validate(
        {"DATABASE_URL": url, "COPILOT_DB_POOL_MAX": pool_max, "COPILOT_DB_MAX_INSTANCES": instances}
    )
    ctx.provide(settings)
    ctx.provide(Database(url))
    return ctx


def _server_limits(url: str) -> tuple[int, int]:
    """(max_connections, reserved) as the server reports them."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int"
            " + coalesce(current_setting('reserved_connections', true), '0')::int"
        ).fetchone()
    assert row is not None
    return row[0], row[1]


def _in_use(detail: str) -> int:
    found = re.search(r"(\d+) in use", detail)
    assert found, detail
    return int(found.group(1))


CHECK = Check("database.connections", connections)


async def test_the_check_reports_the_live_limit_the_connections_in_use_and_the_apps_ceiling(database_url):
    limit, reserved = _server_limits(database_url)
    result = await run_check(CHECK, _context(database_url, pool_max=2, instances=3))
    assert result.status == "pass", result
    assert f"max_connections {limit} ({reserved} reserved)" in result.detail
    ceiling = 3 * CONNECTIONS_PER_POOL_MAX * 2
    assert f"the app may open {ceiling} (3 instance(s) x {CONNECTIONS_PER_POOL_MAX * 2})" in result.detail
    # The in-use figure is live: three more open connections are counted.
    with ExitStack() as held:
        for _ in range(3):
            held.enter_context(psycopg.connect(database_url))
        busier = await run_check(CHECK, _context(database_url, pool_max=2, instances=3))
    assert _in_use(busier.detail) >= _in_use(result.detail) + 3, (result.detail, busier.detail)


async def test_pools_beyond_the_servers_connections_fail_naming_the_settings_and_a_pool_size_that_fits(
    database_url,
):
    limit, reserved = _server_limits(database_url)
    instances = 5
    fitting = (limit - reserved) // (instances * CONNECTIONS_PER_POOL_MAX)
    assert fitting >= 2, "the test server is too small for this case"
    result = await run_check(CHECK, _context(database_url, pool_max=fitting + 1, instances=instances))
    assert result.status == "fail", result
    assert f"more than the server's {limit - reserved} usable connections" in result.detail
    assert result.setting == "COPILOT_DB_POOL_MAX, COPILOT_DB_MAX_INSTANCES"
    assert result.fix is not None
    assert f"set COPILOT_DB_POOL_MAX to {fitting} or less" in result.fix
    # The size it names passes.
    passed = await run_check(CHECK, _context(database_url, pool_max=fitting, instances=instances))
    assert passed.status == "pass", passed


async def test_a_server_too_small_for_any_pool_names_a_larger_sku(database_url):
    result = await run_check(CHECK, _context(database_url, pool_max=10, instances=400))
    assert result.status == "fail", result
    assert result.fix is not None
    assert "larger PostgreSQL SKU" in result.fix
