"""The reference connector: the sandbox CRM's own MCP tools, called by name.

This is the only module that knows the reference CRM's tool names. Its writes are the CRM's
own keyed, versioned tools: ``upsert_activity`` creates once per ``external_id``, and
``update_opportunity`` replays an ``idempotency_key`` it already applied before it compares
versions, so finding an earlier write by key is the write itself (``find_*`` answer None and
the write guard's recovery calls the write again with the same key).
"""

from __future__ import annotations

from typing import Any, Final

from mcp.types import Tool as ToolDefinition

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
from copilot.crm.vocabulary import REFERENCE_VOCABULARY, Vocabulary
from copilot.errors import CrmCallError
from copilot.tools.crm_client import CrmGateway

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
"""Reads (the CRM must declare them ``readOnlyHint``). The briefs, the digest, team analytics and
the progress lines call them by these names (the reference CRM's reads: a Dataverse reads
adapter for them is still to come)."""

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
    }
)
"""Every reference read the copilot's own code calls by name."""

_READ_TOOL: dict[TargetKind, tuple[str, str]] = {
    "account": (GET_ACCOUNT, "account_id"),
    "opportunity": (GET_OPPORTUNITY, "opportunity_id"),
    "contact": (GET_CONTACT, "contact_id"),
}


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
        # The reference CRM's activities have no parties or due dates: contact_ids and due are
        # not sent (its tool would refuse the unknown fields).
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
