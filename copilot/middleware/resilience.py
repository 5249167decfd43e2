"""Transient CRM failures: retry with backoff + jitter (honouring Retry-After), then a breaker.

Only transient errors are retried: timeouts, network errors, HTTP 429 and 5xx (reported
by :mod:`copilot.tools.mcp_http` as JSON-RPC errors marked transient). Permission,
validation and not-found answers are results, not failures, and are never retried.
After retries are exhausted the circuit breaker counts one failure; while it is open,
CRM tools answer at once that live CRM data is unavailable.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from langchain.agents.middleware import AgentMiddleware, ToolRetryMiddleware
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.types import Command

from copilot.errors import UNAVAILABLE_MESSAGE
from copilot.tools.mcp_http import CANDIDATE_ERRORS, is_transient, retry_after
from copilot.tracing import trace_event

Handler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]


def backoff_delay(
    retry_number: int,
    *,
    backoff_factor: float,
    initial_delay: float,
    max_delay: float,
    jitter: bool,
) -> float:
    """Seconds to wait before retry ``retry_number`` (0 for the first): exponential backoff.

    ``initial_delay * backoff_factor ** retry_number`` (``initial_delay`` throughout with a
    factor of 0), capped at ``max_delay``; with ``jitter``, up to 25 % either way, never
    below 0, so that clients failing together do not retry together. The same arithmetic
    as ``ToolRetryMiddleware``'s own retries, which LangChain keeps private.
    """
    delay = initial_delay if backoff_factor == 0.0 else initial_delay * backoff_factor**retry_number
    delay = min(delay, max_delay)
    if jitter and delay > 0:
        spread = delay * 0.25
        delay = max(0.0, delay + random.uniform(-spread, spread))  # timing, not a secret
    return delay


class CrmRetryMiddleware(ToolRetryMiddleware):
    """``ToolRetryMiddleware`` whose delay is never shorter than the server's Retry-After.

    A Retry-After longer than ``max_delay`` ends the retries at once (the turn answers
    that live CRM data is unavailable) rather than stalling the rep or retrying early.
    """

    def __init__(self, *, max_retries: int, initial_delay: float, max_delay: float):
        super().__init__(
            max_retries=max_retries,
            retry_on=is_transient,
            on_failure="error",
            backoff_factor=2.0,
            initial_delay=initial_delay,
            max_delay=max_delay,
            jitter=True,
        )

    async def awrap_tool_call(self, request: ToolCallRequest, handler: Handler) -> ToolMessage | Command[Any]:
        for attempt in range(self.max_retries + 1):
            try:
                return await handler(request)
            except CANDIDATE_ERRORS as exc:
                if not is_transient(exc) or attempt >= self.max_retries:
                    raise
                server_wait = retry_after(exc) or 0.0
                if server_wait > self.max_delay:
                    # Retrying sooner than the server asked is rude and futile; waiting longer
                    # would stall the rep. Give up now: the breaker reports "unavailable".
                    raise
                delay = backoff_delay(
                    attempt,
                    backoff_factor=self.backoff_factor,
                    initial_delay=self.initial_delay,
                    max_delay=self.max_delay,
                    jitter=self.jitter,
                )
                await asyncio.sleep(max(min(delay, self.max_delay), server_wait))
        raise AssertionError("unreachable: the loop returns or raises")


BreakerState = Literal["closed", "open", "half_open"]


@dataclass
class CircuitBreaker:
    """Consecutive-failure breaker for one CRM endpoint (shared by all turns of a process)."""

    failure_threshold: int
    reset_seconds: float
    clock: Callable[[], float] = time.monotonic
    failures: int = 0
    opened_at: float | None = None
    probing: bool = False
    """A half-open probe is in flight: everyone else still fails fast until it returns."""

    @property
    def state(self) -> BreakerState:
        if self.opened_at is None:
            return "closed"
        return "half_open" if self.clock() - self.opened_at >= self.reset_seconds else "open"

    def allow(self) -> bool:
        """Whether a call may go through now (one probe at a time when half-open)."""
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self.probing:
            self.probing = True
            return True
        return False

    def record_success(self) -> None:
        self.failures = 0
        self.opened_at = None
        self.probing = False

    def record_failure(self) -> None:
        before = self.state
        self.failures += 1
        if self.failures >= self.failure_threshold or before == "half_open":
            self.opened_at = self.clock()
            if before != "open":
                # Recorded in the run whose failure opened it (each later run fails fast).
                trace_event("breaker_open", failures=self.failures, reset_seconds=self.reset_seconds)
        self.probing = False


_BREAKERS: dict[str, CircuitBreaker] = {}


def breaker_for(url: str, *, failure_threshold: int, reset_seconds: float) -> CircuitBreaker:
    """The process-wide breaker of one CRM endpoint."""
    breaker = _BREAKERS.get(url)
    if breaker is None:
        breaker = _BREAKERS[url] = CircuitBreaker(failure_threshold, reset_seconds)
    return breaker


class CircuitBreakerMiddleware(AgentMiddleware[Any, Any, Any]):
    """Fails fast while the CRM is down; turns exhausted transient failures into a clear result."""

    def __init__(self, breaker: CircuitBreaker, crm_tools: set[str]):
        super().__init__()
        self.breaker = breaker
        self.crm_tools = crm_tools

    def _unavailable(self, request: ToolCallRequest) -> ToolMessage:
        return ToolMessage(
            content=json.dumps({"error": {"code": "unavailable", "message": UNAVAILABLE_MESSAGE}}),
            name=request.tool_call["name"],
            tool_call_id=request.tool_call["id"],
            status="error",
        )

    async def awrap_tool_call(self, request: ToolCallRequest, handler: Handler) -> ToolMessage | Command[Any]:
        if request.tool_call["name"] not in self.crm_tools:
            return await handler(request)
        if not self.breaker.allow():
            return self._unavailable(request)
        try:
            result = await handler(request)
        except CANDIDATE_ERRORS as exc:
            if not is_transient(exc):
                self.breaker.record_success()  # the CRM answered (with a refusal): it is up
                raise
            self.breaker.record_failure()
            return self._unavailable(request)
        except BaseException:
            # Cancelled or failed for reasons that say nothing about the CRM: never leave a
            # half-open probe marked as in flight, or the breaker would stay shut for good.
            self.breaker.probing = False
            raise
        self.breaker.record_success()
        return result


def reset_breakers() -> None:
    """Forget every breaker's state (a fresh start, e.g. between test cases)."""
    _BREAKERS.clear()
