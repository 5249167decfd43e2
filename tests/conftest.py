"""Shared fixtures: a real PostgreSQL for the whole run, a fresh database per test."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from copilot.persistence.embedded import start_embedded
from tests.support.channel_tokens import ChannelTokens, channel_tokens
from tests.support.postgres import fresh_database, migrated_template, tune_throwaway_server
from tests.support.sandbox_process import SandboxProcess, start_sandbox, stop_sandbox


@pytest.fixture(scope="session")
def postgres_server_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``DATABASE_URL`` if the environment provides a server, else an embedded one."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    embedded = start_embedded(tmp_path_factory.mktemp("pg") / "pgdata")
    tune_throwaway_server(embedded)
    return embedded


@pytest.fixture(scope="session")
def migrated_database_template(postgres_server_url: str) -> Iterator[str]:
    """The name of a database migrated once for the whole run (see ``database_url``)."""
    with migrated_template(postgres_server_url) as name:
        yield name


@pytest.fixture
def database_url(request: pytest.FixtureRequest, postgres_server_url: str) -> Iterator[str]:
    """A new database on the shared server, dropped after the test: empty, except for a
    test that uses ``copilot_settings``, which would migrate it first; that test gets a
    copy of the migrated template instead (the same schema, a tenth of the time)."""
    template = None
    if "copilot_settings" in request.fixturenames:
        template = request.getfixturevalue("migrated_database_template")
    with fresh_database(postgres_server_url, template=template) as url:
        yield url


@pytest.fixture
async def db_conn(database_url: str) -> AsyncIterator[psycopg.AsyncConnection[dict[str, object]]]:
    from psycopg.rows import dict_row

    conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True, row_factory=dict_row)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
def project_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """The real sandbox (CRM MCP server, identity provider, mailbox) for the whole run."""
    running = start_sandbox(tmp_path_factory.mktemp("sandbox"))
    try:
        yield running
    finally:
        stop_sandbox(running)


@pytest.fixture(scope="module")
def pinned_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """A sandbox of this module's own, seeded from ``tests.support.moments.SEED_DAY``: a
    time-sensitive module overrides ``sandbox`` with it, so its meetings fall on a named day."""
    from tests.support.moments import SEED_DAY

    running = start_sandbox(tmp_path_factory.mktemp("sandbox-pinned"), seed_date=SEED_DAY)
    try:
        yield running
    finally:
        stop_sandbox(running)


@pytest.fixture
async def copilot_settings(database_url: str, sandbox: SandboxProcess):
    """Settings for a copilot on a fresh, migrated database and the session sandbox."""
    from copilot.middleware.resilience import reset_breakers
    from tests.support.copilot_env import copilot_settings as make_settings
    from tests.support.copilot_env import prepare_database

    reset_breakers()
    settings = make_settings(database_url, sandbox)
    await prepare_database(settings)
    yield settings
    sandbox.admin("PUT", "/admin/knobs", {})


@pytest.fixture(scope="module")
def channel(sandbox: SandboxProcess) -> Iterator[ChannelTokens]:
    """A Bot Framework channel signing key (and its OpenID metadata) for this module's tests."""
    with channel_tokens(sandbox.settings.bot_app_id) as tokens:
        yield tokens
