"""Cold import time of the Azure Functions paths, each in a fresh interpreter, against a bare
``import azure.functions`` measured in the same run."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

from bench.stats import Comparison, Progress, Trial, interleave
from copilot.settings import PROJECT_ROOT

HTTP_TRIGGER = ("function_app",)
"""What the Functions host imports to index the app."""
HTTP_HANDLER = (
    "function_app",
    "bot.activity_input",
    "bot.runtime",
    "functions.dedupe",
    "functions.envelope",
    "functions.host",
)
"""Indexing, plus what the ``messages`` HTTP trigger imports on its first call."""
QUEUE_WORKER = (
    "function_app",
    "functions.envelope",
    "functions.host",
    "botbuilder.core",
    "bot.handler",
    "bot.rep_tokens",
    "copilot.runner",
    "offline_model",
)
"""Indexing, plus what the ``turns`` queue trigger imports on its first turn (the bot and the
copilot's runner and model)."""
BARE = ("azure.functions",)

_SCRIPT = """
import importlib, sys, time
start = time.perf_counter()
for name in sys.argv[1:]:
    importlib.import_module(name)
print(time.perf_counter() - start)
"""


class ImportFailed(RuntimeError):
    pass


def import_seconds(modules: tuple[str, ...]) -> float:
    """Seconds to import ``modules`` in a fresh interpreter (start-up itself not counted)."""
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, *modules],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise ImportFailed(f"import {', '.join(modules)} failed: {done.stderr.strip()[-500:]}")
    return float(done.stdout.strip().splitlines()[-1])


def _timed(modules: tuple[str, ...]) -> Trial:
    async def run(_: Any) -> float:
        return await asyncio.to_thread(import_seconds, modules)

    return Trial(run)


async def cold_imports(*, iterations: int, progress: Progress) -> list[Comparison]:
    """Both paths, each against the bare import, interleaved."""
    results = []
    for scenario, modules, description in (
        ("cold import http", HTTP_TRIGGER, "import function_app (the host indexing the app)"),
        (
            "cold import http handler",
            HTTP_HANDLER,
            "function_app + the messages trigger's first-call imports",
        ),
        ("cold import queue", QUEUE_WORKER, "function_app + the turns trigger's first-turn imports"),
    ):
        comparison = Comparison(scenario=scenario, description=description, baseline="import azure.functions")
        results.append(
            await interleave(
                comparison,
                _timed(modules),
                _timed(BARE),
                iterations=iterations,
                warmup=0,
                costs=None,
                progress=progress,
            )
        )
    return results
