"""HTTP servers the bench starts as subprocesses (the bot dev server, the echo bot)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from copilot.settings import PROJECT_ROOT

START_TIMEOUT_SECONDS = 120.0

PRODUCT_SECRETS = ("MicrosoftAppId", "MicrosoftAppPassword", "MicrosoftAppTenantId", "AzureWebJobsStorage")
"""Unset for the bench's servers: the bot runs in local development mode (no app credentials)."""


def _wait_healthy(process: subprocess.Popen[bytes], health_url: str, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"{health_url} exited at start: {log_path.read_text(errors='replace')[-2000:]}"
            )
        try:
            if httpx.get(health_url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{health_url} did not become healthy in {START_TIMEOUT_SECONDS:.0f} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def _spawn(args: list[str], variables: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in PRODUCT_SECRETS}
    env.update(variables)
    # The log goes to a file: a pipe nobody reads would fill up and block the server.
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, *args], cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )


@asynccontextmanager
async def http_server(
    args: list[str], *, variables: dict[str, str], health_url: str, log_path: Path
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """``python <args>`` with ``variables`` in its environment, healthy; stopped afterwards."""
    process = _spawn(args, variables, log_path)
    try:
        await asyncio.to_thread(_wait_healthy, process, health_url, log_path)
        yield process
    finally:
        await asyncio.to_thread(_stop, process)
