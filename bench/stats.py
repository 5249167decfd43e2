"""Interleaved timing (ours, bare, ours, bare, ...) and what is reported of it: medians (p50),
p95 and p99, and ratios of the medians."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bench.counting import Costs

Progress = Callable[[str], None]


def percentile(values: list[float], p: float) -> float | None:
    """The ``p``-th percentile (0–100), linearly interpolated between the closest ranks.

    With fewer than 100 samples p99 lies between the two largest (close to the maximum).
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class Side:
    """One side of a comparison: seconds per iteration, and counts per iteration."""

    seconds: list[float] = field(default_factory=list)
    counts: list[dict[str, Any]] = field(default_factory=list)
    first_counts: dict[str, Any] | None = None
    """The counts of the first (warm-up) iteration: a cold process, nothing cached yet."""
    errors: int = 0
    """Requests that failed and have no sample (e.g. a turn never answered in time)."""

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    @property
    def p95(self) -> float | None:
        return percentile(self.seconds, 95)

    @property
    def p99(self) -> float | None:
        return percentile(self.seconds, 99)


@dataclass
class Comparison:
    """Ours against the baseline, measured in the same run."""

    scenario: str
    description: str
    baseline: str
    ours: Side = field(default_factory=Side)
    bare: Side = field(default_factory=Side)
    error: str | None = None
    """Why the scenario has no result (it failed); the others still ran."""
    kind: str = "time"
    """How the table shows it: ``time`` (median), ``latency`` (p50 / p95 / p99, errors), or
    ``wall`` (seconds per request, also as requests per second)."""

    @property
    def ratio(self) -> float | None:
        ours, bare = self.ours.median, self.bare.median
        if ours is None or bare is None or bare <= 0:
            return None
        return ours / bare


@dataclass
class NotMeasured:
    """A result the bench does not build (yet): reported as such, never as a number."""

    scenario: str
    description: str
    baseline: str
    reason: str


@dataclass
class Trial:
    """One side's iteration: ``prepare`` (untimed, e.g. the turn that proposes the write a
    click approves) and ``run`` (timed and counted), given what ``prepare`` returned. A
    ``run`` that measures itself (e.g. an import timed inside a subprocess) returns its seconds."""

    run: Callable[[Any], Awaitable[float | None]]
    prepare: Callable[[], Awaitable[Any]] | None = None


async def interleave(
    comparison: Comparison,
    ours: Trial,
    bare: Trial,
    *,
    iterations: int,
    warmup: int,
    costs: Costs | None,
    progress: Progress,
) -> Comparison:
    """``warmup`` untimed rounds, then ``iterations`` rounds of ours then bare, each timed and counted."""
    for n in range(warmup):
        for side, trial in ((comparison.ours, ours), (comparison.bare, bare)):
            prepared = await trial.prepare() if trial.prepare else None
            if costs is not None:
                costs.reset()
            await trial.run(prepared)
            if costs is not None and n == 0:
                side.first_counts = costs.snapshot()
    for i in range(iterations):
        for side, trial in ((comparison.ours, ours), (comparison.bare, bare)):
            prepared = await trial.prepare() if trial.prepare else None
            if costs is not None:
                costs.reset()
            start = time.perf_counter()
            measured = await trial.run(prepared)
            elapsed = time.perf_counter() - start
            side.seconds.append(elapsed if measured is None else measured)
            if costs is not None:
                side.counts.append(costs.snapshot())
        progress(
            f"bench: {comparison.scenario} {i + 1}/{iterations} "
            f"(ours {comparison.ours.seconds[-1] * 1000:.0f} ms, bare {comparison.bare.seconds[-1] * 1000:.0f} ms)"
        )
    return comparison
