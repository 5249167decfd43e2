"""The copilot on the ``dataverse`` profile: reads through the Dataverse MCP server's read-only
tools, writes through the Web API (ETag ``If-Match``, alternate-key upsert), against the
sandbox's Dataverse face over real HTTPS, with real PostgreSQL and the rep's OBO token.

The scripted model stands in for an LLM where a test needs exact tool calls.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from copilot.citations import message_text
from copilot.errors import InvalidDecision
from copilot.persistence import audit
from copilot.persistence.database import connect
from copilot.runner import TurnResult
from copilot.settings import Settings
from sandbox.dataverse.ids import guid_for
from tests.support.copilot_env import prepare_database, service, sign_in
from tests.support.dataverse import webapi
from tests.support.dataverse_env import dataverse_settings
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls

pytestmark = pytest.mark.integration

ACME = guid_for("account", "acc-acme")
ANALYTICS = guid_for("opportunity", "opp-acme-analytics")


@pytest.fixture
async def dv_settings(database_url: str, sandbox: SandboxProcess) -> AsyncIterator[Settings]:
    from copilot.middleware.resilience import reset_breakers

    reset_breakers()
    settings = dataverse_settings(database_url, sandbox)
    await prepare_database(settings)
    yield settings
    sandbox.admin("PUT", "/admin/knobs", {})


def _log(subject: str, **extra: Any) -> dict[str, Any]:
    return call("log_activity", account_id=ACME, type="call", subject=subject, notes="Discussed pricing.", **extra)


def _approve(tool_call_id: str) -> dict[str, Any]:
    return {"tool_call_id": tool_call_id, "type": "approve"}


def _calls_by_key(sandbox: SandboxProcess, key: str) -> list[dict[str, Any]]:
    """The emulator's phone calls whose alternate key is ``key`` (counted in the CRM itself)."""
    state = sandbox.admin("GET", "/admin/export")
    return [a for a in state["activities"] if a.get("external_id") == key]


async def _audit_rows(settings: Settings) -> list[Any]:
    async with connect(settings) as conn:
        return await audit.list_entries(conn)


async def test_a_question_binds_only_the_crms_read_only_tools_and_reads_with_read_query(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    model = ScriptedChatModel(
        steps=[calls(call("read_query", querytext=f"SELECT name, accountid FROM account WHERE accountid = '{ACME}'"))],
        final=f"Acme Corporation [{ACME}]",
    )
    rep = await sign_in(dv_settings, "alex")
    async with service(dv_settings, model) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "summarise Acme")

    bound = model.bound_tools
    assert {"read_query", "search", "describe"} <= bound
    assert not bound & {"create_record", "update_record", "delete_record"}
    assert result.answer is not None and ACME in result.citations
