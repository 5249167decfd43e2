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

from copilot.errors import CrmUnavailable
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
