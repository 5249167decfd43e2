"""What the model is sent of each tool and tool result: compact, and naming every registered tool."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.utils.function_calling import convert_to_openai_tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from mcp.types import Tool as ToolDefinition

from copilot.prompts import system_prompt
from copilot.tools.compact_schema import compact_json_schema
from copilot.tools.crm_client import compact_result, read_tools
from copilot.writes import REGISTRY, write_tools


def _walk(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        return [node, *(n for v in node.values() for n in _walk(v))]
    if isinstance(node, list):
        return [n for v in node for n in _walk(v)]
    return []


def test_an_optional_field_is_sent_as_its_type_without_null_default_or_title():
    schema = {
        "title": "Args",
        "properties": {
            "stage": {
                "anyOf": [{"enum": ["A", "B"], "type": "string"}, {"type": "null"}],
                "default": None,
                "description": "New stage",
                "title": "Stage",
            },
            "amount": {"anyOf": [{"type": "number"}, {"type": "string"}], "title": "Amount"},
        },
        "required": [],
    }
    assert compact_json_schema(schema) == {
        "properties": {
            "stage": {"enum": ["A", "B"], "type": "string", "description": "New stage"},
            # A real choice of types is kept.
            "amount": {"anyOf": [{"type": "number"}, {"type": "string"}]},
        },
        "required": [],
    }


def test_every_write_tool_is_sent_compact_and_smaller_than_its_pydantic_schema():
    for tool in write_tools():
        sent = convert_to_openai_tool(tool.langchain_tool())["function"]["parameters"]
        nodes = _walk(sent)
        assert not [n for n in nodes if {"type": "null"} in n.get("anyOf", [])], tool.name
        assert not [n for n in nodes if "title" in n and not isinstance(n["title"], dict)], tool.name
        assert set(sent["properties"]) == set(tool.args_schema.model_fields), tool.name
        full = tool.args_schema.model_json_schema()
        assert len(json.dumps(sent)) < len(json.dumps(full)), tool.name


def test_the_system_prompt_names_exactly_the_registered_write_tools():
    prompt = system_prompt(REGISTRY)
    for name in REGISTRY:
        assert name in prompt
    assert system_prompt(["only_this_tool"]).count("only_this_tool") == 1


def test_the_crms_read_tools_are_sent_without_null_branches_and_still_name_every_field():
    definition = ToolDefinition(
        name="list_things",
        description="Things.",
        inputSchema={
            "type": "object",
            "properties": {
                "account_id": {
                    "anyOf": [{"type": "string"}, {"type": "null"}],
                    "default": None,
                    "title": "A",
                },
                "limit": {"type": "integer", "default": 20, "minimum": 1},
            },
        },
        annotations=ToolAnnotations(readOnlyHint=True),
    )
    (tool,) = read_tools([definition])
    sent = convert_to_openai_tool(tool)["function"]["parameters"]
    assert sent["properties"] == {
        "account_id": {"type": "string"},
        "limit": {"type": "integer", "default": 20, "minimum": 1},
    }


def test_a_crm_result_reaches_the_model_compact_with_its_data_intact():
    data = {
        "items": [{"id": "x-1", "name": "Café — Nord", "next_step": None}],
        "next_cursor": None,
        "total": 1,
    }
    result = CallToolResult(
        content=[
            TextContent(type="text", text=json.dumps(data, indent=2)),
            TextContent(type="text", text="not json"),
        ]
    )
    compacted = compact_result(result)
    first, second = compacted.content
    assert isinstance(first, TextContent)
    assert isinstance(second, TextContent)
    assert first.text == '{"items":[{"id":"x-1","name":"Café — Nord"}],"total":1}'
    assert second.text == "not json"
    assert len(first.text) < len(json.dumps(data))
