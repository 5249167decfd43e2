"""CRM sessions kept open between runs: one per CRM token, per process.

Opening an MCP session costs three round trips before its first call (``initialize``,
the ``initialized`` notification, and the tool list the client needs for the CRM's output
schemas), and the CRM does the same work on its side: most of a short turn's CRM traffic.
A rep's consecutive runs use the same token (the token broker caches it until it nearly
expires), so the process keeps the session a run opened and hands it to the next run that
presents the same token.

A session is keyed by its token and nothing else: it carries the bearer header it was
opened with (``MultiServerMCPClient`` fixes headers per client), so one rep's session is
never another rep's, a rep's read session is never their write session (different scopes,
different tokens), and a refreshed token gets a session of its own while the old one idles
out. A session the CRM refused (HTTP 401/403: access revoked, token no longer honoured) is
dropped at once, so the rep's next run opens a new one and is told plainly if the CRM
refuses that too. Sessions unused for ``idle_seconds`` are closed, and at most ``most`` are
kept (least recently used first out); a session in use by a run is never closed under it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from mcp import ClientSession

from copilot.errors import CrmUnavailable
from copilot.tools.session_host import SessionHost

logger = logging.getLogger(__name__)

IDLE_SECONDS = 300.0
"""A kept session unused this long is closed (the CRM may drop idle connections anyway)."""
MOST_SESSIONS = 256
"""Sessions kept at most per process (each holds a client and a task, no connection of its own)."""

TokenOpener = Callable[[str], AbstractAsyncContextManager[ClientSession]]
"""Opens a session authenticated with the given token."""


def _key(token: str) -> str:
    # The digest, not the token: the pool's keys end up in logs and debuggers.
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(eq=False)
class _Kept:
    host: SessionHost
    last_used: float
    borrowers: int = 0
    dropped: bool = False


@dataclass(eq=False)
class Lease:
    """One run's use of a kept session (released when the run ends)."""

    pool: CrmSessionPool
    key: str
    kept: _Kept
    session: ClientSession
    released: bool = field(default=False)

    def release(self) -> None:
        """The run is done with the session."""
        if not self.released:
            self.released = True
            self.pool._release(self)

    def drop(self) -> None:
        """The CRM refused this session: no later run gets it."""
        self.pool._drop(self.key, self.kept)


class CrmSessionPool:
    """The process's kept CRM sessions (see the module docstring)."""

    def __init__(
        self,
        *,
        idle_seconds: float = IDLE_SECONDS,
        most: int = MOST_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._idle = idle_seconds
        self._most = most
        self._clock = clock
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False
        self.opened = 0
        """Sessions opened so far (for tests and the bench)."""

    def __len__(self) -> int:
        return len(self._kept)

    async def lease(self, token: str, open_session: TokenOpener, *, name: str) -> Lease:
        """A session authenticated with ``token``: a kept one, or one opened now.

        Raises what opening raised (``AuthError``, ``CrmUnavailable``); nothing is kept then.
        """
        if self._closed:
            raise CrmUnavailable("the copilot is shutting down")
        self._sweep_idle()
        key = _key(token)
        kept = self._kept.get(key)
        if kept is not None and not kept.host.usable:
            self._drop(key, kept)
            kept = None
        if kept is None:
            self._make_room()
            kept = _Kept(SessionHost(lambda: open_session(token), name=name, detached=True), self._clock())
            self._kept[key] = kept
            self.opened += 1
        self._kept.move_to_end(key)
        kept.borrowers += 1
        kept.last_used = self._clock()
        try:
            session = await kept.host.session()
        except BaseException:
            kept.borrowers -= 1
            self._drop(key, kept)
            raise
        return Lease(self, key, kept, session)

    def _release(self, lease: Lease) -> None:
        kept = lease.kept
        kept.borrowers -= 1
        kept.last_used = self._clock()
        if kept.dropped and kept.borrowers == 0:
            self._close(kept)

    def _drop(self, key: str, kept: _Kept) -> None:
        if self._kept.get(key) is kept:
            del self._kept[key]
        if not kept.dropped:
            kept.dropped = True
            if kept.borrowers == 0:
                self._close(kept)

    def _sweep_idle(self) -> None:
        now = self._clock()
        for key, kept in list(self._kept.items()):
            if kept.borrowers == 0 and now - kept.last_used >= self._idle:
                self._drop(key, kept)

    def _make_room(self) -> None:
        # For one more: the least recently used unused ones go; sessions in use stay even
        # above the bound.
        for key, kept in list(self._kept.items()):
            if len(self._kept) < self._most:
                break
            if kept.borrowers == 0:
                self._drop(key, kept)

    def _close(self, kept: _Kept) -> None:
        # Closed in the background: the run that dropped it (or the next run's sweep)
        # does not wait for a session's teardown.
        task = asyncio.get_running_loop().create_task(kept.host.aclose(), name=f"close-{kept.host.name}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close every kept session (the process is stopping)."""
        self._closed = True
        for key, kept in list(self._kept.items()):
            kept.borrowers = 0
            self._drop(key, kept)
        if self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)


class PooledSession:
    """A run's CRM session from the pool: leased on its first use, given back when the run
    ends (the same interface as a run's own :class:`SessionHost`)."""

    def __init__(
        self,
        pool: CrmSessionPool,
        token: Callable[[], Awaitable[str]],
        open_session: TokenOpener,
        *,
        name: str,
    ):
        self._pool = pool
        self._token = token
        self._open = open_session
        self.name = name
        self._lock = asyncio.Lock()
        self._lease: Lease | None = None
        self._closed = False

    @property
    def opened(self) -> bool:
        """Whether this run has used the session."""
        return self._lease is not None

    async def session(self) -> ClientSession:
        """The session (leased now if this is its first use, or if the one leased broke or
        was dropped)."""
        async with self._lock:
            if self._closed:
                raise CrmUnavailable(f"the {self.name} session of this run is already closed")
            if self._lease is not None and (self._lease.kept.dropped or not self._lease.kept.host.usable):
                self._lease.release()
                self._lease = None
            if self._lease is None:
                self._lease = await self._pool.lease(await self._token(), self._open, name=self.name)
            return self._lease.session

    def refused(self) -> None:
        """The CRM refused a call through the session: no later run gets it."""
        if self._lease is not None:
            self._lease.drop()

    async def aclose(self) -> None:
        """The run is over: give the session back."""
        self._closed = True
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()
