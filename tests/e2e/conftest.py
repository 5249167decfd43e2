"""The stack the end-to-end tests drive: one per module, on a fresh database.

A real sandbox of the module's own (freshly seeded), a new PostgreSQL database migrated by
``python -m copilot db migrate``, the bot dev server (``python -m bot serve``, local
development mode), the Microsoft 365 Agents Playground pointed at it, and headless
Chromium on the Playground's web UI, driven step by step by ``playground_driver.mjs``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import (
    ARTIFACTS,
    ManagedProcess,
    PlaygroundDriver,
    Stack,
    find_chromium,
    start_bot,
    start_playground,
)
from tests.support.copilot_env import bot_environment
from tests.support.postgres import fresh_database
from tests.support.sandbox_process import PROJECT_ROOT, SandboxProcess, free_port, start_sandbox, stop_sandbox

FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[FAILED] = True
    return report


@pytest.fixture(scope="module")
def e2e_artifacts() -> Path:
    """``test-artifacts/e2e/`` (gitignored), emptied for this run."""
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    return ARTIFACTS


@pytest.fixture(scope="module")
def e2e_database_url(postgres_server_url: str) -> Iterator[str]:
    """A new database on the shared server for this module, dropped afterwards."""
    with fresh_database(postgres_server_url, "e2e") as url:
        yield url


@pytest.fixture(scope="module")
def e2e_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """A sandbox of this module's own, freshly seeded: the walkthroughs expect the seeded CRM
    (a deal not yet in Negotiation), whatever other test files ran before on this worker."""
    running = start_sandbox(tmp_path_factory.mktemp("e2e-sandbox"))
    try:
        yield running
    finally:
        stop_sandbox(running)


@pytest.fixture(scope="module")
def stack(
    e2e_sandbox: SandboxProcess,
    e2e_database_url: str,
    e2e_artifacts: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    chromium = find_chromium()
    workdir = tmp_path_factory.mktemp("e2e")
    env = bot_environment(e2e_database_url, e2e_sandbox, workdir / "data")
    migrate = subprocess.run(
        [sys.executable, "-m", "copilot", "db", "migrate"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrate.returncode == 0, f"db migrate failed:\n{migrate.stdout}\n{migrate.stderr}"

    started: list[ManagedProcess] = []
    teams: PlaygroundDriver | None = None
    try:
        bot_port = free_port()
        bot_url = f"http://127.0.0.1:{bot_port}/api/messages"
        bot = start_bot(env, bot_port, e2e_artifacts / "bot.log")
        started.append(bot)
        playground, url = start_playground(
            bot_url,
            free_port(),
            workdir,
            e2e_artifacts / "playground.log",
        )
        started.append(playground)
        teams = PlaygroundDriver(e2e_artifacts)
        teams(
            "launch",
            wait=90,
            url=url,
            width=1280,
            height=800,
            artifactsDir=str(e2e_artifacts),
            executablePath=chromium,
        )
        yield Stack(e2e_sandbox, bot, playground, url, teams, e2e_artifacts, bot_url)
    finally:
        if teams is not None:
            teams.close()
        for process in reversed(started):
            process.stop()


@pytest.fixture(autouse=True)
def _diagnose_failures(request: pytest.FixtureRequest, stack: Stack) -> Iterator[None]:
    """On failure: a full-page screenshot, the chat as the page shows it, and every log's tail."""
    stack.teams("viewport", width=1280, height=800)
    yield
    if not request.node.stash.get(FAILED, False):
        return
    name = request.node.name
    try:
        shot = stack.teams("screenshot", name=f"failed-{name}", fullPage=True)["path"]
        chat = "\n---\n".join(
            f"[{m['author']}] {m['text']}" for m in stack.teams("messages")["messages"][-8:]
        )
    except AssertionError as exc:
        shot, chat = "(none)", f"(the driver could not say: {exc})"
    print(f"\n=== {name} failed; screenshot: {shot}\n--- chat (last messages) ---\n{chat}")
    print(stack.diagnostics())
