"""The reference connector: the sandbox CRM's own MCP tools, called by name.

This is the only module that knows the reference CRM's tool names. Its writes are the CRM's
own keyed, versioned tools: ``upsert_activity`` creates once per ``external_id``, and
``update_opportunity`` replays an ``idempotency_key`` it already applied before it compares
versions, so finding an earlier write by key is the write itself (``find_*`` answer None and
the write guard's recovery calls the write again with the same key).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from mcp.types import Tool as ToolDefinition

from copilot.crm.reads import Record
from copilot.crm.types import (
    ActivityRef,
    ActivityRequest,
    ActivityResult,
    Conflict,
    CrmRecord,
    OpportunityUpdate,
    RecordAccess,
    TargetKind,
    Updated,
)
from copilot.errors import CrmCallError
from copilot.tools.crm_client import CrmGateway
from copilot.vocabulary import REFERENCE_VOCABULARY, Vocabulary

# --- the reference CRM's tools ------------------------------------------------------------------

GET_ACCOUNT: Final = "get_account"
GET_OPPORTUNITY: Final = "get_opportunity"
GET_CONTACT: Final = "get_contact"
SEARCH_ACCOUNTS: Final = "search_accounts"
LIST_OPPORTUNITIES: Final = "list_opportunities"
LIST_ACTIVITIES: Final = "list_activities"
LIST_CONTACTS: Final = "list_contacts"
PIPELINE_SUMMARY: Final = "pipeline_summary"
GET_ME: Final = "get_me"
GET_RECORD_HISTORY: Final = "get_record_history"
"""Reads (the CRM must declare them ``readOnlyHint``): :class:`ReferenceReads` calls them for the
briefs, the digest and team analytics, and :func:`progress_line` describes them."""

UPSERT_ACTIVITY: Final = "upsert_activity"
UPDATE_OPPORTUNITY: Final = "update_opportunity"
VOID_ACTIVITY: Final = "void_activity"
"""Writes (called only by an approved write tool's executor, with the ``crm.write`` token)."""

WRITER_READS: Final = frozenset({GET_ACCOUNT, GET_OPPORTUNITY, GET_CONTACT})
WRITER_WRITES: Final = frozenset({UPSERT_ACTIVITY, UPDATE_OPPORTUNITY, VOID_ACTIVITY})
READ_TOOLS: Final = frozenset(
    {
        *WRITER_READS,
        SEARCH_ACCOUNTS,
        LIST_OPPORTUNITIES,
        LIST_ACTIVITIES,
        LIST_CONTACTS,
        PIPELINE_SUMMARY,
        GET_ME,
        GET_RECORD_HISTORY,
    }
)
"""Every reference read the copilot's own code calls by name."""

_READ_TOOL: dict[TargetKind, tuple[str, str]] = {
    "account": (GET_ACCOUNT, "account_id"),
    "opportunity": (GET_OPPORTUNITY, "opportunity_id"),
    "contact": (GET_CONTACT, "contact_id"),
}


PAGE: Final = 100
"""Records per page of a listing (the reference CRM's largest page)."""
MAX_PAGES: Final = 20


def _instant_text(moment: datetime) -> str:
    """A moment as the reference CRM's arguments take it (UTC, to the second)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expected_tools() -> tuple[frozenset[str], frozenset[str]]:
    """The MCP tools the copilot calls by name on the reference CRM: (reads, writes)."""
    return READ_TOOLS, WRITER_WRITES


def record_from(kind: TargetKind, payload: dict[str, Any]) -> CrmRecord:
    """A reference CRM record (its JSON, as its read tools return it) as a :class:`CrmRecord`."""
    access = payload.get("access") or {}
    return CrmRecord(
        kind=kind,
        id=str(payload.get("id", "")),
        name=str(payload.get("name", "")),
        version=int(payload["version"]) if payload.get("version") is not None else None,
        values={k: v for k, v in payload.items() if k != "access"},
        # The reference CRM says both; where it is silent, logging is allowed and editing is
        # not (its own defaults).
        access=RecordAccess(
            edit=bool(access.get("edit", False)), log_activity=bool(access.get("log_activity", True))
        ),
    )


class ReferenceWriter:
    """:class:`~copilot.crm.types.CrmWriter` over one of the run's MCP sessions."""

    def __init__(self, gateway: CrmGateway):
        self._crm = gateway

    async def read(self, kind: TargetKind, record_id: str) -> CrmRecord:
        """The record through the CRM's ``get_*`` tool."""
        tool, argument = _READ_TOOL[kind]
        return record_from(kind, await self._crm.call(tool, {argument: record_id}))

    async def create_activity(self, request: ActivityRequest) -> ActivityResult:
        """``upsert_activity`` with the key as ``external_id`` (the CRM creates it once)."""
        payload: dict[str, Any] = {
            "external_id": request.key,
            "type": request.type,
            "subject": request.subject,
            "notes": request.notes,
            "account_id": request.account_id,
            "opportunity_id": request.opportunity_id,
        }
        if request.occurred_at is not None:
            payload["occurred_at"] = request.occurred_at.isoformat()
        # Sent only when given, so an activity without them is the same call as before.
        if request.contact_ids:
            payload["contact_ids"] = list(request.contact_ids)
        if request.due is not None:
            payload["due_date"] = request.due.isoformat()
        result = await self._crm.call(UPSERT_ACTIVITY, payload)
        return ActivityResult(activity=result["activity"], created=bool(result["created"]))

    async def update_opportunity(self, request: OpportunityUpdate) -> Updated | Conflict:
        """``update_opportunity`` with the expected version and the key."""
        try:
            result = await self._crm.call(
                UPDATE_OPPORTUNITY,
                {
                    "opportunity_id": request.opportunity_id,
                    "expected_version": request.expected_version,
                    "changes": request.changes,
                    "idempotency_key": request.key,
                },
            )
        except CrmCallError as exc:
            if exc.crm_code == "conflict":
                current = exc.details.get("current")
                return Conflict(current=current if isinstance(current, dict) else None)
            raise
        return Updated(
            opportunity=result["opportunity"],
            previous=result.get("previous"),
            replayed=bool(result.get("replayed")),
        )

    async def void_activity(self, activity: ActivityRef, reason: str) -> dict[str, Any]:
        """``void_activity`` (voiding twice is harmless in the reference CRM)."""
        return await self._crm.call(VOID_ACTIVITY, {"activity_id": activity.id, "reason": reason})

    async def find_activity(self, key: str, activity_type: str) -> ActivityResult | None:
        """None: ``upsert_activity`` itself returns the stored activity for a known key."""
        return None

    async def find_update(self, key: str, opportunity_id: str) -> Updated | None:
        """None: ``update_opportunity`` itself replays a known key before comparing versions."""
        return None


def vocabulary_from_tools(tools: list[ToolDefinition]) -> Vocabulary:
    """The reference CRM's vocabulary, from what its tool list declares.

    Its ``upsert_activity`` schema enumerates the activity types. It declares no stages (its
    ``update_opportunity`` takes a free-form ``changes`` object), so those are the fallback.
    """
    by_name = {tool.name: tool for tool in tools}
    upsert = by_name.get(UPSERT_ACTIVITY)
    properties = (upsert.inputSchema.get("properties") or {}) if upsert is not None else {}
    declared = (properties.get("type") or {}).get("enum")
    if not isinstance(declared, list) or not declared or not all(isinstance(v, str) for v in declared):
        return REFERENCE_VOCABULARY
    return REFERENCE_VOCABULARY.model_copy(
        update={"activity_types": tuple(declared), "source": f"{UPSERT_ACTIVITY} input schema"}
    )


# --- the copilot's own reads (copilot.crm.reads.CrmReads) ---------------------------------------


class ReferenceReads:
    """:class:`~copilot.crm.reads.CrmReads` over the reference CRM's read tools, as the rep.

    Its tools already answer in the copilot's field names, so their records pass through as is.
    """

    def __init__(self, gateway: CrmGateway):
        self._crm = gateway

    async def _items(self, tool: str, arguments: dict[str, Any]) -> list[Record]:
        """Every item of a paged listing, following ``next_cursor`` (at most ``MAX_PAGES``)."""
        found: list[Record] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await self._crm.call(
                tool, {**arguments, "limit": PAGE, **({"cursor": cursor} if cursor else {})}
            )
            found += [item for item in page.get("items") or [] if isinstance(item, dict)]
            next_cursor = page.get("next_cursor")
            if not isinstance(next_cursor, str) or not next_cursor:
                break
            cursor = next_cursor
        return found

    async def me(self) -> Record:
        """``get_me``: the caller, their manager and direct reports."""
        return await self._crm.call(GET_ME, {})

    async def accounts(self) -> list[Record]:
        """``search_accounts`` with an empty query: every account the rep can see."""
        return await self._items(SEARCH_ACCOUNTS, {"query": ""})

    async def contacts(self, account_id: str) -> list[Record]:
        """``list_contacts`` of the account."""
        return await self._items(LIST_CONTACTS, {"account_id": account_id})

    async def account(self, account_id: str) -> Record:
        """``get_account``."""
        return await self._crm.call(GET_ACCOUNT, {"account_id": account_id})

    async def open_opportunities(self, *, account_id: str | None = None, mine: bool = False) -> list[Record]:
        """``list_opportunities`` with ``open_only`` (and ``owner: me`` for ``mine``)."""
        arguments: dict[str, Any] = {"open_only": True}
        if account_id is not None:
            arguments["account_id"] = account_id
        if mine:
            arguments["owner"] = "me"
        return await self._items(LIST_OPPORTUNITIES, arguments)

    async def closed_opportunities(
        self, *, since: datetime, account_id: str | None = None, mine: bool = False
    ) -> list[Record]:
        """``list_opportunities`` with ``closed_since`` (the CRM dates each close from its change
        history and returns it as ``closed_at``)."""
        arguments: dict[str, Any] = {"closed_since": _instant_text(since)}
        if account_id is not None:
            arguments["account_id"] = account_id
        if mine:
            arguments["owner"] = "me"
        return await self._items(LIST_OPPORTUNITIES, arguments)

    async def activities(
        self,
        *,
        account_id: str | None = None,
        opportunity_id: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
    ) -> list[Record]:
        """``list_activities`` (newest first, voided ones left out by the CRM itself)."""
        arguments: dict[str, Any] = {"limit": max(1, min(limit, PAGE))}
        if account_id is not None:
            arguments["account_id"] = account_id
        if opportunity_id is not None:
            arguments["opportunity_id"] = opportunity_id
        if since is not None:
            arguments["since"] = _instant_text(since)
        page = await self._crm.call(LIST_ACTIVITIES, arguments)
        return [item for item in page.get("items") or [] if isinstance(item, dict)]

    async def record(self, kind: TargetKind, record_id: str) -> Record:
        """The record through its ``get_*`` tool."""
        tool, argument = _READ_TOOL[kind]
        return await self._crm.call(tool, {argument: record_id})

    async def history(self, kind: TargetKind, record_id: str) -> list[Record]:
        """``get_record_history`` (the CRM keeps every version of an account or opportunity)."""
        if kind == "contact":
            raise CrmCallError("not_supported", "the CRM keeps no change history of contacts")
        page = await self._crm.call(GET_RECORD_HISTORY, {"record_type": kind, "record_id": record_id})
        return [
            {
                "record_id": record_id,
                "at": item.get("changed_at"),
                "by": item.get("changed_by") or {},
                "operation": item.get("operation") or "update",
                "changes": [c for c in item.get("changes") or [] if isinstance(c, dict)],
            }
            for item in page.get("items") or []
            if isinstance(item, dict)
        ]


def progress_line(name: str, args: Mapping[str, Any], names: Mapping[str, str]) -> str | None:
    """What the copilot is doing when the model calls the reference CRM's read tool ``name``
    (record names from this run's results where known); None for any other tool."""

    def named(record_id: Any) -> str | None:
        return names.get(str(record_id)) if record_id else None

    account = named(args.get("account_id"))
    owner = f"{account}'s" if account else "the"
    query = args.get("query")
    lines = {
        SEARCH_ACCOUNTS: f"Searching accounts for “{query}”…" if query else "Listing your accounts…",
        GET_ACCOUNT: f"Reading {account or 'the account'}…",
        LIST_OPPORTUNITIES: f"Looking up {owner} opportunities…"
        if args.get("account_id")
        else "Looking up your opportunities…",
        GET_OPPORTUNITY: f"Reading {named(args.get('opportunity_id')) or 'the opportunity'}…",
        LIST_ACTIVITIES: f"Looking up {owner} recent activities…",
        LIST_CONTACTS: f"Looking up {owner} contacts…",
        GET_CONTACT: "Looking up the contact…",
        PIPELINE_SUMMARY: "Summarising the pipeline…",
        GET_ME: "Looking you up in the CRM…",
        GET_RECORD_HISTORY: f"Reading the history of {named(args.get('record_id')) or 'the record'}…",
    }
    return lines.get(name)
