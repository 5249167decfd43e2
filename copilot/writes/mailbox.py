"""Write tools whose backend is the rep's mailbox: save a follow-up email as a draft.

There is no send tool anywhere: a draft is saved to the rep's Outlook drafts through
Microsoft Graph and never sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel

from copilot.crm import connector
from copilot.errors import CrmCallError, MailboxUnavailable
from copilot.tools.mcp_http import shared_transport
from copilot.tools.preferences import Preferences, compose_email, load_preferences
from copilot.tools.schemas import DraftFollowupEmailArgs
from copilot.writes.crm import now_iso, read_safely
from copilot.writes.registry import WriteTool, register
from copilot.writes.types import ProposalRecord, WriteOutcome, WritePlan

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from copilot.context import AgentContext


async def _snapshot(ctx: AgentContext, store: BaseStore | None, args: dict[str, Any]) -> ProposalRecord:
    read, error = await read_safely(
        connector.writer(ctx, write=False), "contact", str(args.get("contact_id", ""))
    )
    contact = read.values if read is not None else None
    name = read.name if read is not None else ""
    record: ProposalRecord = {
        "tool": "draft_followup_email",
        "proposed": dict(args),
        "taken_at": now_iso(ctx.clock),
        "target": {"type": "contact", "id": str(args.get("contact_id")), "name": name},
        "version": None,
        "current": {"title": (contact or {}).get("title")} if contact else {},
        "error": error,
    }
    if store is not None and contact is not None:
        prefs = await load_preferences(store, ctx.identity)
        record["preview"] = compose_email(
            str(args.get("body", "")), contact_name=name, rep_name=ctx.identity.name, prefs=prefs
        )
    return record


async def _check(
    ctx: AgentContext, plan: WritePlan, snapshot: ProposalRecord | None
) -> WritePlan | WriteOutcome:
    args = plan.args
    assert isinstance(args, DraftFollowupEmailArgs)
    # The contact (and its address, which the model never sees) is re-read as the rep,
    # with the turn's read session: a draft needs no CRM write access.
    try:
        contact = await connector.writer(ctx, write=False).read("contact", args.contact_id)
    except CrmCallError as exc:
        return WriteOutcome.refused(exc.crm_code, f"nothing was written: {exc.message}")
    return WritePlan(tool=plan.tool, key=plan.key, args=args, target=dict(contact.values))


async def _save_draft(ctx: AgentContext, store: BaseStore | None, plan: WritePlan) -> WriteOutcome:
    args = plan.args
    assert isinstance(args, DraftFollowupEmailArgs)
    contact = plan.target
    address = contact.get("email")
    if not address:
        return WriteOutcome.refused("validation", "the contact has no email address")
    prefs = await load_preferences(store, ctx.identity) if store is not None else Preferences()
    body = compose_email(
        args.body, contact_name=str(contact.get("name", "")), rep_name=ctx.identity.name, prefs=prefs
    )
    message = {
        "subject": args.subject,
        "body": {"contentType": "text", "content": body},
        "toRecipients": [{"emailAddress": {"address": address, "name": contact.get("name", "")}}],
    }
    token = await ctx.tokens.graph_token()
    try:
        # The process's shared connection pool and TLS context; the rep's token goes on
        # this request only.
        async with httpx.AsyncClient(
            timeout=ctx.settings.crm_timeout_seconds, transport=shared_transport()
        ) as client:
            response = await client.post(
                f"{ctx.settings.graph_base_url}/me/messages",
                json=message,
                headers={"Authorization": f"Bearer {token}", "Idempotency-Key": plan.key},
            )
    except httpx.HTTPError as exc:
        raise MailboxUnavailable(f"the mailbox is unavailable ({type(exc).__name__})") from exc
    if response.status_code >= 500 or response.status_code == 429:
        raise MailboxUnavailable(f"the mailbox answered HTTP {response.status_code}")
    if response.status_code not in (200, 201):
        return WriteOutcome.failed("mailbox", f"the mailbox refused the draft ({response.status_code})")
    draft = response.json()
    # The recipient's address stays out of the result: the model never needs it.
    return WriteOutcome.done(
        {"draft": {"id": draft.get("id"), "subject": draft.get("subject"), "isDraft": draft.get("isDraft")}}
    )


def _target(args: BaseModel) -> str | None:
    assert isinstance(args, DraftFollowupEmailArgs)
    return args.contact_id


DRAFT_FOLLOWUP_EMAIL = register(
    WriteTool(
        name="draft_followup_email",
        cues=("draft", "email", "e-mail", "follow", "write", "reply", "thank"),
        title="Save a follow-up email to your Outlook drafts",
        description=(
            "Save a follow-up email to a contact (by contact id) in the rep's Outlook drafts. "
            "Never sends. Needs approval."
        ),
        args_schema=DraftFollowupEmailArgs,
        backend="mailbox",
        target_type="contact",
        target_id=_target,
        editable=("subject", "body"),
        header_fields=frozenset({"contact_id"}),
        multiline=frozenset({"body"}),
        shows_draft=True,
        snapshot=_snapshot,
        check=_check,
        execute=_save_draft,
    )
)
