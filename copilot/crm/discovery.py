"""Finding the Dataverse MCP server's capabilities by what its tools are, not what they are called.

Microsoft says the Dataverse and Dynamics 365 MCP tools may be renamed, added or dropped, and
that clients should discover them at run time. A capability is therefore recognised by a
tool's declared shape: the read-only hint (``annotations.readOnlyHint``), its input schema and
the words of its descriptions. Names only order the candidates (:data:`QUERY_TOOL_PREFERENCE`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from mcp.types import Tool

QUERY_TOOL_PREFERENCE: Final = ("read_query",)
"""Names tried first when several tools fit the query capability (Dataverse's current name);
any other fitting tool is accepted after them, in name order."""

_SQL_WORDS = re.compile(r"\b(sql|select)\b", re.IGNORECASE)
_QUERY_NAME = re.compile(r"query|sql", re.IGNORECASE)

QUERY_CAPABILITY: Final = "run a read-only query (one SQL SELECT string)"
QUERY_NEEDED_FOR: Final = (
    "answer questions over CRM records: pipeline and deal lists by stage, owner or close date, "
    "totals, an account's activity history"
)
"""What the copilot cannot do without a query tool (its reads go through it)."""


@dataclass(frozen=True)
class QueryTool:
    """A tool that runs a query: its current name and the one string parameter the SQL goes in."""

    name: str
    parameter: str


def _sql_parameter(tool: Tool) -> str | None:
    """The single required string parameter, if the tool has exactly one and it takes SQL: its
    description says SQL (or SELECT), or its name says query/SQL in a tool described as SQL.

    A tool that merely mentions SQL (``describe``: "a T-SQL-style schema") takes a table name,
    not a query, so the tool's description alone is not enough."""
    schema: dict[str, Any] = tool.inputSchema or {}
    properties = schema.get("properties") or {}
    required = [name for name in schema.get("required") or [] if name in properties]
    if len(required) != 1:
        return None
    parameter = properties[required[0]]
    if not isinstance(parameter, dict) or parameter.get("type") != "string":
        return None
    if _SQL_WORDS.search(str(parameter.get("description") or "")):
        return required[0]
    if _QUERY_NAME.search(required[0]) and _SQL_WORDS.search(tool.description or ""):
        return required[0]
    return None


def find_query_tool(tools: Sequence[Tool]) -> QueryTool | None:
    """The read-only query tool among ``tools``, or None when the server lists none.

    It must declare ``readOnlyHint: true`` (the copilot offers only read-only tools without an
    approval) and take one required string described as SQL.
    """
    fits = [
        QueryTool(tool.name, parameter)
        for tool in tools
        if tool.annotations is not None
        and tool.annotations.readOnlyHint is True
        and (parameter := _sql_parameter(tool)) is not None
    ]
    rank = {name: i for i, name in enumerate(QUERY_TOOL_PREFERENCE)}
    fits.sort(key=lambda t: (rank.get(t.name, len(rank)), t.name))
    return fits[0] if fits else None
