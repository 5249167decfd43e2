"""``python -m bench run --rep HANDLE [--json] [--quick]``: run every comparison, print the results.

Progress lines go to stderr while it runs; the table (or with ``--json`` the JSON
document) goes to stdout. ``--quick`` runs a few iterations (a CI smoke test); the full
run enough for stable medians. ``--rep`` is the sandbox user the bench signs in; the
records its scenarios read and write are found in that rep's CRM at the start of the run
(:func:`~bench.scenarios.discover`). The exit code is 1 when a scenario failed.

``CRM_KIND`` in the environment picks the CRM profile measured (``reference`` by default,
or ``dataverse``: :mod:`bench.environment`). On ``dataverse`` the turn and the approve click
are measured (the comparisons whose CRM calls differ by profile) and the cold imports (no
CRM at all); the HTTP-trigger ack (never calls the CRM), the bot dev server and the queue
path (their turns run on the offline model, which reads the reference CRM's tools only) are
listed as not measured, with the reason: their numbers are the reference profile's.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from bench.acks import http_acks
from bench.azurite import AZURITE_QUEUE
from bench.bots import bot_replies
from bench.counting import Costs, counting
from bench.environment import bench_environment, crm_profile
from bench.imports import cold_imports
from bench.model import BenchChatModel
from bench.queue_replies import queue_replies
from bench.report import document, to_json, to_table
from bench.stats import Comparison, NotMeasured, Progress
from bench.turns import approve_click_cost, turn_cost
from copilot.runner import open_service
from copilot.settings import CrmKind


@dataclass(frozen=True)
class Mode:
    name: str
    iterations: int
    warmup: int
    import_iterations: int
    ack_rounds: dict[int, int]
    """Concurrent posts → batches per side, for the HTTP trigger's ack."""
    bot_rounds: dict[int, int]
    """Concurrent conversations → batches per side, for the bot comparison."""
    queue_rounds: dict[int, int]
    """Concurrent conversations → batches per side, through the queue worker."""


QUICK = Mode(
    "quick",
    iterations=3,
    warmup=1,
    import_iterations=1,
    ack_rounds={1: 3},
    bot_rounds={1: 2},
    queue_rounds={1: 3},
)
FULL = Mode(
    "full",
    iterations=40,
    warmup=3,
    import_iterations=7,
    ack_rounds={1: 30, 10: 10, 50: 5},
    bot_rounds={1: 10, 10: 3, 50: 2},
    queue_rounds={1: 10, 10: 3, 50: 2},
)
CONCURRENCY = (1, 10, 50)

REFERENCE_ONLY: dict[str, str] = {
    "http ack": "reference profile only: the HTTP trigger never calls the CRM (validates, "
    "de-duplicates, enqueues), so it is the same on every profile",
    "bot reply": "reference profile only: the bot dev server's offline model reads the reference "
    "CRM's tools, not Dataverse's",
    "queue reply": "reference profile only: the turns worker's offline model reads the reference "
    "CRM's tools, not Dataverse's",
}
"""Why a comparison is left to the reference profile (when measuring another), per scenario."""


def _reference_only(mode: Mode) -> list[NotMeasured]:
    """On a profile other than ``reference``: the comparisons left to it, each with its reason."""
    rows = (
        (
            "http ack",
            "Functions HTTP trigger ack latency, {n} concurrent posts, Azurite queue",
            "bare HTTP trigger enqueueing the body on Azurite",
            mode.ack_rounds,
        ),
        (
            "bot reply",
            "reply latency and turns/s, {n} concurrent conversations, bot dev server",
            "minimal botbuilder echo bot",
            mode.bot_rounds,
        ),
        (
            "queue reply",
            "reply latency and turns/s, {n} concurrent conversations, HTTP trigger → "
            "Azurite queue → turns worker",
            "minimal botbuilder echo bot",
            mode.queue_rounds,
        ),
    )
    return [
        NotMeasured(
            scenario=f"{scenario} x{n}",
            description=description.format(n=n),
            baseline=baseline,
            reason=REFERENCE_ONLY[scenario],
        )
        for scenario, description, baseline, _ in rows
        for n in CONCURRENCY
    ]


