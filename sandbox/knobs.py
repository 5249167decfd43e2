"""Test knobs: added latency, injected transient failures, a per-user rate limit, dropped tokens.

All off by default. Set at start-up from ``SANDBOX_KNOBS`` (JSON) or at run time
through ``PUT /admin/knobs``. Decisions are pure functions of the knobs, a random
source and a clock, so tests can drive them deterministically.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FailureKind = Literal["timeout", "503", "429"]
ALL_FAILURE_KINDS: tuple[FailureKind, ...] = ("timeout", "503", "429")


class Knobs(BaseModel):
    """What the sandbox CRM does to make clients' lives hard."""

    model_config = ConfigDict(extra="forbid")

    latency_ms: int = Field(default=0, ge=0, le=60_000)
    failure_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    failure_kinds: list[FailureKind] = Field(default_factory=lambda: list(ALL_FAILURE_KINDS), min_length=1)
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    retry_after_seconds: int = Field(default=1, ge=0, le=3600)
    rate_limit_per_minute: int | None = Field(default=None, ge=1)
    token_service_signed_out: list[str] = Field(default_factory=list)
    """Handles whose token the Bot Framework token service stand-in drops (``GetToken`` is 404
    for them however they signed in); clearing it is their signing in again."""
    token_service_refuses_exchange: list[str] = Field(default_factory=list)
    """Handles whose Teams SSO token the token service stand-in will not exchange (``exchange``
    answers 400 ``ExchangeFailed`` and signs nobody in), as the real service refuses one when
    the OAuth connection cannot take it (e.g. consent missing for its scopes)."""


@dataclass(frozen=True)
class Verdict:
    """What to do with one tool call before running it."""

    kind: Literal["ok", "timeout", "503", "429", "rate_limited"]
    retry_after_seconds: int = 0


class KnobState:
    """The live knobs plus the per-user call history the rate limit needs (thread-safe)."""

    def __init__(
        self,
        knobs: Knobs | None = None,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._knobs = knobs or Knobs()
        self._rng = rng or random.Random()
        self._clock = clock
        self._calls: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    @property
    def knobs(self) -> Knobs:
        return self._knobs

    def set(self, knobs: Knobs) -> None:
        """Replace the knobs (and forget rate-limit history, so a new setting starts clean)."""
        with self._lock:
            self._knobs = knobs
            self._calls.clear()

    def judge(self, caller_id: str) -> Verdict:
        """Decide the fate of one tool call by ``caller_id``."""
        with self._lock:
            knobs = self._knobs
            limit = knobs.rate_limit_per_minute
            if limit is not None:
                now = self._clock()
                calls = self._calls.setdefault(caller_id, deque())
                while calls and now - calls[0] >= 60.0:
                    calls.popleft()
                if len(calls) >= limit:
                    wait = max(1, int(60.0 - (now - calls[0])) + 1)
                    return Verdict("rate_limited", retry_after_seconds=wait)
                calls.append(now)
            if knobs.failure_rate > 0 and self._rng.random() < knobs.failure_rate:
                kind = self._rng.choice(knobs.failure_kinds)
                return Verdict(kind, retry_after_seconds=knobs.retry_after_seconds)
        return Verdict("ok")
