"""The copilot's write tools: typed, approval-gated, executed only through the write guard.

Each tool runs only inside :class:`copilot.middleware.write_guard.WriteGuardMiddleware`,
which validated the (possibly edited) arguments, re-checked permission and the record
version, claimed the idempotency key and put a :class:`WritePlan` in
``current_write``. A tool called any other way refuses to act.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import httpx
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.runtime import Runtime, get_runtime
from pydantic import BaseModel

from copilot.context import AgentContext
from copilot.errors import CopilotError, CrmUnavailable
from copilot.tools.crm_client import CrmCallError
from copilot.tools.preferences import apply_update, compose_email, load_preferences, save_preferences
from copilot.tools.schemas import (
    WRITE_TOOL_SCHEMAS,
    DraftFollowupEmailArgs,
    LogActivityArgs,
    NoArgs,
    UpdateOpportunityArgs,
    UpdatePreferencesArgs,
)


@dataclass(frozen=True)
class WritePlan:
    """What the write guard decided for one approved call."""

    tool: str
    key: str
    """Idempotency key (``thread_id:tool_call_id``), passed to the CRM as the external id."""
    args: BaseModel
    expected_version: int | None = None
    target: dict[str, Any] = field(default_factory=dict)


current_write: ContextVar[WritePlan | None] = ContextVar("current_write", default=None)


class WriteOutsideGuard(CopilotError):
    """A write tool was invoked without the write guard's plan: refuse, write nothing."""

    code = "write_outside_guard"


def _plan(tool: str) -> WritePlan:
    plan = current_write.get()
    if plan is None or plan.tool != tool:
        raise WriteOutsideGuard(f"{tool} can only run through the approval write guard")
    return plan


def _runtime() -> Runtime[AgentContext]:
    # Tools read the run context (rep, tokens, sessions) and store from the graph runtime;
    # none of it is a tool argument, so the model can neither see nor forge it.
    runtime: Runtime[AgentContext] = get_runtime(AgentContext)
    return runtime


def _result(payload: dict[str, Any]) -> str:
    return json.dumps(payload, default=str)


def _refused(exc: CrmCallError) -> str:
    return _result({"status": "error", "code": exc.crm_code, "message": exc.message})


async def _log_activity(**_: Any) -> str:
    runtime = _runtime()
    plan = _plan("log_activity")
    args = plan.args
    assert isinstance(args, LogActivityArgs)
    writer = await runtime.context.crm_writer()
    payload: dict[str, Any] = {
        "external_id": plan.key,
        "type": args.type,
        "subject": args.subject,
        "notes": args.notes,
        "account_id": args.account_id,
        "opportunity_id": args.opportunity_id,
    }
    if args.occurred_at is not None:
        payload["occurred_at"] = args.occurred_at.isoformat()
    try:
        result = await writer.call("upsert_activity", payload)
    except CrmCallError as exc:
        return _refused(exc)
    return _result({"status": "done", "activity": result["activity"], "created": result["created"]})


async def _update_opportunity(**_: Any) -> str:
    runtime = _runtime()
    plan = _plan("update_opportunity")
    args = plan.args
    assert isinstance(args, UpdateOpportunityArgs)
    writer = await runtime.context.crm_writer()
    try:
        result = await writer.call(
            "update_opportunity",
            {
                "opportunity_id": args.opportunity_id,
                "expected_version": plan.expected_version,
                "changes": args.changes(),
                "idempotency_key": plan.key,
            },
        )
    except CrmCallError as exc:
        if exc.crm_code == "conflict":
            return _result(
                {
                    "status": "conflict",
                    "message": "The opportunity changed after you reviewed it; nothing was written.",
                    "current": exc.details.get("current"),
                }
            )
        return _refused(exc)
    return _result(
        {
            "status": "done",
            "opportunity": result["opportunity"],
            "previous": result.get("previous"),
            # The CRM had already applied this key (an attempt interrupted after its commit).
            "recovered": bool(result.get("replayed")),
        }
    )


