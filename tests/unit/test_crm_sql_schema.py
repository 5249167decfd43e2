"""The compact CRM schema a model gets on a SQL read surface (Dataverse): tools found by shape,
key columns only, built once per deployment, and what it costs per model call.

Run ``pytest tests/unit/test_crm_sql_schema.py -k tokens -s`` to print the measured cost.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from copilot.crm.sql_schema import (
    SCHEMA_TABLES,
    SchemaCache,
    ToolShape,
    describe_argument,
    parse_schema_note,
    prompt_tokens,
    schema_note,
    sql_query_argument,
    table_line,
)
from sandbox.config import SandboxSettings
from sandbox.dataverse.mcp_tools import build_dataverse_mcp, describe_table
from sandbox.dataverse.schema import entities
from sandbox.knobs import KnobState

KEY_COLUMN = SandboxSettings().dataverse_activity_key
TOKEN_BUDGET = 600
"""The issue's target: the schema costs well under this many prompt tokens per model call."""


def emulator_tools(renames: dict[str, str] | None = None) -> list[ToolShape]:
    """The emulator's ``tools/list``, every tool (reads and writes), optionally renamed."""
    tables = entities(KEY_COLUMN)
    server = build_dataverse_mcp(SandboxSettings(), KnobState(), SimpleNamespace(tables=tables))  # type: ignore[arg-type]
    listed = asyncio.run(server.list_tools())
    return [
        ToolShape(
            name=(renames or {}).get(t.name, t.name),
            description=t.description or "",
            parameters=t.inputSchema,
            read_only=bool(t.annotations and t.annotations.readOnlyHint),
        )
        for t in listed
    ]


def emulator_describe(name: str) -> str:
    """What the emulator's describe tool answers for ``name``."""
    entity = entities(KEY_COLUMN)[name]
    return json.dumps({"type": "table", "name": name, "schema": describe_table(entity)})


def emulator_note() -> str:
    return schema_note(
        "read_query",
        [
            table_line(t, describe_table(entities(KEY_COLUMN)[t]), frozenset({"new_copilotkey"}))
            for t in SCHEMA_TABLES
        ],
    )


def test_the_query_and_describe_tools_are_found_by_shape_whatever_their_names() -> None:
    tools = emulator_tools({"read_query": "dv_sql", "describe": "dv_table_info"})
    queries = [(t.name, a) for t in tools if (a := sql_query_argument(t))]
    describers = [(t.name, a) for t in tools if (a := describe_argument(t))]
    assert queries == [("dv_sql", "querytext")]
    # The schema keyword search speaks of tables and columns too, but searches: not the describer.
    assert describers == [("dv_table_info", "name")]


