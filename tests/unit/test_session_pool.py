"""The kept-session pool's bookkeeping: reuse per token, idle and size limits, never
closing a session a run still uses (sessions here are stand-ins: the pool never looks
inside one; tests/integration/test_crm_session_pool.py runs it over real MCP)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import pytest
from mcp import ClientSession
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult, ErrorData, TextContent

from copilot.errors import CrmUnavailable
from copilot.tools.crm_client import CrmCallError, CrmGateway
from copilot.tools.mcp_http import JSONRPC_REFUSED
from copilot.tools.session_pool import CrmSessionPool, PooledSession


class Opener:
    def __init__(self) -> None:
        self.opened: list[str] = []
        self.closed: list[str] = []
        self.fail_with: BaseException | None = None

    @asynccontextmanager
    async def __call__(self, token: str) -> AsyncIterator[ClientSession]:
        if self.fail_with is not None:
            raise self.fail_with
        self.opened.append(token)
        try:
            yield cast(ClientSession, object())
        finally:
            self.closed.append(token)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _settled(pool: CrmSessionPool) -> None:
    """Let the pool's background closes run."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_leases_of_one_token_share_a_session_and_other_tokens_get_their_own():
    opener, pool = Opener(), CrmSessionPool()
    a1 = await pool.lease("token-a", opener, name="crm.read")
    a2 = await pool.lease("token-a", opener, name="crm.read")
    b = await pool.lease("token-b", opener, name="crm.read")
    assert a1.session is a2.session
    assert b.session is not a1.session
    assert opener.opened == ["token-a", "token-b"]
    assert pool.opened == 2
    assert len(pool) == 2
    await pool.aclose()
    assert sorted(opener.closed) == ["token-a", "token-b"]


async def test_an_idle_session_is_closed_but_one_in_use_never_is():
    opener, clock = Opener(), Clock()
    pool = CrmSessionPool(idle_seconds=10, clock=clock)
    held = await pool.lease("token-a", opener, name="crm.read")
    idle = await pool.lease("token-b", opener, name="crm.read")
    idle.release()
    clock.now = 60
    await pool.lease("token-c", opener, name="crm.read")  # a lease sweeps
    await _settled(pool)
    assert opener.closed == ["token-b"]
    assert len(pool) == 2
    again = await pool.lease("token-a", opener, name="crm.read")
    assert again.session is held.session
    await pool.aclose()


async def test_above_the_bound_the_least_recently_used_unused_session_goes_first():
    opener = Opener()
    pool = CrmSessionPool(most=2)
    for token in ("token-a", "token-b"):
        (await pool.lease(token, opener, name="crm.read")).release()
    await pool.lease("token-a", opener, name="crm.read")  # a is now the most recent
    await pool.lease("token-c", opener, name="crm.read")
    await _settled(pool)
    assert opener.closed == ["token-b"]
    await pool.aclose()


async def test_a_dropped_session_is_closed_once_its_last_run_gives_it_back():
    opener, pool = Opener(), CrmSessionPool()
    first = await pool.lease("token-a", opener, name="crm.read")
    second = await pool.lease("token-a", opener, name="crm.read")
    first.drop()
    await _settled(pool)
    assert opener.closed == []
    assert len(pool) == 0
    fresh = await pool.lease("token-a", opener, name="crm.read")
    assert fresh.session is not first.session
    first.release()
    await _settled(pool)
    assert opener.closed == []
    second.release()
    await _settled(pool)
    assert opener.closed == ["token-a"]
    await pool.aclose()


async def test_a_session_that_fails_to_open_is_not_kept_and_the_next_lease_tries_again():
    opener, pool = Opener(), CrmSessionPool()
    opener.fail_with = CrmUnavailable("down")
    with pytest.raises(CrmUnavailable):
        await pool.lease("token-a", opener, name="crm.read")
    assert len(pool) == 0
    opener.fail_with = None
    lease = await pool.lease("token-a", opener, name="crm.read")
    assert opener.opened == ["token-a"]
    assert lease.session is not None
    await pool.aclose()


async def test_a_runs_pooled_session_asks_for_the_token_once_and_is_refused_after_the_run():
    opener, pool = Opener(), CrmSessionPool()
    asked: list[Any] = []

    async def token() -> str:
        asked.append(1)
        return "token-a"

    run = PooledSession(pool, token, opener, name="crm.read")
    assert not run.opened
    assert await run.session() is await run.session()
    assert run.opened
    assert len(asked) == 1
    await run.aclose()
    with pytest.raises(CrmUnavailable):
        await run.session()
    # Given back, not closed: the next run of the same token gets the same session.
    nxt = PooledSession(pool, token, opener, name="crm.read")
    await nxt.session()
    assert opener.opened == ["token-a"]
    await pool.aclose()


class EndingSession:
    """A stand-in session whose server ended it (as a stateful MCP server answers 404)."""

    def __init__(self, error: McpError | None) -> None:
        self.error = error
        self.calls = 0

    async def call_tool(self, name: str, arguments: Any = None, **kwargs: Any) -> CallToolResult:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return CallToolResult(content=[TextContent(type="text", text='{"ok": true}')])


def _gateway(sessions: list[EndingSession]) -> tuple[CrmGateway, CrmSessionPool]:
    pool = CrmSessionPool()
    handed = iter(sessions)

    @asynccontextmanager
    async def opener(token: str) -> AsyncIterator[ClientSession]:
        yield cast(ClientSession, next(handed))

    async def token() -> str:
        return "token-a"

    return CrmGateway(PooledSession(pool, token, opener, name="crm.read")), pool


async def test_a_kept_session_the_server_ended_is_replaced_and_the_call_made_once_more():
    ended = EndingSession(McpError(ErrorData(code=32600, message="Session terminated")))
    fresh = EndingSession(None)
    crm, pool = _gateway([ended, fresh])
    assert await crm.call("get_account", {"account_id": "acc-1"}) == {"ok": True}
    assert (ended.calls, fresh.calls) == (1, 1)
    assert pool.opened == 2
    await pool.aclose()


async def test_a_refused_kept_session_is_dropped_and_the_call_is_not_retried():
    refused = EndingSession(
        McpError(ErrorData(code=JSONRPC_REFUSED, message="CRM answered HTTP 401", data={"status": 401}))
    )
    crm, pool = _gateway([refused, EndingSession(None)])
    with pytest.raises(CrmCallError):
        await crm.call("get_account", {"account_id": "acc-1"})
    assert refused.calls == 1
    assert pool.opened == 1
    assert len(pool) == 0
    await pool.aclose()
