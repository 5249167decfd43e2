"""Azurite (the Azure Storage emulator from npm) serving queues, for integration tests."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
AZURITE_QUEUE = PROJECT_ROOT / "node_modules" / ".bin" / "azurite-queue"

ACCOUNT = "devstoreaccount1"
"""Azurite's well-known development account and key (public, documented by Microsoft)."""
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


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
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"QueueEndpoint={self.queue_endpoint};"
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"azurite-queue exited with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"azurite-queue did not listen on port {port} within {timeout:.0f}s")


@contextmanager
def run_azurite() -> Iterator[Azurite]:
    """Start ``azurite-queue`` on a free port with a temporary workspace; stop it afterwards."""
    if not AZURITE_QUEUE.exists():
        raise FileNotFoundError(f"{AZURITE_QUEUE} is missing: run `npm install`")
    location = Path(tempfile.mkdtemp(prefix="azurite-"))
    port = _free_port()
    log = (location / "azurite.log").open("wb")
    process = subprocess.Popen(
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
    try:
        try:
            _wait_listening(port, process)
        except (RuntimeError, TimeoutError) as exc:
            output = (location / "azurite.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{exc}\n{output}") from exc
        yield Azurite(port, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()
        shutil.rmtree(location, ignore_errors=True)
