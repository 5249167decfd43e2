"""``POST /api/messages`` enqueues a turn without importing the agent, for real.

In a fresh interpreter (this test process has long imported everything), the Function
App is indexed and its ``messages`` function called the way the Functions host calls it,
deployed (app id and secret, real botbuilder token validation against the test's
published signing key, PostgreSQL de-duplication, Azurite): a signed activity is queued
(202), a retry of it is not queued again, a bad token is 401, and afterwards no module of
LangChain, LangGraph, MCP, the runner or the models has been imported.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from azure.storage.queue import QueueClient

from copilot.settings import Settings
from tests.integration.test_function_app import Teams, deployed_function_app, queued
from tests.support.azurite import Azurite, run_azurite
from tests.support.channel_tokens import ChannelTokens
from tests.support.fake_connector import FakeConnector
from tests.support.sandbox_process import SandboxProcess
from tests.unit.test_light_http_trigger import is_agent_module

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import asyncio, json, os, sys

import azure.functions as func

import function_app

functions = {f.get_function_name(): f for f in function_app.app.get_functions()}
messages = functions["messages"].get_user_function()


async def post(body, authorization):
    headers = {"Content-Type": "application/json", "Authorization": authorization}
    request = func.HttpRequest(method="POST", url="/api/messages", headers=headers, body=body)
    return (await messages(request)).status_code


async def main():
    from functions.host import reset_host

    body = os.environ["LIGHT_BODY"].encode()
    statuses = [
        await post(body, os.environ["LIGHT_AUTHORIZATION"]),
        await post(body, os.environ["LIGHT_AUTHORIZATION"]),  # a webhook retry
        await post(body, "Bearer not-a-jwt"),
    ]
    await reset_host()
    return statuses


statuses = asyncio.run(main())
print(json.dumps({"statuses": statuses, "modules": sorted(sys.modules)}))
"""


@pytest.fixture(scope="module")
def azurite() -> Iterator[Azurite]:
    with run_azurite() as running:
        yield running


@pytest.fixture
async def connector() -> AsyncIterator[FakeConnector]:
    fake = FakeConnector()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


async def test_posting_an_activity_imports_nothing_of_the_agent(
    monkeypatch: pytest.MonkeyPatch,
    copilot_settings: Settings,
    sandbox: SandboxProcess,
    azurite: Azurite,
    channel: ChannelTokens,
    connector: FakeConnector,
):
    teams = Teams(connector, channel)
    activity = teams.activity(text="summarise Acme")
    raw = json.dumps(activity).encode()
    async with deployed_function_app(monkeypatch, copilot_settings, sandbox, azurite, channel) as queue:
        env = {**os.environ, "LIGHT_BODY": raw.decode(), "LIGHT_AUTHORIZATION": teams.sign(raw)}
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD,
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(child.communicate(), timeout=120)
        assert child.returncode == 0, err.decode()
        report = json.loads(out.decode().strip().splitlines()[-1])

        assert report["statuses"] == [202, 202, 401], err.decode()[-2000:]
        assert_queued_once(queue, activity)
    modules: list[str] = report["modules"]
    assert "functions.host" in modules, "the request went through the edge"
    assert [name for name in modules if is_agent_module(name)] == []
    assert "bot.handler" not in modules


def assert_queued_once(queue: QueueClient, activity: dict[str, object]) -> None:
    messages = queued(queue)
    assert len(messages) == 1
    assert json.loads(messages[0])["activity"] == activity
