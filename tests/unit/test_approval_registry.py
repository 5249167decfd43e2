"""The start-up check that every write is interrupted, and which CRM tools count as reads."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents.middleware import HumanInTheLoopMiddleware, InterruptOnConfig
from langchain_core.tools import BaseTool, StructuredTool
from mcp.types import ListToolsResult, Tool, ToolAnnotations

from copilot.agent_tools.model_tools import local_read_tools, write_tools
from copilot.errors import ConfigurationError
from copilot.middleware.approval import approval_middleware, assert_every_write_is_interrupted
from copilot.tools import crm_client
from copilot.writes import WRITE_TOOL_SCHEMAS
from copilot.writes import write_tools as registered_write_tools

CRM_READS = {"search_accounts", "get_account", "list_opportunities", "list_contacts"}
FIRST_WRITE = next(iter(WRITE_TOOL_SCHEMAS))
"""Any registered write tool (the first): the checks below hold for each of them."""


def _tool(name: str) -> BaseTool:
    async def run(**_: Any) -> str:
        return "{}"

    return StructuredTool.from_function(coroutine=run, name=name, description=f"the {name} tool")


def _real_tools() -> list[BaseTool]:
    return [*(_tool(n) for n in sorted(CRM_READS)), *local_read_tools(), *write_tools()]


def _read_only() -> set[str]:
    return set(CRM_READS) | {t.name for t in local_read_tools()}


def _interrupting(*names: str, mode: str = "per_call") -> HumanInTheLoopMiddleware[Any, Any, Any]:
    interrupt_on: dict[str, bool | InterruptOnConfig] = {
        name: InterruptOnConfig(allowed_decisions=["approve", "edit", "reject"]) for name in names
    }
    return HumanInTheLoopMiddleware(interrupt_on=interrupt_on, interrupt_mode=mode)  # type: ignore[arg-type]


def test_the_real_configuration_passes_the_start_up_check():
    assert_every_write_is_interrupted(_real_tools(), approval_middleware(), read_only=_read_only())


def test_a_tool_that_is_neither_read_only_nor_interrupted_is_refused():
    tools = [*_real_tools(), _tool("delete_account")]

    with pytest.raises(ConfigurationError, match="delete_account") as raised:
        assert_every_write_is_interrupted(tools, approval_middleware(), read_only=_read_only())

    assert raised.value.fields.get("tool") == "delete_account"


def test_a_crm_write_tool_is_refused_unless_declared_read_only():
    # The CRM's own MCP write tool, if it ever slipped into the model's tools.
    tools = [*_real_tools(), _tool("upsert_activity")]

    with pytest.raises(ConfigurationError, match="upsert_activity"):
        assert_every_write_is_interrupted(tools, approval_middleware(), read_only=_read_only())


def test_a_tool_interrupted_without_all_three_decisions_is_refused():
    hitl = HumanInTheLoopMiddleware(
        interrupt_on={
            **{
                n: InterruptOnConfig(allowed_decisions=["approve", "edit", "reject"])
                for n in WRITE_TOOL_SCHEMAS
            },
            FIRST_WRITE: InterruptOnConfig(allowed_decisions=["approve", "reject"]),
        },
        interrupt_mode="per_call",
    )

    with pytest.raises(ConfigurationError, match=FIRST_WRITE):
        assert_every_write_is_interrupted(_real_tools(), hitl, read_only=_read_only())


@pytest.mark.parametrize("name", ["send_email", "SendMail", "crm_send_quote"])
def test_a_send_tool_is_refused_even_if_interrupted(name: str):
    hitl = _interrupting(*WRITE_TOOL_SCHEMAS, name)

    with pytest.raises(ConfigurationError, match="send"):
        assert_every_write_is_interrupted([*_real_tools(), _tool(name)], hitl, read_only=_read_only())


def test_a_send_tool_is_refused_even_if_declared_read_only():
    with pytest.raises(ConfigurationError, match="send"):
        assert_every_write_is_interrupted(
            [*_real_tools(), _tool("send_email")],
            approval_middleware(),
            read_only={*_read_only(), "send_email"},
        )


def test_approvals_in_batched_mode_are_refused():
    hitl = _interrupting(*WRITE_TOOL_SCHEMAS, mode="batched")
    assert hitl.interrupt_mode != "per_call"

    with pytest.raises(ConfigurationError, match="per call"):
        assert_every_write_is_interrupted(_real_tools(), hitl, read_only=_read_only())


def test_the_approval_middleware_interrupts_exactly_the_write_tools_per_call_with_all_three_decisions():
    hitl = approval_middleware()

    assert hitl.interrupt_mode == "per_call"
    # Exactly the registry (the one list of write tools; no copy of it here).
    assert set(hitl.interrupt_on) == {t.name for t in registered_write_tools()}
    assert hitl.interrupt_on
    for name, config in hitl.interrupt_on.items():
        assert sorted(config["allowed_decisions"]) == ["approve", "edit", "reject"], name


def test_the_copilots_own_tools_are_its_writes_and_its_known_local_reads():
    assert {t.name for t in write_tools()} == set(WRITE_TOOL_SCHEMAS)
    assert {t.name for t in local_read_tools()} == {
        "get_preferences",
        "recent_writes",
        "search_knowledge",
        "deals_at_risk",
        "catch_up",
        "pending_approvals",
        "who_can_approve",
        "brief_me",
        "todays_digest",
        "approval_stats",
    }
    assert not {t.name for t in local_read_tools()} & set(WRITE_TOOL_SCHEMAS)


# --- which CRM tools the model gets ------------------------------------------------------------


class FakeSession:
    def __init__(self, tools: list[Tool]):
        self._tools = tools

    async def list_tools(self) -> ListToolsResult:
        return ListToolsResult(tools=self._tools)


def _mcp_tool(name: str, annotations: ToolAnnotations | None) -> Tool:
    return Tool(name=name, inputSchema={"type": "object", "properties": {}}, annotations=annotations)


async def test_only_crm_tools_declared_read_only_are_given_to_the_model():
    listed = [
        _mcp_tool("get_account", ToolAnnotations(readOnlyHint=True)),
        _mcp_tool("list_opportunities", ToolAnnotations(readOnlyHint=True, destructiveHint=False)),
        _mcp_tool("upsert_activity", ToolAnnotations(readOnlyHint=False)),
        _mcp_tool("update_opportunity", ToolAnnotations(destructiveHint=True)),
        _mcp_tool("delete_everything", None),
        _mcp_tool("send_email", ToolAnnotations(title="Send an email")),
    ]

    definitions = await crm_client.read_tool_definitions(FakeSession(listed))  # type: ignore[arg-type]
    tools = crm_client.read_tools(definitions)

    assert sorted(t.name for t in tools) == ["get_account", "list_opportunities"]
    # CRM refusals come back to the model as tool results, not as crashes.
    assert all(t.handle_tool_error for t in tools)
    assert all((t.metadata or {}).get("readOnlyHint") is True for t in tools)


async def test_a_crm_that_declares_nothing_read_only_gives_the_model_no_crm_tools():
    listed = [_mcp_tool("get_account", None), _mcp_tool("list_contacts", ToolAnnotations())]

    assert await crm_client.read_tool_definitions(FakeSession(listed)) == []  # type: ignore[arg-type]
