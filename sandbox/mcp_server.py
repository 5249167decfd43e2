"""The sandbox CRM's MCP server: model-friendly tools over :class:`sandbox.crm.CrmService`.

Every tool runs as the caller named by the bearer token (put on the request scope by
:mod:`sandbox.mcp_auth`), so the CRM's own permission model decides what comes back.
Results are compact JSON (each record with ``id`` and ``version``); refusals come
back as tool errors whose JSON carries a stable ``code``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib.metadata import version
from typing import Annotated, Any, Literal

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from sandbox.config import SandboxSettings
from sandbox.crm import CrmService
from sandbox.db import log_request
from sandbox.directory import User
from sandbox.errors import CrmError

CALLER_SCOPE_KEY = "sandbox.caller"

READ_TOOLS = (
    "search_accounts",
    "get_account",
    "list_opportunities",
    "get_opportunity",
    "list_activities",
    "list_contacts",
    "get_contact",
    "pipeline_summary",
    "get_me",
)
WRITE_TOOLS = ("upsert_activity", "update_opportunity", "void_activity")

Limit = Annotated[int, Field(ge=1, le=100, description="Maximum number of records to return (1-100).")]
Cursor = Annotated[
    str | None, Field(description="Opaque `next_cursor` from a previous page; omit for the first page.")
]
IsoDate = Annotated[str | None, Field(description="ISO date, e.g. 2026-12-31.")]

_READ = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
_WRITE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)


def record_ids(value: Any) -> list[str]:
    """Every record ``id`` in a result, in order of appearance, without repeats."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ident = node.get("id")
            if isinstance(ident, str) and ident not in found:
                found.append(ident)
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(value)
    return found


def _caller(ctx: Context[Any, Any, Any]) -> User:
    request = ctx.request_context.request
    caller = None if request is None else request.scope.get(CALLER_SCOPE_KEY)
    if not isinstance(caller, User):
        # The auth middleware runs before every request; reaching here means it was bypassed.
        raise RuntimeError("tool called without an authenticated caller")
    return caller


