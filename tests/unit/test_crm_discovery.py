"""The Dataverse MCP query capability is found by a tool's shape, whatever it is called."""

from __future__ import annotations

from typing import Any

from mcp.types import Tool, ToolAnnotations

from copilot.crm.discovery import find_query_tool

SQL_PARAMETER = {"type": "string", "description": "One Dataverse SQL SELECT statement."}


def _tool(
    name: str,
    properties: dict[str, Any],
    *,
    required: list[str],
    read_only: bool | None = True,
    description: str = "",
) -> Tool:
    return Tool(
        name=name,
        description=description,
        inputSchema={"type": "object", "properties": properties, "required": required},
        annotations=None if read_only is None else ToolAnnotations(readOnlyHint=read_only),
    )


def test_a_read_only_tool_taking_one_sql_string_is_the_query_tool_whatever_its_name():
    found = find_query_tool([_tool("run_sql", {"querytext": SQL_PARAMETER}, required=["querytext"])])
    assert found is not None
    assert (found.name, found.parameter) == ("run_sql", "querytext")


def test_read_query_is_preferred_when_several_tools_fit():
    tools = [
        _tool("another_sql", {"q": SQL_PARAMETER}, required=["q"]),
        _tool("read_query", {"querytext": SQL_PARAMETER}, required=["querytext"]),
    ]
    found = find_query_tool(tools)
    assert found is not None
    assert found.name == "read_query"


def test_a_tool_without_the_read_only_hint_is_never_the_query_tool():
    for hint in (False, None):
        assert (
            find_query_tool(
                [_tool("read_query", {"querytext": SQL_PARAMETER}, required=["querytext"], read_only=hint)]
            )
            is None
        )


def test_a_tool_that_only_mentions_sql_but_takes_a_table_name_is_not_a_query_tool():
    describe = _tool(
        "describe",
        {"name": {"type": "string", "description": "Table logical name."}},
        required=["name"],
        description="The T-SQL-style schema of a table.",
    )
    assert find_query_tool([describe]) is None


def test_a_query_parameter_of_a_tool_described_as_sql_counts():
    tool = _tool(
        "q", {"query": {"type": "string"}}, required=["query"], description="Run a Dataverse SQL query."
    )
    found = find_query_tool([tool])
    assert found is not None
    assert found.parameter == "query"


def test_two_required_parameters_or_a_non_string_one_do_not_fit():
    two = _tool(
        "read_query", {"querytext": SQL_PARAMETER, "top": {"type": "integer"}}, required=["querytext", "top"]
    )
    number = _tool("read_query", {"querytext": {**SQL_PARAMETER, "type": "integer"}}, required=["querytext"])
    assert find_query_tool([two, number]) is None
