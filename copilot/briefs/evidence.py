"""The reads a brief is composed from, kept as tool results so the answers' citation check applies.

Every CRM call goes through the rep's own read session (the CRM decides what the rep may
see: a record it does not return cannot be in a brief), and every result is recorded as a
``ToolMessage`` exactly as the agent's tools record theirs, so a brief is checked with the
very function that checks answers (:func:`copilot.citations.ids_in_tool_results`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import ToolMessage

from copilot.tools.crm_client import CrmGateway

PAGE = 100
"""Records per page of a listing (the CRM's largest page)."""
MAX_PAGES = 20


@dataclass
class Evidence:
    """One brief run's reads, in order."""

    crm: CrmGateway = field(repr=False)
    messages: list[ToolMessage] = field(default_factory=list)

    def record(self, tool: str, payload: Any) -> None:
        """Keep a result (a CRM answer or a knowledge search) as a tool result of this run."""
        self.messages.append(
            ToolMessage(
                content=json.dumps(payload, default=str),
                name=tool,
                tool_call_id=f"brief-read-{len(self.messages) + 1}",
            )
        )

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One CRM read as the rep (``CrmCallError`` if the CRM refuses it), recorded."""
        result = await self.crm.call(tool, arguments)
        self.record(tool, result)
        return result

    async def items(self, tool: str, arguments: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Every item of a paged listing, following ``next_cursor``."""
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await self.call(
                tool, {**arguments, "limit": PAGE, **({"cursor": cursor} if cursor else {})}
            )
            for item in page.get("items") or []:
                if isinstance(item, dict):
                    yield item
            next_cursor = page.get("next_cursor")
            if not isinstance(next_cursor, str) or not next_cursor:
                return
            cursor = next_cursor