def test_a_tool_that_may_write_is_never_the_query_tool() -> None:
    shape = ToolShape(
        "run_sql",
        "Run a SQL query",
        {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        read_only=False,
    )
    assert sql_query_argument(shape) is None
    assert sql_query_argument(ToolShape(**{**shape.__dict__, "read_only": True})) == "q"


def test_the_note_keeps_key_columns_and_leaves_out_secured_and_bookkeeping_ones() -> None:
    tables = parse_schema_note(emulator_note())
    assert list(tables) == list(SCHEMA_TABLES)
    assert {
        "opportunityid",
        "name",
        "stepname",
        "estimatedvalue",
        "estimatedclosedate",
        "parentaccountid",
    } <= set(tables["opportunity"])
    assert "new_commission" not in tables["opportunity"]  # secured: null unless permitted
    assert "new_copilotkey" not in tables["opportunity"]  # the copilot's own write key
    assert KEY_COLUMN not in tables["activitypointer"]  # the activities' alternate key
    assert "emailaddress1" not in tables["contact"]  # PII the model does not need
    assert "versionnumber" not in tables["account"]


def test_the_schema_costs_well_under_the_budget_per_model_call() -> None:
    note = emulator_note()
    tokens = prompt_tokens(note)
    print(f"\ncompact CRM schema: {tokens} prompt tokens per model call ({len(note)} characters)")
    assert tokens < TOKEN_BUDGET


def test_the_note_is_built_once_per_crm_url_and_not_kept_when_the_crm_was_down() -> None:
    tools = emulator_tools()
    asked: list[dict[str, Any]] = []
    down = True

    async def call(name: str, args: dict[str, Any]) -> str | None:
        asked.append(args)
        return None if down else emulator_describe(str(args["name"]))

    cache = SchemaCache()

    async def scenario() -> tuple[str, str, str, str]:
        nonlocal down
        failed = await cache.get("https://org.example", tools, call)
        down = False
        first, second = await asyncio.gather(
            cache.get("https://org.example", tools, call), cache.get("https://org.example", tools, call)
        )
        other = await cache.get("https://other.example", tools, call)
        return failed, first, second, other

    failed, first, second, other = asyncio.run(scenario())
    assert failed == ""
    assert first == second != ""
    assert other == first
    # Five tables described while down, five for the first URL (once, though asked twice at
    # once), five for the second URL.
    assert len(asked) == 3 * len(SCHEMA_TABLES)


def test_without_a_query_tool_there_is_no_note() -> None:
    tools = [t for t in emulator_tools() if not sql_query_argument(t)]

    async def call(name: str, args: dict[str, Any]) -> str | None:
        raise AssertionError("nothing is described without a SQL tool")

    assert asyncio.run(SchemaCache().get("https://org.example", tools, call)) == ""


@pytest.mark.parametrize("text", ["", "You are a CRM sales copilot.", "- account: accountid key"])
def test_text_without_a_note_parses_to_nothing(text: str) -> None:
    assert parse_schema_note(text) == {}


class _Gateway:
    """The run's CRM session as the middleware uses it: describe answered like the emulator."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        from mcp.types import CallToolResult, TextContent

        self.calls.append((name, arguments))
        return CallToolResult(
            content=[TextContent(type="text", text=emulator_describe(str(arguments["name"])))]
        )


def _bound(tools: list[ToolShape]) -> list[Any]:
    from langchain_core.tools import StructuredTool

    def make(shape: ToolShape) -> Any:
        return StructuredTool(
            name=shape.name,
            description=shape.description,
            args_schema=dict(shape.parameters),
            func=lambda **_: "",
            metadata={"readOnlyHint": True} if shape.read_only else {},
        )

    return [make(t) for t in tools]


@pytest.mark.parametrize("with_sql", [True, False])
def test_the_middleware_adds_the_note_only_when_a_sql_query_tool_is_bound(with_sql: bool) -> None:
    from copilot.crm.sql_schema import SCHEMAS
    from copilot.middleware.context import crm_schema_note

    SCHEMAS.clear()
    shapes = [t for t in emulator_tools() if with_sql or not sql_query_argument(t)]
    gateway = _Gateway()
    ctx: Any = SimpleNamespace(
        crm=gateway,
        settings=SimpleNamespace(
            crm_url="https://org.example", crm_mcp_url="", crm_dataverse_key_column="new_copilotkey"
        ),
    )
    tools = _bound(shapes)
    first = asyncio.run(crm_schema_note(ctx, tools))
    second = asyncio.run(crm_schema_note(ctx, tools))
    SCHEMAS.clear()
    assert first == second
    if with_sql:
        assert "- opportunity: opportunityid key" in first
        assert "new_copilotkey" not in first
        assert len(gateway.calls) == len(SCHEMA_TABLES)  # described once, not per model call
    else:
        assert first == ""
        assert gateway.calls == []


def test_a_describe_answer_without_columns_leaves_its_table_out() -> None:
    tools = emulator_tools()

    async def call(name: str, args: dict[str, Any]) -> str | None:
        table = str(args["name"])
        return "no schema here" if table == "systemuser" else emulator_describe(table)

    note = asyncio.run(SchemaCache().get("https://org.example", tools, call))
    assert "- account: accountid key" in note
    assert "systemuser:" not in note
