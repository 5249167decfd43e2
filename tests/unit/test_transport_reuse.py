"""TLS contexts and HTTP connection pools are built once and shared; credentials never are."""

from __future__ import annotations

import asyncio
import email.message
import ssl
import urllib.request
from typing import Any

import httpx
import pytest
import requests

from copilot.auth import tokens
from copilot.auth.tokens import OboTokenBroker
from copilot.identity import RepIdentity
from copilot.settings import Settings
from copilot.tls import ssl_context
from copilot.tools import mcp_http
from copilot.tools.mcp_http import mcp_http_client_factory, shared_http, shared_transport


@pytest.fixture
def contexts_built(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every SSL context built from here on (``ssl.create_default_context`` and CA loads)."""
    built: list[Any] = []
    original = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append(("create_default_context", args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counting)
    original_load = ssl.SSLContext.load_verify_locations

    def load(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        built.append(("load_verify_locations", args, kwargs))
        original_load(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", load)
    return built


def test_a_trust_context_is_built_once_per_ca_file(contexts_built: list[Any], tmp_path):
    ssl_context.cache_clear()
    certifi = httpx.create_ssl_context()  # whatever the default trust file is, it loads
    contexts_built.clear()

    assert ssl_context() is ssl_context()
    assert len(contexts_built) > 0, "the first call builds the default trust"
    contexts_built.clear()
    for _ in range(5):
        ssl_context()
    assert contexts_built == []
    assert ssl_context().verify_mode == ssl.CERT_REQUIRED
    assert ssl_context().check_hostname is True
    assert certifi is not ssl_context()


async def test_mcp_clients_share_one_pool_and_build_no_ssl_context(contexts_built: list[Any]):
    ssl_context()  # the process's trust, built once
    async with shared_http():
        shared_transport()  # the loop's pool
        contexts_built.clear()
        clients = [mcp_http_client_factory(headers={"Authorization": f"Bearer t{i}"}) for i in range(10)]
        inner = {id(c._transport._inner._inner) for c in clients}  # type: ignore[attr-defined]
        for client in clients:
            await client.aclose()
        assert contexts_built == [], "a session's client must not build its own SSL context"
        assert len(inner) == 1, "every session goes through the loop's one connection pool"


async def test_closing_a_client_leaves_the_shared_pool_open_until_the_last_holder_leaves(monkeypatch):
    closed: list[Any] = []
    original = httpx.AsyncHTTPTransport.aclose

    async def aclose(self: httpx.AsyncHTTPTransport) -> None:
        closed.append(self)
        await original(self)

    monkeypatch.setattr(httpx.AsyncHTTPTransport, "aclose", aclose)
    async with shared_http():
        async with shared_http():
            pool = mcp_http._shared_for_loop().transport(None)
            client = mcp_http_client_factory(headers={"Authorization": "Bearer a"})
            await client.aclose()
            assert closed == []
        assert closed == [], "another holder (a second service) still uses the pool"
        assert mcp_http._shared_for_loop().transport(None) is pool
    assert closed == [pool]
    assert mcp_http._shared_for_loop().transport(None) is not pool, "the next user gets a new pool"


async def test_concurrent_clients_over_the_shared_pool_each_send_only_their_own_token(monkeypatch):
    seen: list[tuple[str, str]] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0)  # interleave the reps' requests
        seen.append((request.url.params["rep"], request.headers.get("authorization", "")))
        return httpx.Response(200, json={"ok": True})

    shared = mcp_http._Shared({None: httpx.MockTransport(handler)})  # type: ignore[dict-item]
    monkeypatch.setattr(mcp_http, "_shared_for_loop", lambda: shared)

    async def rep(name: str) -> None:
        async with mcp_http_client_factory(headers={"Authorization": f"Bearer token-of-{name}"}) as client:
            for _ in range(20):
                (await client.get("http://crm.test/mcp", params={"rep": name})).raise_for_status()

    await asyncio.gather(rep("alex"), rep("megan"), rep("adele"))

    assert len(seen) == 60
    assert {(name, auth) for name, auth in seen} == {
        (name, f"Bearer token-of-{name}") for name in ("alex", "megan", "adele")
    }


def _broker(settings: Settings, oid: str) -> OboTokenBroker:
    identity = RepIdentity(tenant_id="t-1", aad_object_id=oid, name=oid, username=f"{oid}@example.test")
    return OboTokenBroker(settings, identity, f"assertion-of-{oid}")


def test_every_credential_uses_the_one_token_session_which_keeps_no_cookies(tmp_path):
    settings = Settings(COPILOT_DATA_DIR=tmp_path, ENTRA_AUTHORITY="https://login.example.test")
    first = _broker(settings, "rep-a")._get_credential()
    second = _broker(settings, "rep-b")._get_credential()

    transports = [c._client._pipeline._transport for c in (first, second)]
    assert transports[0] is transports[1]
    session = transports[0].session
    assert session is tokens._token_session()
    # A cookie the identity provider sets for one rep's exchange is never stored, so never
    # sent with another rep's (a plain jar would store it).
    request = urllib.request.Request("https://login.example.test/t-1/oauth2/v2.0/token")
    plain = requests.cookies.RequestsCookieJar()
    for jar in (plain, session.cookies):
        jar.extract_cookies(_SetsCookie(), request)  # type: ignore[arg-type]
    assert len(plain) == 1
    assert len(session.cookies) == 0


class _SetsCookie:
    """A response that sets a cookie, as ``http.cookiejar`` reads one."""

    def info(self) -> email.message.Message:
        message = email.message.Message()
        message["Set-Cookie"] = "fpc=rep-a; Path=/; Secure"
        return message
