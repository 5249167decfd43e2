"""The reads a brief is composed from, kept as tool results so the answers' citation check applies.

Every CRM read goes through the rep's own typed reads (:class:`copilot.crm.reads.CrmReads`,
whichever CRM it is: the CRM decides what the rep may see, so a record it does not return
cannot be in a brief), and every result is recorded as a ``ToolMessage`` exactly as the agent's
tools record theirs, so a brief is checked with the very function that checks answers
(:func:`copilot.citations.ids_in_tool_results`). The recorded names say what was read
(``crm.account``), not which CRM tool read it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from langchain_core.messages import ToolMessage

from copilot.crm.reads import CrmReads, Record
from copilot.crm.types import TargetKind


@dataclass
class Evidence:
    """One brief run's reads, in order: the rep's :class:`~copilot.crm.reads.CrmReads`, each answer
    recorded (``record`` keeps a result; ``record_of`` reads one CRM record)."""

    crm: CrmReads = field(repr=False)
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

    def _one(self, what: str, record: Record) -> Record:
        self.record(f"crm.{what}", record)
        return record

    def _many(self, what: str, records: list[Record]) -> list[Record]:
        self.record(f"crm.{what}", {"items": records, "count": len(records)})
        return records

    async def me(self) -> Record:
        """The rep's own CRM user."""
        return self._one("me", await self.crm.me())

    async def accounts(self) -> list[Record]:
        """The accounts the rep can see."""
        return self._many("accounts", await self.crm.accounts())

    async def contacts(self, account_id: str) -> list[Record]:
        """An account's contacts."""
        return self._many("contacts", await self.crm.contacts(account_id))

    async def account(self, account_id: str) -> Record:
        """One account."""
        return self._one("account", await self.crm.account(account_id))

    async def open_opportunities(self, *, account_id: str | None = None, mine: bool = False) -> list[Record]:
        """Open opportunities of an account and/or the rep's own."""
        return self._many(
            "open_opportunities", await self.crm.open_opportunities(account_id=account_id, mine=mine)
        )

    async def closed_opportunities(
        self, *, since: datetime, account_id: str | None = None, mine: bool = False
    ) -> list[Record]:
        """Opportunities won or lost since a moment, of an account and/or the rep's own."""
        return self._many(
            "closed_opportunities",
            await self.crm.closed_opportunities(since=since, account_id=account_id, mine=mine),
        )

    async def activities(
        self,
        *,
        account_id: str | None = None,
        opportunity_id: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
    ) -> list[Record]:
        """The newest activities regarding an account or an opportunity."""
        found = await self.crm.activities(
            account_id=account_id, opportunity_id=opportunity_id, since=since, limit=limit
        )
        return self._many("activities", found)

    async def record_of(self, kind: TargetKind, record_id: str) -> Record:
        """One record by kind and id."""
        return self._one(kind, await self.crm.record(kind, record_id))

    async def history(self, kind: TargetKind, record_id: str) -> list[Record]:
        """A record's kept versions (who changed what, when), oldest first."""
        return self._many("history", await self.crm.history(kind, record_id))
