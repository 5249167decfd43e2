"""Concurrent load: N requests at once, each one's latency and the batch's wall time; and the
per-concurrency comparisons it fills (latency per request, wall time per request)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from bench.stats import Comparison, Progress


class LoadFailed(RuntimeError):
    """A request of a batch was not answered as expected (the measurement would be void)."""


Check = Callable[[dict[str, Any], httpx.Response], None]


async def post_batch(
    client: httpx.AsyncClient,
    url: str,
    bodies: list[dict[str, Any]],
    *,
    headers: Callable[[dict[str, Any]], dict[str, str]] = lambda _: {},
    expect: tuple[int, ...] = (200, 201, 202),
    check: Check | None = None,
) -> tuple[list[float], float]:
    """Post every body at once; each one's latency, and the batch's wall time."""

    async def post(body: dict[str, Any]) -> float:
        start = time.perf_counter()
        response = await client.post(url, json=body, headers=headers(body))
        elapsed = time.perf_counter() - start
        if response.status_code not in expect:
            raise LoadFailed(f"{url} answered {response.status_code}: {response.text[:200]}")
        if check is not None:
            check(body, response)
        return elapsed

    start = time.perf_counter()
    latencies = await asyncio.gather(*(post(b) for b in bodies))
    return list(latencies), time.perf_counter() - start


@dataclass
class LoadPair:
    """The two comparisons of one concurrency: latency per request, and batch wall time / N."""

    latency: Comparison
    wall: Comparison


Timed = tuple[list[float], float]
"""A batch's latencies (one per answered request) and its wall time."""
TimedWithErrors = tuple[list[float], float, int]
"""The same, and how many of its requests failed (no latency for them)."""
Batch = Callable[[int], Awaitable[Timed | TimedWithErrors]]
"""One batch of N concurrent requests against one side."""


async def alternate(
    name: str,
    what: str,
    baseline: str,
    ours: Batch,
    bare: Batch,
    *,
    rounds: dict[int, int],
    progress: Progress,
) -> list[Comparison]:
    """For each concurrency N (``rounds``: N → batches per side), ours and bare batches alternating."""
    results: list[Comparison] = []
    for n, batches in rounds.items():
        pair = LoadPair(
            Comparison(f"{name} x{n}", f"{what} latency, {n} concurrent", baseline, kind="latency"),
            Comparison(
                f"{name} wall/req x{n}",
                f"batch wall time / {n} = 1 / requests per second",
                baseline,
                kind="wall",
            ),
        )
        for b in range(batches):
            for batch, latency, wall in (
                (ours, pair.latency.ours, pair.wall.ours),
                (bare, pair.latency.bare, pair.wall.bare),
            ):
                latencies, seconds, *failed = await batch(n)
                latency.seconds += latencies
                latency.errors += sum(failed)
                wall.errors += sum(failed)
                wall.seconds.append(seconds / n)
            progress(
                f"bench: {name} x{n} {b + 1}/{batches} "
                f"(ours {1 / pair.wall.ours.seconds[-1]:.1f}/s, bare {1 / pair.wall.bare.seconds[-1]:.1f}/s)"
            )
        results += [pair.latency, pair.wall]
    return results
