"""Progress lines a rep sees while a turn works ("Looking up the account's opportunities…"), pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from copilot.crm.connector import progress_line
from copilot.writes import write_tool


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a turn, for streaming to Teams or the terminal."""

    kind: Literal["lookup", "proposal", "status"]
    message: str
    tool: str | None = None


def describe_tool_call(name: str, args: Mapping[str, Any], names: Mapping[str, str]) -> ProgressEvent:
    """What the copilot is doing when it calls ``name`` with ``args`` (record names if known).

    A CRM read tool's line comes from the connector (which alone knows a CRM's tool names); a
    tool nobody describes gets a generic line.
    """
    entry = write_tool(name)
    if entry is not None:
        return ProgressEvent("proposal", entry.progress(), name)
    own = {
        "get_preferences": "Reading your preferences…",
        "recent_writes": "Looking up your recent changes…",
        "search_knowledge": "Searching the playbooks and product documents…",
        "deals_at_risk": "Checking your deals for risk…",
        "catch_up": "Looking up what changed…",
    }
    line = own.get(name) or progress_line(name, args, names) or f"Calling {name}…"
    return ProgressEvent("lookup", line, name)


def names_in(value: Any, names: dict[str, str]) -> None:
    """Collect ``id → name`` pairs from a tool result, to make progress lines readable."""
    if isinstance(value, dict):
        if isinstance(value.get("id"), str) and isinstance(value.get("name"), str):
            names[value["id"]] = value["name"]
        for child in value.values():
            names_in(child, names)
    elif isinstance(value, list):
        for child in value:
            names_in(child, names)
