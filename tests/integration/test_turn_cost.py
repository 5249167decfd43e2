"""What a turn costs in TLS and database round trips, and that sharing them shares no tokens.

Real PostgreSQL, the real sandbox over HTTP (its CRM MCP endpoint) and its identity
provider over HTTPS with the sandbox's CA, counted by wrapping the functions that do the
expensive things.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from collections import Counter
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from copilot.auth.tokens import OboTokenBroker
from copilot.settings import Settings
from copilot.tools import crm_client
from copilot.tools.crm_client import CrmGateway, open_crm_session
from copilot.tools.mcp_http import shared_http
from copilot.tools.session_host import SessionHost
from tests.support.copilot_env import service, sign_in
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def costs(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counts: Counter[str] = Counter()
    create = ssl.create_default_context

    def create_default_context(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        counts["ssl_context"] += 1
        return create(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", create_default_context)
    load = ssl.SSLContext.load_verify_locations

    def load_verify_locations(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        counts["ca_load"] += 1
        load(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", load_verify_locations)
    check = AsyncConnectionPool.check_connection

    async def check_connection(conn: Any) -> None:
        counts["db_check_round_trip"] += 1
        await check(conn)

    monkeypatch.setattr(AsyncConnectionPool, "check_connection", staticmethod(check_connection))
    getconn = AsyncConnectionPool.getconn

    async def counting_getconn(self: AsyncConnectionPool[Any], *args: Any, **kwargs: Any) -> Any:
        counts["db_checkout"] += 1
        return await getconn(self, *args, **kwargs)

    monkeypatch.setattr(AsyncConnectionPool, "getconn", counting_getconn)
    return counts


async def test_turns_build_no_tls_context_and_check_no_connection_used_moments_ago(
    copilot_settings: Settings, costs: Counter[str]
):
    rep = await sign_in(copilot_settings, "alex")
    assertion = rep.broker.user_assertion
    async with service(copilot_settings) as svc:
        await svc.run_turn(rep.identity, rep.broker, None, "what's going on with the Acme account?")
        costs.clear()
        for _ in range(3):
            # A broker per turn, as the bot's SSO path builds one: a new credential each time.
            broker = OboTokenBroker(copilot_settings, rep.identity, assertion)
            result = await svc.run_turn(rep.identity, broker, None, "what's going on with the Acme account?")
            assert result.answer
            assert result.citations

    assert costs["ssl_context"] == 0, costs
    assert costs["ca_load"] == 0, costs
    # The turns did use pooled connections (several per turn), so the check count below
    # is about real checkouts.
    assert costs["db_checkout"] >= 6, costs
    # Connections used within the idle threshold are handed out as they are (a connection
    # the pool opened during the turns is checked once).
    assert costs["db_check_round_trip"] <= 2, costs


async def test_two_reps_concurrent_sessions_each_reach_the_crm_with_their_own_token(
    copilot_settings: Settings, sandbox: SandboxProcess, monkeypatch: pytest.MonkeyPatch
):
    # Each session's client is tagged (a header only this test adds), and every request the
    # shared connection pool sends is recorded with its tag and its bearer token.
    tags = itertools.count()
    factory = crm_client.mcp_http_client_factory

    def tagged(headers: dict[str, str] | None = None, **kwargs: Any) -> httpx.AsyncClient:
        return factory(headers={**(headers or {}), "x-test-client": str(next(tags))}, **kwargs)

    monkeypatch.setattr(crm_client, "mcp_http_client_factory", tagged)
    sent: list[tuple[str | None, str | None]] = []
    pools: set[int] = set()
    original = httpx.AsyncHTTPTransport.handle_async_request

    async def recording(self: httpx.AsyncHTTPTransport, request: httpx.Request) -> httpx.Response:
        pools.add(id(self))
        sent.append((request.headers.get("x-test-client"), request.headers.get("authorization")))
        return await original(self, request)

    monkeypatch.setattr(httpx.AsyncHTTPTransport, "handle_async_request", recording)
    reps = ("alex", "megan")
    tokens = {rep: sandbox.token(rep, ["crm.read"]) for rep in reps}
    before = len(sandbox.admin("GET", "/admin/request-log"))

    async def searches(rep: str, sessions: int = 3, calls: int = 5) -> list[list[str]]:
        """Several sessions of one rep, each open at once with the other rep's."""
        seen: list[list[str]] = []
        for _ in range(sessions):
            host = SessionHost(lambda: open_crm_session(copilot_settings, tokens[rep]), name=f"crm {rep}")
            crm = CrmGateway(host)
            try:
                for _ in range(calls):
                    result = await crm.call("search_accounts", {"query": ""})
                    seen.append(sorted(a["id"] for a in result["items"]))
                    await asyncio.sleep(0)
            finally:
                await host.aclose()
        return seen

    async with shared_http():
        found = await asyncio.gather(*(searches(rep) for rep in reps))
    by_rep = dict(zip(reps, found, strict=True))

    assert len(pools) == 1, "both reps' sessions went through the one shared pool"
    # The CRM answered each rep as that rep, every time (their books differ)...
    own = {
        rep: sorted(
            a["id"] for a in sandbox.call(rep, "search_accounts", query="")["structuredContent"]["items"]
        )
        for rep in reps
    }
    assert own["alex"] != own["megan"]
    for rep in reps:
        assert by_rep[rep] == [own[rep]] * 15, rep
    # ...and logged each call under the rep who made it.
    log = sandbox.admin("GET", "/admin/request-log")[before:]
    callers = Counter(e["caller_id"] for e in log if e["tool"] == "search_accounts")
    assert callers["u-alex"] >= 15, callers
    assert callers["u-megan"] >= 15, callers
    # Every request through the shared pool carried a bearer token, and each session's
    # client only ever its own rep's.
    owner = {f"Bearer {token}": rep for rep, token in tokens.items()}
    per_client: dict[str | None, set[str]] = {}
    for tag, auth in sent:
        assert auth in owner, "a request without its rep's token"
        per_client.setdefault(tag, set()).add(owner[auth])
    assert None not in per_client
    assert len(per_client) == 6, per_client
    assert all(len(reps_seen) == 1 for reps_seen in per_client.values()), per_client
