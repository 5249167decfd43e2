"""The bench's scenarios: what the scripted rep asks and which CRM records the scripted
model reads and writes.

No record is known in advance: :func:`discover` asks the CRM, as the signed-in rep and over
MCP like the copilot does, for the accounts the rep can see (in the order the CRM returns
them) and takes the first one with at least one opportunity, and that account's first
opportunity. Both sides of a comparison then make the same tool calls on those records.

On the ``reference`` profile it calls the reference CRM's tools by name (``search_accounts``,
``list_opportunities``). On ``dataverse`` no tool is called by name (Microsoft may rename them):
the read-only query tool is found by its schema (:func:`copilot.crm.discovery.find_query_tool`)
and asked in SQL, and the scripted model reads with that same tool.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import AbstractAsyncContextManager, aclosing
from dataclasses import dataclass
from typing import Any

from mcp import ClientSession

from copilot.auth.tokens import TokenBroker
from copilot.crm.discovery import QueryTool, find_query_tool
from copilot.errors import CopilotError
from copilot.settings import CrmKind, Settings
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
    query: QueryTool | None = None
    """``dataverse``: the read-only query tool (as discovered) both reads go through; None on
    ``reference``, whose reads are ``get_account`` and ``list_opportunities``."""
    single: bool = False
    """A lookup: only the first read (the account), and an answer citing it."""

    @property
    def account_id(self) -> str:
        return self.account.id

    @property
    def opportunity_id(self) -> str:
        return self.opportunity.id

    def reads(self) -> list[tuple[str, dict[str, Any]]]:
        """The reads the model asks for in parallel (two; one for a lookup): (tool, arguments) each."""
        both = self._both()
        return both[:1] if self.single else both

    def _both(self) -> list[tuple[str, dict[str, Any]]]:
        if self.query is None:
            return [
                ("get_account", {"account_id": self.account_id}),
                ("list_opportunities", {"account_id": self.account_id}),
            ]
        # The same two questions in Dataverse SQL, through the one tool that answers them.
        return [
            (
                self.query.name,
                {
                    self.query.parameter: "SELECT accountid, name, address1_city, websiteurl FROM account "
                    f"WHERE accountid = '{self.account_id}'"
                },
            ),
            (
                self.query.name,
                {
                    self.query.parameter: "SELECT opportunityid, name, salesstage, estimatedvalue, "
                    f"estimatedclosedate FROM opportunity WHERE parentaccountid = '{self.account_id}'"
                },
            ),
        ]

    @property
    def answer(self) -> str:
        if self.single:
            return f"{self.account.name} [{self.account.id}] is one of your accounts."
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
    lookup: ReadScenario
    """One read, then an answer: the cheapest question (the prompt-size row's lookup)."""
    crm_kind: CrmKind
    """The CRM profile the records were found on (``reference`` or ``dataverse``)."""
    bot_question: str
    """What each rep asks the bot dev server (its offline model answers with CRM reads and
    citations) and what the HTTP-trigger ack posts carry."""


def scenarios_for(
    account: Record, opportunity: Record, *, crm_kind: CrmKind = "reference", query: QueryTool | None = None
) -> Scenarios:
    """The scenarios reading ``account`` and ``opportunity`` (one of the account's) and
    logging a call on ``account``; on ``dataverse`` the reads go through ``query``."""
    return Scenarios(
        turn=ReadScenario(
            name="turn",
            question=f"bench: summarise {account.name}",
            account=account,
            opportunity=opportunity,
            query=query,
        ),
        lookup=ReadScenario(
            name="lookup",
            question=f"bench: where is {account.name} based?",
            account=account,
            opportunity=opportunity,
            query=query,
            single=True,
        ),
        approve_click=WriteScenario(
            name="approve_click",
            question=f"bench: log a call with {account.name} about {opportunity.name}",
            account_id=account.id,
            subject=f"Bench: call about {opportunity.name}",
            notes=f"Discussed {opportunity.name} (bench run).",
        ),
        bot_question=f"summarise {account.name}",
        crm_kind=crm_kind,
    )


async def discover(settings: Settings, broker: TokenBroker) -> Scenarios:
    """The scenarios for the rep whose tokens ``broker`` exchanges, on ``settings.crm_kind``'s
    CRM: the first account the CRM returns them that has an opportunity, and its first. Raises
    :class:`NoBenchRecords` when there is none."""
    token = await broker.crm_token(write=False)

    def opener() -> AbstractAsyncContextManager[ClientSession]:
        return open_crm_session(settings, token)

    host = SessionHost(opener, name="bench discovery")
    try:
        crm = CrmGateway(host)
        if settings.crm_kind == "dataverse":
            return await _discover_dataverse(crm)
        return await _discover_reference(crm)
    finally:
        await host.aclose()


async def _discover_reference(crm: CrmGateway) -> Scenarios:
    """``search_accounts`` (every page) until an account has an opportunity (``list_opportunities``)."""
    async with aclosing(_accounts(crm)) as accounts:
        async for account in accounts:
            found = await crm.call("list_opportunities", {"account_id": account.id})
            opportunities = _records(found)
            if opportunities:
                return scenarios_for(account, opportunities[0])
    raise NoBenchRecords("the rep can see no account with an opportunity: the bench has nothing to read")


DATAVERSE_DISCOVERY_SQL = (
    "SELECT TOP 1 a.accountid AS accountid, a.name AS accountname, "
    "o.opportunityid AS opportunityid, o.name AS opportunityname "
    "FROM account a JOIN opportunity o ON o.parentaccountid = a.accountid "
    "ORDER BY a.name, o.name"
)
"""One query for the account and its opportunity: the CRM's MCP query tool is capped and has no
paging, so a per-account loop could miss accounts past the cap; a join cannot. Ordered by name,
so every run of a seed picks the same records."""


async def _discover_dataverse(crm: CrmGateway) -> Scenarios:
    """The query tool, found by its schema among the tools the CRM lists, asked in SQL for the
    first account (by name) that has an opportunity, and that account's first opportunity."""
    listed = await (await crm.session()).list_tools()
    query = find_query_tool(listed.tools)
    if query is None:
        raise NoBenchRecords(
            "the CRM's MCP server lists no read-only query tool (one SQL string): the bench cannot read"
        )
    found = await crm.call(query.name, {query.parameter: DATAVERSE_DISCOVERY_SQL})
    rows = found.get("rows")
    row = rows[0] if isinstance(rows, list) and rows and isinstance(rows[0], dict) else None
    if row is None or not row.get("accountid") or not row.get("opportunityid"):
        raise NoBenchRecords("the rep can see no account with an opportunity: the bench has nothing to read")
    account = Record(id=str(row["accountid"]), name=str(row.get("accountname") or row["accountid"]))
    opportunity = Record(
        id=str(row["opportunityid"]), name=str(row.get("opportunityname") or row["opportunityid"])
    )
    return scenarios_for(account, opportunity, crm_kind="dataverse", query=query)


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
