"""The sandbox (local stand-in for the CRM, Entra ID and Graph) as a subprocess of the bench.

Started with ``python -m sandbox serve`` on free ports with its own data directory, and
reached only over the network: the bench learns nothing from the sandbox's code, only
its URLs and the CA file it writes into its data directory.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from copilot.settings import PROJECT_ROOT

START_TIMEOUT_SECONDS = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class SandboxServer:
    """Where the running sandbox is reached."""

    data_dir: Path
    http_port: int
    https_port: int
    process: subprocess.Popen[bytes]

    @property
    def http_base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.http_base_url}/mcp"

    @property
    def graph_base_url(self) -> str:
        return f"{self.http_base_url}/v1.0"

    @property
    def idp_base_url(self) -> str:
        return f"https://localhost:{self.https_port}"

    @property
    def org_url(self) -> str:
        """The Dataverse organisation the sandbox plays (its HTTPS listener): the ``dataverse``
        profile's ``CRM_URL``, from which its MCP endpoint and Web API derive."""
        return f"https://127.0.0.1:{self.https_port}"

    @property
    def ca_cert_path(self) -> Path:
        return self.data_dir / "ca.pem"


def _start(data_dir: Path) -> SandboxServer:
    data_dir.mkdir(parents=True, exist_ok=True)
    http_port, https_port = free_port(), free_port()
    env = {
        **os.environ,
        "SANDBOX_DATA_DIR": str(data_dir),
        "SANDBOX_HTTP_PORT": str(http_port),
        "SANDBOX_HTTPS_PORT": str(https_port),
    }
    env.pop("SANDBOX_KNOBS", None)
    # The org URL is its own HTTPS listener (``org_url``), whatever the caller's shell says.
    env.pop("SANDBOX_DATAVERSE_ORG_URL", None)
    log_path = data_dir / "sandbox.log"
    # Its log goes to a file: a pipe nobody reads would fill up and block the sandbox.
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "sandbox", "serve"],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = SandboxServer(data_dir, http_port, https_port, process)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the sandbox exited at start: " + log_path.read_text(errors="replace")[-2000:])
        try:
            if httpx.get(f"{server.http_base_url}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.1)
    _stop(server)
    raise RuntimeError(f"the sandbox did not become healthy in {START_TIMEOUT_SECONDS:.0f} s")


def _stop(server: SandboxServer) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(timeout=10)


async def start_sandbox(data_dir: Path) -> SandboxServer:
    """:func:`_start` off the event loop."""
    return await asyncio.to_thread(_start, data_dir)


async def stop_sandbox(server: SandboxServer) -> None:
    await asyncio.to_thread(_stop, server)
