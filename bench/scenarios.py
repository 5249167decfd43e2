"""The bench's scenarios: what the scripted rep asks and which CRM records the scripted
model reads and writes.

No record is known in advance: :func:`discover` asks the CRM, as the signed-in rep and over
MCP like the copilot does, for the accounts the rep can see (in the order the CRM returns
them) and takes the first one with at least one opportunity, and that account's first
opportunity. Both sides of a comparison then make the same tool calls on those records.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import AbstractAsyncContextManager, aclosing
from dataclasses import dataclass
from typing import Any

from mcp import ClientSession

from copilot.auth.tokens import TokenBroker
from copilot.errors import CopilotError
from copilot.settings import Settings
from copilot.tools.crm_client import CrmGateway, open_crm_session
from copilot.tools.session_host import SessionHost


class NoBenchRecords(CopilotError):
    """The rep can see nothing the scenarios could read and write."""

    code = "bench_no_records"


@dataclass(frozen=True)
class Record:
    """A CRM record the scenarios name: its id and its display name."""

    id: str
    name: str


@dataclass(frozen=True)
class ReadScenario:
    """Two parallel CRM reads, then an answer citing the records they returned."""

    name: str
    question: str
    account: Record
    opportunity: Record

    @property
    def account_id(self) -> str:
        return self.account.id

    @property
    def opportunity_id(self) -> str:
        return self.opportunity.id

    @property
    def answer(self) -> str:
        return (
            f"{self.account.name} [{self.account.id}] has an open opportunity, "
            f"{self.opportunity.name} [{self.opportunity.id}], in the pipeline."
        )


@dataclass(frozen=True)
class WriteScenario:
    """The model proposes logging one call; the rep approves it."""

    name: str
    question: str
    account_id: str
    subject: str
    notes: str
    answer: str = "Done: the call is logged."


@dataclass(frozen=True)
class Scenarios:
    """Every scenario of a run, built on the records discovered for its rep."""

    turn: ReadScenario
    approve_click: WriteScenario
    bot_question: str
    """What each rep asks the bot dev server (its offline model answers with CRM reads and
    citations) and what the HTTP-trigger ack posts carry."""


def scenarios_for(account: Record, opportunity: Record) -> Scenarios:
    """The scenarios reading ``account`` and ``opportunity`` (one of the account's) and
    logging a call on ``account``."""
    return Scenarios(
        turn=ReadScenario(
            name="turn",
            question=f"bench: summarise {account.name}",
            account=account,
            opportunity=opportunity,
        ),
        approve_click=WriteScenario(
            name="approve_click",
            question=f"bench: log a call with {account.name} about {opportunity.name}",
            account_id=account.id,
            subject=f"Bench: call about {opportunity.name}",
            notes=f"Discussed {opportunity.name} (bench run).",
        ),
        bot_question=f"summarise {account.name}",
    )


async def discover(settings: Settings, broker: TokenBroker) -> Scenarios:
    """The scenarios for the rep whose tokens ``broker`` exchanges: the first account the CRM
    returns them (``search_accounts``, every page) that has an opportunity, and its first
    (``list_opportunities``). Raises :class:`NoBenchRecords` when there is none."""
    token = await broker.crm_token(write=False)

    def opener() -> AbstractAsyncContextManager[ClientSession]:
        return open_crm_session(settings, token)

    host = SessionHost(opener, name="bench discovery")
    try:
        crm = CrmGateway(host)
        async with aclosing(_accounts(crm)) as accounts:
            async for account in accounts:
                found = await crm.call("list_opportunities", {"account_id": account.id})
                opportunities = _records(found)
                if opportunities:
                    return scenarios_for(account, opportunities[0])
    finally:
        await host.aclose()
    raise NoBenchRecords("the rep can see no account with an opportunity: the bench has nothing to read")


async def _accounts(crm: CrmGateway) -> AsyncGenerator[Record]:
    """Every account the rep can see, page after page, in the order the CRM returns them."""
    arguments: dict[str, Any] = {"query": ""}
    while True:
        page = await crm.call("search_accounts", arguments)
        for account in _records(page):
            yield account
        cursor = page.get("next_cursor")
        if not cursor:
            return
        arguments = {"query": "", "cursor": cursor}


def _records(page: dict[str, Any]) -> list[Record]:
    items = page.get("items")
    return [
        Record(id=str(item["id"]), name=str(item.get("name") or item["id"]))
        for item in (items if isinstance(items, list) else [])
        if isinstance(item, dict) and item.get("id")
    ]
