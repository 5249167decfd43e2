"""Azurite (the Azure Storage emulator from npm) serving queues, or blobs, for integration tests.

Started, awaited and stopped with the bench's own helpers (``bench.azurite``): ``azurite-queue``
for the turn queues, ``azurite-blob`` (its real blob service: append blobs, conditional
headers) for the audit anchor store.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.azurite import (
    ACCOUNT,
    ACCOUNT_KEY,
    AZURITE_QUEUE,
    connection_string,
    stop,
    wait_listening,
)
from bench.sandbox import free_port
from copilot.settings import PROJECT_ROOT

__all__ = ["ACCOUNT", "Azurite", "AzuriteBlob", "run_azurite", "run_azurite_blob"]

AZURITE_BLOB = PROJECT_ROOT / "node_modules" / ".bin" / "azurite-blob"


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
def _serving(binary: Path, service: str, prefix: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """``azurite-<service>`` on a free port with a temporary workspace, stopped afterwards."""
    if not binary.exists():
        raise FileNotFoundError(f"{binary} is missing: run `npm install`")
    location = Path(tempfile.mkdtemp(prefix=prefix))
    port = free_port()
    with (location / "azurite.log").open("wb") as log:
        process = subprocess.Popen(
            [
                str(binary),
                f"--{service}Host",
                "127.0.0.1",
                f"--{service}Port",
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
            wait_listening(process, port)
        except RuntimeError as exc:
            output = (location / "azurite.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{exc}\n{output}") from exc
        yield port, process
    finally:
        stop(process)
        shutil.rmtree(location, ignore_errors=True)


@contextmanager
def run_azurite() -> Iterator[Azurite]:
    """Start ``azurite-queue`` on a free port with a temporary workspace; stop it afterwards."""
    with _serving(AZURITE_QUEUE, "queue", "azurite-") as (port, process):
        yield Azurite(port, process)


@dataclass
class AzuriteBlob:
    """A running ``azurite-blob``."""

    port: int
    process: subprocess.Popen[bytes]

    @property
    def blob_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def connection_string(self) -> str:
        """An account-key connection string (Azurite's public development key)."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.blob_endpoint};"
        )


@contextmanager
def run_azurite_blob() -> Iterator[AzuriteBlob]:
    """Start ``azurite-blob`` on a free port with a temporary workspace; stop it afterwards."""
    with _serving(AZURITE_BLOB, "blob", "azurite-blob-") as (port, process):
        yield AzuriteBlob(port, process)
