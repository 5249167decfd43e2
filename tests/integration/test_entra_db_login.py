"""Entra sign-in to PostgreSQL (``COPILOT_DATABASE_ENTRA_AUTH``): every connection logs in with
the managed identity's access token as its password; the login is the identity's role.

The embedded server trusts local logins, so what is checked is what the connection sent
(``conn.info.password``): the token from the credential, never a password from the URL.
Entra ID itself is faked (a credential with azure-identity's ``get_token`` contract).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import psycopg
import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from copilot.errors import DatabaseError
from copilot.persistence import entra_login
from copilot.persistence.database import connect
from copilot.persistence.entra_login import DATABASE_SCOPE, EntraPassword
from copilot.persistence.pool import open_pool
from copilot.settings import Settings

pytestmark = pytest.mark.integration


class FakeCredential:
    """azure-identity's async credential contract, handing out numbered tokens."""

    issued: ClassVar[list[tuple[str, ...]]] = []
    fail: ClassVar[bool] = False

    def __init__(self, **_: Any) -> None:
        pass

    async def get_token(self, *scopes: str, **_: Any) -> AccessToken:
        if FakeCredential.fail:
            raise ClientAuthenticationError("ManagedIdentityCredential: no managed identity endpoint")
        FakeCredential.issued.append(scopes)
        return AccessToken(f"token-{len(FakeCredential.issued)}", int(time.time()) + 3600)

    async def close(self) -> None:
        pass

    async def __aenter__(self) -> FakeCredential:
        return self

    async def __aexit__(self, *_: object) -> None:
        pass


@pytest.fixture
def entra(monkeypatch: pytest.MonkeyPatch, database_url: str, db_conn) -> str:
    import azure.identity.aio

    FakeCredential.issued, FakeCredential.fail = [], False
    monkeypatch.setattr(azure.identity.aio, "DefaultAzureCredential", FakeCredential)
    params = conninfo_to_dict(database_url)
    params.pop("password", None)
    params["user"] = "copilot-identity"  # the managed identity's database role
    return make_conninfo("", **params)


async def test_with_entra_sign_in_every_pool_connection_logs_in_with_the_identitys_token(entra, db_conn):
    await db_conn.execute('CREATE ROLE "copilot-identity" LOGIN')
    settings = Settings(COPILOT_DATABASE_ENTRA_AUTH=True, COPILOT_DB_POOL_MIN=2, COPILOT_DB_POOL_MAX=2)
    pool = await open_pool(entra, settings, min_size=2, max_size=2)
    try:
        async with pool.connection() as first, pool.connection() as second:
            for conn in (first, second):
                cur = await conn.execute("SELECT session_user AS login")
                row = await cur.fetchone()
                assert row is not None
                assert row["login"] == "copilot-identity"
                assert conn.info.password == "token-1"  # one token, reused while valid
    finally:
        await pool.close()
        await db_conn.execute('DROP ROLE "copilot-identity"')

    assert FakeCredential.issued
    assert set(FakeCredential.issued) == {(DATABASE_SCOPE,)}


async def test_a_command_connection_signs_in_with_the_token_too(entra, db_conn):
    await db_conn.execute('CREATE ROLE "copilot-identity" LOGIN')
    try:
        settings = Settings(DATABASE_URL=entra, COPILOT_DATABASE_ENTRA_AUTH=True)
        async with connect(settings) as conn:
            assert conn.info.password == "token-1"
    finally:
        await db_conn.execute('DROP ROLE "copilot-identity"')


async def test_without_a_token_the_pool_fails_with_a_clear_error_and_connects_nothing(entra):
    FakeCredential.fail = True
    settings = Settings(COPILOT_DATABASE_ENTRA_AUTH=True)

    with pytest.raises(DatabaseError, match="could not get an Entra token for PostgreSQL"):
        await open_pool(entra, settings, min_size=1, max_size=1, open_timeout=5)


async def test_entra_sign_in_is_off_by_default_and_the_url_password_is_used(database_url):
    assert entra_login.connection_class(Settings()) is psycopg.AsyncConnection


async def test_a_token_is_reused_until_shortly_before_it_expires_then_renewed():
    now = [1_000_000.0]
    credential = FakeCredential()
    FakeCredential.issued, FakeCredential.fail = [], False
    password = EntraPassword(credential, clock=lambda: now[0])

    first = await password.get()
    now[0] += 3000  # still more than the refresh margin before expiry
    assert await password.get() == first
    now[0] = time.time() + 3600 - entra_login.REFRESH_MARGIN_SECONDS + 1
    assert await password.get() != first
    assert len(FakeCredential.issued) == 2