def build_mcp_server(settings: SandboxSettings, crm: CrmService) -> FastMCP[Any]:
    """The FastMCP server with the CRM's read and write tools."""
    mcp: FastMCP[Any] = FastMCP(
        name="sandbox-crm",
        instructions=(
            "A CRM (accounts, opportunities, activities, contacts) seen through the caller's own "
            "permissions. Cite record ids. Write tools are idempotent: upsert_activity by "
            "external_id, update_opportunity under expected_version (and an optional "
            "idempotency_key). get_account / get_opportunity report your effective access."
        ),
        stateless_http=True,
        json_response=True,
        streamable_http_path="/",
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "https://localhost:*"],
        ),
    )
    # The version the server reports (the SDK's own, as before). Left unset, the SDK looks
    # it up in the installed packages' metadata on every stateless request, a scan of
    # site-packages that cost more than the tool call itself.
    mcp._mcp_server.version = version("mcp")

    async def run(ctx: Context[Any, Any, Any], tool: str, call: Callable[[User], Any]) -> CallToolResult:
        caller = _caller(ctx)
        try:
            result = await anyio.to_thread.run_sync(lambda: call(caller))
        except CrmError as exc:
            await _log(caller, tool, record_ids(exc.details), exc.code)
            return CallToolResult(
                content=[TextContent(type="text", text=exc.to_json())],
                structuredContent=exc.to_payload(),
                isError=True,
            )
        await _log(caller, tool, record_ids(result), "ok")
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(result, default=str))],
            structuredContent=result,
        )

    async def _log(caller: User, tool: str, ids: list[str], outcome: str) -> None:
        await anyio.to_thread.run_sync(
            lambda: log_request(
                settings.db_path,
                tenant_id=caller.tenant_id,
                caller_id=caller.id,
                tool=tool,
                record_ids=ids,
                outcome=outcome,
            )
        )

    @mcp.tool(annotations=_READ)
    async def search_accounts(
        ctx: Context[Any, Any, Any],
        query: Annotated[
            str, Field(description="Words from the account name, industry or city; empty = all.")
        ] = "",
        limit: Limit = 20,
        cursor: Cursor = None,
    ) -> CallToolResult:
        """Find accounts you can see by name, industry or city. Returns id, name, owner, territory."""
        return await run(ctx, "search_accounts", lambda u: crm.search_accounts(u, query, limit, cursor))

    @mcp.tool(annotations=_READ)
    async def get_account(
        ctx: Context[Any, Any, Any],
        account_id: Annotated[str, Field(description="Account id, e.g. acc-acme.")],
    ) -> CallToolResult:
        """One account with owner, counts (open pipeline, recent activities, contacts) and your access."""
        return await run(ctx, "get_account", lambda u: crm.get_account(u, account_id))

    @mcp.tool(annotations=_READ)
    async def list_opportunities(
        ctx: Context[Any, Any, Any],
        account_id: Annotated[str | None, Field(description="Only this account's opportunities.")] = None,
        owner: Annotated[Literal["me", "any"], Field(description="'me' = only ones you own.")] = "any",
        stage: Annotated[str | None, Field(description="Only this stage, e.g. Negotiation.")] = None,
        closing_after: IsoDate = None,
        closing_before: IsoDate = None,
        open_only: Annotated[bool, Field(description="Exclude Closed Won / Closed Lost.")] = True,
        limit: Limit = 20,
        cursor: Cursor = None,
        closed_since: Annotated[
            str | None,
            Field(
                description="Only deals won or lost at or after this ISO date or datetime"
                " (each with its closed_at); open_only is then ignored."
            ),
        ] = None,
    ) -> CallToolResult:
        """Opportunities you can see, filtered by account, owner, stage and close-date window."""
        return await run(
            ctx,
            "list_opportunities",
            lambda u: crm.list_opportunities(
                u,
                account_id=account_id,
                owner=owner,
                stage=stage,
                closing_after=closing_after,
                closing_before=closing_before,
                open_only=open_only,
                limit=limit,
                cursor=cursor,
                closed_since=closed_since,
            ),
        )

    @mcp.tool(annotations=_READ)
    async def get_opportunity(
        ctx: Context[Any, Any, Any],
        opportunity_id: Annotated[str, Field(description="Opportunity id, e.g. opp-0001.")],
    ) -> CallToolResult:
        """One opportunity: stage, amount, close date, next step, owner, version and your access (edit?)."""
        return await run(ctx, "get_opportunity", lambda u: crm.get_opportunity(u, opportunity_id))

    @mcp.tool(annotations=_READ)
    async def list_activities(
        ctx: Context[Any, Any, Any],
        account_id: Annotated[str | None, Field(description="Activities regarding this account.")] = None,
        opportunity_id: Annotated[
            str | None, Field(description="Activities regarding this opportunity.")
        ] = None,
        since: Annotated[
            str | None, Field(description="Only activities on or after this ISO date/time.")
        ] = None,
        limit: Limit = 20,
        cursor: Cursor = None,
    ) -> CallToolResult:
        """Calls, meetings, emails and tasks you can see, newest first."""
        return await run(
            ctx,
            "list_activities",
            lambda u: crm.list_activities(
                u,
                account_id=account_id,
                opportunity_id=opportunity_id,
                since=since,
                limit=limit,
                cursor=cursor,
            ),
        )

    @mcp.tool(annotations=_READ)
    async def get_record_history(
        ctx: Context[Any, Any, Any],
        record_type: Annotated[Literal["opportunity", "account"], Field(description="The record's kind.")],
        record_id: Annotated[str, Field(description="The record's id, e.g. opp-0001.")],
        since: Annotated[
            str | None, Field(description="Only versions on or after this ISO date/time.")
        ] = None,
    ) -> CallToolResult:
        """A record's change history, oldest first: each version's time, who made it, and every
        changed field's old and new value."""
        return await run(
            ctx, "get_record_history", lambda u: crm.get_record_history(u, record_type, record_id, since)
        )

    @mcp.tool(annotations=_READ)
    async def list_contacts(
        ctx: Context[Any, Any, Any],
        account_id: Annotated[
            str | None, Field(description="The account whose contacts to list (or give a name).")
        ] = None,
        limit: Limit = 20,
        cursor: Cursor = None,
        name: Annotated[
            str | None,
            Field(
                description="Only contacts whose name contains this; without an account, across your accounts."
            ),
        ] = None,
    ) -> CallToolResult:
        """Contacts of an account, or the contacts named so across your accounts (name, title,
        email, phone, account)."""
        return await run(
            ctx, "list_contacts", lambda u: crm.list_contacts(u, account_id, limit, cursor, name)
        )

    @mcp.tool(annotations=_READ)
    async def get_contact(
        ctx: Context[Any, Any, Any],
        contact_id: Annotated[str, Field(description="Contact id, as list_contacts returns it.")],
    ) -> CallToolResult:
        """One contact (name, title, email, phone) and the account it belongs to."""
        return await run(ctx, "get_contact", lambda u: crm.get_contact(u, contact_id))

    @mcp.tool(annotations=_READ)
    async def pipeline_summary(
        ctx: Context[Any, Any, Any],
        scope: Annotated[
            Literal["mine", "team"], Field(description="'mine' or 'team' (your reports / your territory).")
        ] = "mine",
        period_start: IsoDate = None,
        period_end: IsoDate = None,
    ) -> CallToolResult:
        """Open pipeline by stage for a close-date period (default: this quarter), with the ids included."""
        return await run(
            ctx, "pipeline_summary", lambda u: crm.pipeline_summary(u, scope, period_start, period_end)
        )

    @mcp.tool(annotations=_READ)
    async def get_me(ctx: Context[Any, Any, Any]) -> CallToolResult:
        """You in the CRM: your user id, name, role, Entra object id, manager and direct reports."""
        return await run(ctx, "get_me", crm.get_me)

    @mcp.tool(annotations=_WRITE)
    async def upsert_activity(
        ctx: Context[Any, Any, Any],
        external_id: Annotated[str, Field(min_length=1, max_length=200, description="Idempotency key.")],
        type: Annotated[Literal["call", "meeting", "email", "task"], Field(description="Kind of activity.")],
        subject: Annotated[str, Field(min_length=1, max_length=200)],
        notes: Annotated[str, Field(max_length=4000)] = "",
        occurred_at: Annotated[str | None, Field(description="ISO date-time; default now.")] = None,
        account_id: str | None = None,
        opportunity_id: str | None = None,
        contact_ids: Annotated[
            list[str] | None,
            Field(max_length=20, description="Contacts taking part (ids, as list_contacts returns them)."),
        ] = None,
        due_date: Annotated[str | None, Field(description="A task's due date (ISO date).")] = None,
    ) -> CallToolResult:
        """Create an activity once per external_id; repeating the same call returns the stored record."""
        return await run(
            ctx,
            "upsert_activity",
            lambda u: crm.upsert_activity(
                u,
                external_id=external_id,
                type=type,
                subject=subject,
                notes=notes,
                occurred_at=occurred_at,
                account_id=account_id,
                opportunity_id=opportunity_id,
                contact_ids=contact_ids,
                due_date=due_date,
            ),
        )

    @mcp.tool(annotations=_WRITE)
    async def update_opportunity(
        ctx: Context[Any, Any, Any],
        opportunity_id: str,
        expected_version: Annotated[
            int, Field(ge=1, description="The version you read; mismatch = conflict.")
        ],
        changes: Annotated[
            dict[str, Any], Field(description="Fields to change: stage, close_date, amount, next_step.")
        ],
        idempotency_key: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description=(
                    "Client-chosen key; repeating a call with the same key returns the first "
                    "result instead of writing again"
                ),
            ),
        ] = None,
    ) -> CallToolResult:
        """Change an opportunity if still at expected_version; otherwise a conflict with current values."""
        return await run(
            ctx,
            "update_opportunity",
            lambda u: crm.update_opportunity(
                u, opportunity_id, expected_version, changes, idempotency_key=idempotency_key
            ),
        )

    @mcp.tool(annotations=_WRITE)
    async def void_activity(
        ctx: Context[Any, Any, Any],
        activity_id: str,
        reason: Annotated[str, Field(min_length=1, max_length=500)],
    ) -> CallToolResult:
        """Void an activity (the compensating action for undo); voiding twice is harmless."""
        return await run(ctx, "void_activity", lambda u: crm.void_activity(u, activity_id, reason))

    return mcp
