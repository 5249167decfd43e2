"""The offline model keeps what it worked out from bound tools, and never serves it stale.

``create_agent`` binds the same tools before every model call, so the model describes
each tool and finds which serves each role once per tool list. A different list, or a
tool changed in place, must be worked out again: the model's choices follow the tools
bound now.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import BaseTool, StructuredTool

from offline_model import OfflineChatModel

TODAY = dt.date(2026, 5, 6)
QUESTION = "summarise Vandelay"


def _search_tool(name: str, *, read_only: bool = True) -> BaseTool:
    def search(query: str = "") -> str:
        """Search accounts by name."""
        return ""

    return StructuredTool.from_function(search, name=name, metadata={"readOnlyHint": read_only})


def _first_calls(runnable: Any) -> list[tuple[str, dict[str, Any]]]:
    reply = runnable.invoke([HumanMessage(QUESTION)])
    assert isinstance(reply, AIMessage)
    return [(c["name"], c["args"]) for c in reply.tool_calls]


def test_a_model_bound_to_other_tools_after_the_first_plans_with_the_tools_bound_now() -> None:
    model = OfflineChatModel(today=TODAY)
    first, second = [_search_tool("find_accounts")], [_search_tool("lookup_companies")]

    assert _first_calls(model.bind_tools(first)) == [("find_accounts", {"query": "Vandelay"})]
    assert _first_calls(model.bind_tools(second)) == [("lookup_companies", {"query": "Vandelay"})]
    # Back to the first list, and the two in one list (the first one bound wins a tie).
    assert _first_calls(model.bind_tools(first)) == [("find_accounts", {"query": "Vandelay"})]
    assert _first_calls(model.bind_tools([*second, *first])) == [("lookup_companies", {"query": "Vandelay"})]


def test_a_tool_changed_in_place_is_described_again() -> None:
    model = OfflineChatModel(today=TODAY)
    tool = _search_tool("find_accounts")
    tools = [tool]
    assert _first_calls(model.bind_tools(tools)) == [("find_accounts", {"query": "Vandelay"})]

    tool.name = "lookup_companies"
    assert _first_calls(model.bind_tools(tools)) == [("lookup_companies", {"query": "Vandelay"})]

    # No longer annotated read-only: the model may not read from it.
    assert tool.metadata is not None
    tool.metadata["readOnlyHint"] = False
    assert _first_calls(model.bind_tools(tools)) == []


def test_a_json_tool_changed_in_place_is_described_again() -> None:
    model = OfflineChatModel(today=TODAY)
    tool: dict[str, Any] = {
        "name": "find_accounts",
        "description": "Search accounts by name.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        "annotations": {"readOnlyHint": True},
    }
    assert _first_calls(model.bind_tools([tool])) == [("find_accounts", {"query": "Vandelay"})]

    tool["name"] = "lookup_companies"
    assert _first_calls(model.bind_tools([tool])) == [("lookup_companies", {"query": "Vandelay"})]


def test_bound_descriptions_changed_in_place_are_read_again() -> None:
    model = OfflineChatModel(today=TODAY)
    described: dict[str, Any] = {
        "name": "find_accounts",
        "description": "Search accounts by name.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        "read_only": True,
    }
    bound = model.bind(tools=[described])
    assert _first_calls(bound) == [("find_accounts", {"query": "Vandelay"})]

    described["parameters"]["properties"] = {"name": {"type": "string"}}
    # It no longer takes a query, so it cannot search: the model has nothing to read with.
    assert _first_calls(bound) == []
    described["parameters"]["properties"] = {"query": {"type": "string"}}
    described["name"] = "lookup_companies"
    assert _first_calls(bound) == [("lookup_companies", {"query": "Vandelay"})]
