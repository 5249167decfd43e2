"""Injected time for code that waits: a clock and a sleep that only move when a test moves them.

A 50-second turn runs in a fraction of a second: ``advance(50)`` moves the clock in small
steps, wakes every sleeper whose time came, and lets each woken task run until it sleeps again
or finishes (its I/O, e.g. a real HTTP request to a fake connector, included) before the next
step. What a woken task did therefore happened at the virtual moment it woke, and a recorder
that reads ``now`` stamps it with that moment.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

SETTLE_TIMEOUT = 30.0
"""Real seconds a woken task may take to sleep again or finish before the test fails."""


@dataclass
class _Sleeper:
    due: float
    wake: asyncio.Future[None]
    task: asyncio.Task[Any] | None


@dataclass
class VirtualTime:
    """``now`` is a ``time.monotonic`` stand-in and ``sleep`` an ``asyncio.sleep`` one."""

    current: float = 1000.0
    _sleepers: list[_Sleeper] = field(default_factory=list)

    def now(self) -> float:
        return self.current

    async def sleep(self, seconds: float) -> None:
        wake = asyncio.get_running_loop().create_future()
        sleeper = _Sleeper(self.current + max(seconds, 0.0), wake, asyncio.current_task())
        self._sleepers.append(sleeper)
        try:
            await wake
        finally:
            if sleeper in self._sleepers:
                self._sleepers.remove(sleeper)

    def _asleep(self, task: asyncio.Task[Any] | None) -> bool:
        return any(s.task is task and not s.wake.done() for s in self._sleepers)

    async def advance(self, seconds: float, *, step: float = 0.25) -> None:
        """Move the clock by ``seconds``, waking sleepers on the way (see the module docstring)."""
        end = self.current + seconds
        while self.current < end:
            for _ in range(3):  # tasks created just now start (and go to sleep) at this moment
                await asyncio.sleep(0)
            self.current = min(self.current + step, end)
            due = [s for s in self._sleepers if s.due <= self.current and not s.wake.done()]
            for sleeper in due:
                sleeper.wake.set_result(None)
            await self._settle([s.task for s in due])

    async def _settle(self, tasks: list[asyncio.Task[Any] | None]) -> None:
        deadline = time.monotonic() + SETTLE_TIMEOUT
        await asyncio.sleep(0)
        while any(t is not None and not t.done() and not self._asleep(t) for t in tasks):
            if time.monotonic() > deadline:
                raise AssertionError("a woken task neither slept again nor finished")
            await asyncio.sleep(0.002)
