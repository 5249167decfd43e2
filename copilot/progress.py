"""Progress lines a rep sees while a turn works ("Looking up the account's opportunities…"), pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from copilot.crm import reference
from copilot.writes import write_tool


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a turn, for streaming to Teams or the terminal."""

    kind: Literal["lookup", "proposal", "status"]
    message: str
    tool: str | None = None


def _name(names: Mapping[str, str], record_id: Any) -> str | None:
    return names.get(str(record_id)) if record_id else None


def describe_tool_call(name: str, args: Mapping[str, Any], names: Mapping[str, str]) -> ProgressEvent:
    """What the copilot is doing when it calls ``name`` with ``args`` (record names if known)."""
    account = _name(names, args.get("account_id"))
    owner = f"{account}'s" if account else "the"
    entry = write_tool(name)
    if entry is not None:
        return ProgressEvent("proposal", entry.progress(), name)
    messages = {
        reference.SEARCH_ACCOUNTS: f"Searching accounts for “{args.get('query', '')}”…"
        if args.get("query")
        else "Listing your accounts…",
        reference.GET_ACCOUNT: f"Reading {account or 'the account'}…",
        reference.LIST_OPPORTUNITIES: f"Looking up {owner} opportunities…"
        if args.get("account_id")
        else "Looking up your opportunities…",
        reference.GET_OPPORTUNITY: f"Reading {_name(names, args.get('opportunity_id')) or 'the opportunity'}…",
        reference.LIST_ACTIVITIES: f"Looking up {owner} recent activities…",
        reference.LIST_CONTACTS: f"Looking up {owner} contacts…",
        reference.GET_CONTACT: "Looking up the contact…",
        reference.PIPELINE_SUMMARY: "Summarising the pipeline…",
        reference.GET_ME: "Looking you up in the CRM…",
        "get_preferences": "Reading your preferences…",
        "recent_writes": "Looking up your recent changes…",
        "search_knowledge": "Searching the playbooks and product documents…",
    }
    return ProgressEvent("lookup", messages.get(name, f"Calling {name}…"), name)


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
