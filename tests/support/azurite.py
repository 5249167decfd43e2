"""Azurite (the Azure Storage emulator from npm) serving queues, for integration tests.

Started, awaited and stopped with the bench's own helpers (``bench.azurite``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.azurite import ACCOUNT, AZURITE_QUEUE, connection_string, spawn, stop, wait_listening
from bench.sandbox import free_port

__all__ = ["ACCOUNT", "Azurite", "run_azurite"]


@dataclass
class Azurite:
    """A running ``azurite-queue``."""

    port: int
    process: subprocess.Popen[bytes]

    @property
    def queue_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def connection_string(self) -> str:
        """What ``AzureWebJobsStorage`` holds for this emulator."""
        return connection_string(self.port)


@contextmanager
def run_azurite() -> Iterator[Azurite]:
    """Start ``azurite-queue`` on a free port with a temporary workspace; stop it afterwards."""
    if not AZURITE_QUEUE.exists():
        raise FileNotFoundError(f"{AZURITE_QUEUE} is missing: run `npm install`")
    location = Path(tempfile.mkdtemp(prefix="azurite-"))
    port = free_port()
    process = spawn(location, port)
    try:
        try:
            wait_listening(process, port)
        except RuntimeError as exc:
            output = (location / "azurite.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{exc}\n{output}") from exc
        yield Azurite(port, process)
    finally:
        stop(process)
        shutil.rmtree(location, ignore_errors=True)
