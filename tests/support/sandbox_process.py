"""Run the real sandbox (``python -m sandbox serve``) as a subprocess for integration tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import httpx

from sandbox.config import SandboxSettings
from sandbox.directory import find_user
from sandbox.identity.tokens import issue_token

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SandboxProcess:
    settings: SandboxSettings
    process: subprocess.Popen[str]
    env: dict[str, str] = field(default_factory=dict)

    def token(self, rep: str, scopes: list[str] | None = None, **kwargs: Any) -> str:
        """A delegated CRM token (``crm.read crm.write`` unless ``scopes`` says otherwise)."""
        user = find_user(rep)
        assert user is not None, rep
        scopes = ["crm.read", "crm.write"] if scopes is None else scopes
        audience = kwargs.pop("audience", self.settings.crm_audience)
        return issue_token(self.settings, user=user, audience=audience, scopes=scopes, **kwargs)

    def rpc(self, token: str | None, method: str, params: dict[str, Any] | None = None) -> httpx.Response:
        """One MCP JSON-RPC request over streamable HTTP (the server is stateless)."""
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
        return httpx.post(self.settings.mcp_url, json=body, headers=headers, timeout=30)

    def call(self, rep_or_token: str, tool: str, **arguments: Any) -> dict[str, Any]:
        """Call a tool; returns the CallToolResult (``isError``, ``structuredContent``...)."""
        token = rep_or_token if rep_or_token.count(".") == 2 else self.token(rep_or_token)
        response = self.rpc(token, "tools/call", {"name": tool, "arguments": arguments})
        response.raise_for_status()
        payload = response.json()
        assert "result" in payload, payload
        result: dict[str, Any] = payload["result"]
        return result

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        response = httpx.request(method, f"{self.settings.http_base_url}{path}", json=body, timeout=30)
        response.raise_for_status()
        return response.json()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sandbox", *args],
            cwd=PROJECT_ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )


class PortTaken(RuntimeError):
    """A port found free was taken by another process before the sandbox bound it."""


def start_sandbox(data_dir: Path, seed_date: date | None = None) -> SandboxProcess:
    """The sandbox as a subprocess on free ports; ``seed_date`` pins the day its records and
    meetings follow (``tests/support/moments.py``), else they follow today.

    A free port is free only until someone binds it: with parallel workers another process may
    take it between :func:`free_port` and the sandbox's bind, so that start is tried again on
    new ports (a few times)."""
    for attempt in range(3):
        try:
            return _start_sandbox(data_dir, seed_date)
        except PortTaken:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _start_sandbox(data_dir: Path, seed_date: date | None) -> SandboxProcess:
    http_port, https_port = free_port(), free_port()
    env = {
        **{k: v for k, v in os.environ.items() if k != "SANDBOX_SEED_DATE"},
        "SANDBOX_DATA_DIR": str(data_dir),
        "SANDBOX_HTTP_PORT": str(http_port),
        "SANDBOX_HTTPS_PORT": str(https_port),
    }
    if seed_date is not None:
        env["SANDBOX_SEED_DATE"] = seed_date.isoformat()
    settings = SandboxSettings(
        data_dir=data_dir, http_port=http_port, https_port=https_port, seed_date=seed_date
    )
    # Its log goes to a file: a pipe nobody reads fills up (about 64 KB) and then blocks
    # the sandbox mid-request for the rest of a long session.
    log_path = data_dir / "sandbox.log"
    log = log_path.open("w", encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "serve"],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = log_path.read_text(encoding="utf-8", errors="replace")
            if "address already in use" in output:
                raise PortTaken(f"sandbox could not bind its ports:\n{output}")
            raise RuntimeError(f"sandbox exited early:\n{output}")
        try:
            if httpx.get(f"{settings.http_base_url}/healthz", timeout=1).status_code == 200:
                return SandboxProcess(settings=settings, process=process, env=env)
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("sandbox did not become healthy in 60 s")


def stop_sandbox(sandbox: SandboxProcess) -> None:
    sandbox.process.terminate()
    try:
        sandbox.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        sandbox.process.kill()


def tool_json(result: dict[str, Any]) -> Any:
    """The JSON a tool returned (its text content), for results without structured content."""
    return json.loads(result["content"][0]["text"])
