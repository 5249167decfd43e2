"""Test knobs: added latency, injected transient failures, a per-user rate limit, dropped tokens.

All off by default (the Dataverse request budget is Dataverse's own limit). Set at start-up
from ``SANDBOX_KNOBS`` (JSON) or at run time through ``PUT /admin/knobs``. Decisions are pure functions of the knobs, a random
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
    dataverse_request_budget: int | None = Field(default=6000, ge=1)
    """Dataverse service protection: requests per user (Web API and ``/api/mcp`` together) over
    ``dataverse_window_seconds``, as Dataverse's own limit; past it a 429 with ``Retry-After``.
    None = unlimited."""
    dataverse_window_seconds: int = Field(default=300, ge=1, le=86_400)
    """The sliding window the Dataverse request budget is counted over (Dataverse: 300 s)."""
    dataverse_allowed_mcp_clients: list[str] | None = None
    """Client app ids (the token's ``appid``/``azp``) allowed on ``/api/mcp``; others get 403.
    None = only the product's own app (``SandboxSettings.bot_app_id``)."""
    dataverse_mcp_tool_names: dict[str, str | None] = Field(default_factory=dict)
    """Rename (``{"read_query": "run_sql"}``) or remove (``{"search_data": null}``) Dataverse MCP
    tools, so clients' run-time tool discovery can be tested."""
    dataverse_key_column_present: bool = True
    """False = the organisation starts without the copilot's key column (on the activity tables
    and ``opportunity``) and its alternate key, so the admin command that creates them
    (``python -m copilot crm prepare``) and the doctor's check of them can be proven. Setting
    any knob puts the organisation's customisations back to what the knobs say."""


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
        self._window_calls: dict[str, deque[float]] = {}
        self._lock = threading.Lock()
        self._generation = 0

    @property
    def knobs(self) -> Knobs:
        return self._knobs

    @property
    def generation(self) -> int:
        """How many times the knobs were set: state derived from them rebuilds when it changes."""
        return self._generation

    def set(self, knobs: Knobs) -> None:
        """Replace the knobs (and forget rate-limit history, so a new setting starts clean)."""
        with self._lock:
            self._knobs = knobs
            self._generation += 1
            self._calls.clear()
            self._window_calls.clear()

    def within_budget(self, caller_id: str, limit: int | None, window_seconds: float) -> int | None:
        """Count one request of ``caller_id`` against ``limit`` per sliding ``window_seconds``.

        Returns None when it fits, else the seconds until the oldest counted request
        leaves the window (what ``Retry-After`` says). A refused request is not counted.
        """
        if limit is None:
            return None
        with self._lock:
            now = self._clock()
            calls = self._window_calls.setdefault(caller_id, deque())
            while calls and now - calls[0] >= window_seconds:
                calls.popleft()
            if len(calls) >= limit:
                return max(1, int(window_seconds - (now - calls[0])) + 1)
            calls.append(now)
        return None

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