def not_measured(mode: Mode, crm_kind: CrmKind = "reference") -> list[NotMeasured]:
    """What this run does not measure: said so in the output, never a made-up number."""
    if crm_kind != "reference":
        return _reference_only(mode)
    azurite = AZURITE_QUEUE.exists()
    skipped = [
        NotMeasured(
            scenario=f"http ack x{n}",
            description=f"Functions HTTP trigger ack latency, {n} concurrent posts, Azurite queue",
            baseline="bare HTTP trigger enqueueing the body on Azurite",
            reason="measured in the full run only"
            if azurite
            else f"no Azurite ({AZURITE_QUEUE}): run npm install",
        )
        for n in CONCURRENCY
        if n not in mode.ack_rounds or not azurite
    ]
    skipped += [
        NotMeasured(
            scenario=f"bot reply x{n}",
            description=f"reply latency and turns/s, {n} concurrent conversations, bot dev server",
            baseline="minimal botbuilder echo bot",
            reason="measured in the full run only",
        )
        for n in CONCURRENCY
        if n not in mode.bot_rounds
    ]
    skipped += [
        NotMeasured(
            scenario=f"queue reply x{n}",
            description=f"reply latency and turns/s, {n} concurrent conversations, HTTP trigger → "
            "Azurite queue → turns worker",
            baseline="minimal botbuilder echo bot",
            reason="measured in the full run only"
            if azurite
            else f"no Azurite ({AZURITE_QUEUE}): run npm install",
        )
        for n in CONCURRENCY
        if n not in mode.queue_rounds or not azurite
    ]
    return skipped


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def _guarded(
    scenario: str, description: str, run: Awaitable[list[Comparison]], progress: Progress
) -> list[Comparison]:
    """A scenario's results, or (it failed) the scenario carrying its error; the others still run."""
    try:
        return await run
    except Exception as exc:  # noqa: BLE001 - one failed scenario is reported, not raised
        progress(f"bench: {scenario} failed: {type(exc).__name__}: {exc}")
        return [Comparison(scenario, description, baseline="-", error=f"{type(exc).__name__}: {exc}")]


async def _one(run: Awaitable[Comparison]) -> list[Comparison]:
    return [await run]


async def run_bench(
    mode: Mode, rep: str, progress: Progress = _stderr, crm_kind: CrmKind = "reference"
) -> dict[str, Any]:
    """Every comparison in ``mode`` on ``crm_kind``'s CRM profile, signed in as ``rep``; the JSON
    document."""
    comparisons: list[Comparison] = []
    costs = Costs()
    reference = crm_kind == "reference"
    async with (
        bench_environment(progress, rep, crm_kind) as env,
        open_service(env.settings, model=BenchChatModel.scripted(env.scenarios)) as service,
    ):
        with counting(costs):
            for scenario, description, measure in (
                ("lookup cost", "run_turn vs bare create_agent", functools.partial(turn_cost, lookup=True)),
                ("turn cost", "run_turn vs bare create_agent", turn_cost),
                ("approve click", "decide vs bare HITL resume", approve_click_cost),
            ):
                progress(f"bench: {scenario} ({mode.iterations} iterations, {mode.warmup} warm-up)")
                timed = measure(
                    env,
                    service,
                    iterations=mode.iterations,
                    warmup=mode.warmup,
                    costs=costs,
                    progress=progress,
                )
                comparisons += await _guarded(scenario, description, _one(timed), progress)
        if reference and AZURITE_QUEUE.exists():
            progress(f"bench: http acks (concurrency: batches {mode.ack_rounds})")
            acks = http_acks(env, rounds=mode.ack_rounds, progress=progress)
            comparisons += await _guarded(
                "http ack", "Functions HTTP trigger vs bare trigger", acks, progress
            )
        if reference:
            progress(f"bench: bot replies (concurrency: batches {mode.bot_rounds})")
            bots = bot_replies(env, rounds=mode.bot_rounds, progress=progress)
            comparisons += await _guarded("bot reply", "bot dev server vs echo bot", bots, progress)
        else:
            progress(f"bench: http acks, bot and queue replies: reference profile only ({crm_kind})")
        if reference and AZURITE_QUEUE.exists():
            progress(f"bench: queue replies (concurrency: batches {mode.queue_rounds})")
            replies = queue_replies(env, rounds=mode.queue_rounds, progress=progress)
            comparisons += await _guarded("queue reply", "queue worker vs echo bot", replies, progress)
    progress(f"bench: cold imports ({mode.import_iterations} iterations)")
    imports = cold_imports(iterations=mode.import_iterations, progress=progress)
    comparisons += await _guarded("cold import", "Functions import paths", imports, progress)
    return document(mode.name, mode.iterations, comparisons, not_measured(mode, crm_kind), crm_kind)


def main(*, rep: str, quick: bool, as_json: bool, crm_kind: CrmKind | None = None) -> int:
    """The ``bench`` command, signed in as ``rep``, on ``crm_kind``'s profile (default: the
    environment's ``CRM_KIND``); returns the exit code."""
    kind = crm_kind if crm_kind is not None else crm_profile()
    doc = asyncio.run(run_bench(QUICK if quick else FULL, rep, crm_kind=kind))
    print(to_json(doc) if as_json else to_table(doc), flush=True)
    return 1 if any(r["error"] for r in doc["results"]) else 0