async def _draft_followup_email(**_: Any) -> str:
    runtime = _runtime()
    plan = _plan("draft_followup_email")
    args = plan.args
    assert isinstance(args, DraftFollowupEmailArgs)
    ctx = runtime.context
    contact = plan.target
    address = contact.get("email")
    if not address:
        return _result(
            {"status": "error", "code": "validation", "message": "the contact has no email address"}
        )
    prefs = await load_preferences(runtime.store, ctx.identity) if runtime.store is not None else None
    from copilot.tools.preferences import Preferences

    body = compose_email(
        args.body,
        contact_name=str(contact.get("name", "")),
        rep_name=ctx.identity.name,
        prefs=prefs or Preferences(),
    )
    message = {
        "subject": args.subject,
        "body": {"contentType": "text", "content": body},
        "toRecipients": [{"emailAddress": {"address": address, "name": contact.get("name", "")}}],
    }
    token = await ctx.tokens.graph_token()
    try:
        async with httpx.AsyncClient(timeout=ctx.settings.crm_timeout_seconds) as client:
            response = await client.post(
                f"{ctx.settings.graph_base_url}/me/messages",
                json=message,
                headers={"Authorization": f"Bearer {token}", "Idempotency-Key": plan.key},
            )
    except httpx.HTTPError as exc:
        raise CrmUnavailable(f"the mailbox is unavailable ({type(exc).__name__})") from exc
    if response.status_code >= 500 or response.status_code == 429:
        raise CrmUnavailable(f"the mailbox answered HTTP {response.status_code}")
    if response.status_code not in (200, 201):
        return _result(
            {
                "status": "error",
                "code": "mailbox",
                "message": f"the mailbox refused the draft ({response.status_code})",
            }
        )
    draft = response.json()
    # The recipient's address stays out of the result: the model never needs it.
    return _result(
        {
            "status": "done",
            "draft": {
                "id": draft.get("id"),
                "subject": draft.get("subject"),
                "isDraft": draft.get("isDraft"),
            },
        }
    )


async def _update_preferences(**_: Any) -> str:
    runtime = _runtime()
    plan = _plan("update_preferences")
    args = plan.args
    assert isinstance(args, UpdatePreferencesArgs)
    if runtime.store is None:
        return _result(
            {"status": "error", "code": "unavailable", "message": "preferences storage is not configured"}
        )
    current = await load_preferences(runtime.store, runtime.context.identity)
    updated = apply_update(current, args)
    await save_preferences(runtime.store, runtime.context.identity, updated)
    return _result({"status": "done", "preferences": updated.model_dump()})


async def _get_preferences(**_: Any) -> str:
    runtime = _runtime()
    if runtime.store is None:
        return _result({"preferences": None})
    prefs = await load_preferences(runtime.store, runtime.context.identity)
    return _result({"preferences": prefs.model_dump()})


_IMPLEMENTATIONS = {
    "log_activity": (
        _log_activity,
        "Log a call, meeting, email or task on an account or opportunity. Needs the rep's approval.",
    ),
    "update_opportunity": (
        _update_opportunity,
        "Change an opportunity's stage, close date, amount or next step. Needs the rep's approval.",
    ),
    "draft_followup_email": (
        _draft_followup_email,
        "Save a follow-up email to a contact (by contact id) in the rep's Outlook drafts. Never sends. Needs approval.",
    ),
    "update_preferences": (
        _update_preferences,
        "Change or reset the rep's email tone, signature or follow-up cadence, when the rep asks. Needs approval.",
    ),
}


def write_tools() -> list[BaseTool]:
    """The approval-gated write tools, one per schema in ``WRITE_TOOL_SCHEMAS``."""
    return [
        StructuredTool.from_function(
            coroutine=_IMPLEMENTATIONS[name][0],
            name=name,
            description=_IMPLEMENTATIONS[name][1],
            args_schema=schema,
        )
        for name, schema in WRITE_TOOL_SCHEMAS.items()
    ]


def local_read_tools() -> list[BaseTool]:
    """Read tools the copilot implements itself."""
    return [
        StructuredTool.from_function(
            coroutine=_get_preferences,
            name="get_preferences",
            description="Show the rep's drafting preferences (email tone, signature, follow-up cadence).",
            args_schema=NoArgs,
        )
    ]
