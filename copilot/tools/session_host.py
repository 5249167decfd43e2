"""An MCP session opened on first use and kept for the rest of a run, in a task of its own.

MCP's streamable-HTTP client must be closed by the task that opened it, while LangGraph
runs every tool call in a task of its own. The host opens the session in a task it owns
and closes it there when the run ends; meanwhile any task of the run may use it. A run
that never needs a backend exchanges no token for it and opens no connection.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import httpx
from mcp import ClientSession
from mcp.shared.exceptions import McpError

from copilot.errors import CopilotError, CrmUnavailable

logger = logging.getLogger(__name__)

SessionOpener = Callable[[], AbstractAsyncContextManager[ClientSession]]


class SessionHost:
    """One lazily opened MCP session for one run (see the module docstring)."""

    def __init__(self, open_session: SessionOpener, *, name: str, detached: bool = False):
        self._open = open_session
        self.name = name
        # A detached host (a session kept between runs) runs in a context of its own, not
        # a copy of the run that happened to open it (its tracer, its graph runtime).
        self._detached = detached
        self._lock = asyncio.Lock()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._session: ClientSession | None = None
        self._closed = False

    @property
    def opened(self) -> bool:
        """Whether the session was opened in this run."""
        return self._session is not None

    @property
    def usable(self) -> bool:
        """Whether the session can (still) be used: not closed, and not ended by an error."""
        return not self._closed and (self._task is None or not self._task.done())

    def refused(self) -> None:
        """The backend refused a call through this session: nothing to do for a run's own
        session, which ends with the run (a kept one is dropped instead)."""

    async def session(self) -> ClientSession:
        """The session, opened now if this is its first use.

        Raises what opening raised (``AuthError`` for a refused sign-in, ``CrmUnavailable``
        for an unreachable backend); a later call tries again.
        """
        async with self._lock:
            if self._closed:
                raise CrmUnavailable(f"the {self.name} session of this run is already closed")
            if self._session is None:
                ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
                task = asyncio.create_task(
                    self._host(ready),
                    name=f"mcp-session-{self.name}",
                    context=contextvars.Context() if self._detached else None,
                )
                # Shielded: a caller cancelled while waiting must not cancel the open for others.
                self._session = await asyncio.shield(ready)
                self._task = task
            return self._session

    async def _host(self, ready: asyncio.Future[ClientSession]) -> None:
        try:
            async with self._open() as session:
                ready.set_result(session)
                await self._closing.wait()
        except BaseException as exc:
            # Not handled here: handed to the caller waiting for the session (an error
            # while opening), or re-raised for aclose (an error after it was in use).
            if ready.done():
                raise
            if isinstance(exc, asyncio.CancelledError):
                ready.cancel()
                raise
            ready.set_exception(exc)

    async def aclose(self) -> None:
        """Close the session (in the task that opened it) and wait until it is closed."""
        self._closed = True
        self._closing.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            await task
        except (CopilotError, McpError, httpx.HTTPError, OSError, ExceptionGroup) as exc:
            # The run's result is already made; a session that broke while closing only
            # gets logged (calls that failed through it reported their own errors).
            logger.warning("the %s MCP session did not close cleanly: %r", self.name, exc)
