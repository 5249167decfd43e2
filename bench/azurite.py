"""Azurite (the Azure Storage emulator, from npm) serving queues for the bench (and the
integration tests' own Azurite, ``tests/support/azurite.py``)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from bench.sandbox import free_port
from copilot.settings import PROJECT_ROOT

AZURITE_QUEUE = PROJECT_ROOT / "node_modules" / ".bin" / "azurite-queue"
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
"""Azurite's well-known development account and key (public, documented by Microsoft)."""


def connection_string(port: int) -> str:
    """What ``AzureWebJobsStorage`` holds for an emulator on ``port``."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
        f"QueueEndpoint=http://127.0.0.1:{port}/{ACCOUNT};"
    )


def spawn(location: Path, port: int) -> subprocess.Popen[bytes]:
    location.mkdir(parents=True, exist_ok=True)
    """Start ``azurite-queue`` on ``port`` with its workspace and log in ``location``."""
    with (location / "azurite.log").open("wb") as log:
        return subprocess.Popen(
            [
                str(AZURITE_QUEUE),
                "--queueHost",
                "127.0.0.1",
                "--queuePort",
                str(port),
                "--location",
                str(location),
                "--silent",
                "--skipApiVersionCheck",
                "--disableTelemetry",
            ],
            cwd=PROJECT_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def wait_listening(process: subprocess.Popen[bytes], port: int, timeout: float = 30.0) -> None:
    """Until ``azurite-queue`` accepts connections on ``port`` (``RuntimeError`` if it exits or never does)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"azurite-queue exited with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"azurite-queue did not listen on port {port} within {timeout:.0f} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate it (kill after 10 s)."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@asynccontextmanager
async def running_azurite(location: Path) -> AsyncIterator[str]:
    """``azurite-queue`` on a free port; its connection string. Stopped afterwards."""
    if not AZURITE_QUEUE.exists():
        raise FileNotFoundError(f"{AZURITE_QUEUE} is missing: run `npm install`")
    port = free_port()
    process = spawn(location, port)
    try:
        await asyncio.to_thread(wait_listening, process, port)
        yield connection_string(port)
    finally:
        await asyncio.to_thread(stop, process)
