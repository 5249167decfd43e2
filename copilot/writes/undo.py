"""``undo_write``: the compensating change for one executed write, found by its audit id.

A CRM write cannot be rolled back, but its audit row holds what was applied and what the
record held before (the CRM's ``previous`` values). The undo builds the reverse from that
and goes through the same approval and write guard as any write, audited as its own row
that names the original (``audit_log.undoes_audit_id``, unique: a write is undone once).

* ``update_opportunity`` → the previous values are written back under the version our
  write produced: a later change by anyone is the CRM's conflict (current values shown,
  nothing overwritten).
* ``log_activity`` → the activity is voided (canceled, through the CRM connector's writer).
* ``draft_followup_email`` → the draft is deleted from the rep's drafts if still unsent
  (Graph ``DELETE /me/messages/{id}``); a sent message is a clear refusal.

Who may undo: the rep who made the write, or whoever may open the thread it was made in
(its owner and explicit delegates, :func:`copilot.persistence.threads.authorize`). An undo
is never itself undone (no loops: ask for the change again instead), and only within
``Settings.undo_window_hours`` of the write. All of it is checked again at execution.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel

from copilot.crm import connector
from copilot.crm.types import ActivityRef, Conflict, CrmWriter, OpportunityUpdate
from copilot.errors import CrmCallError, MailboxUnavailable, ThreadAccessDenied, ThreadNotFound
from copilot.persistence import audit, threads
from copilot.tools.mcp_http import shared_transport
from copilot.tools.schemas import UndoWriteArgs, UpdateOpportunityArgs
from copilot.writes.crm import now_iso, read_safely, updated_data
from copilot.writes.registry import WriteTool, register, title
from copilot.writes.types import ProposalRecord, WriteOutcome, WritePlan

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from copilot.context import AgentContext

UNDO_TOOL = "undo_write"
UNDO_CUES: tuple[str, ...] = (
    "undo",
    "revert",
    "reverse",
    "put back",
    "put it back",
    "scratch",
    "roll back",
    "take back",
    "take it back",
)
"""Word stems of a rep asking to take a change back (the undo tool and the change history read)."""
UNDOABLE_TOOLS = frozenset({"update_opportunity", "log_activity", "draft_followup_email"})
"""The writes that have a compensating change (preferences are simply set again)."""

RESTORABLE_FIELDS = frozenset(UpdateOpportunityArgs.model_fields) - {"opportunity_id"}
"""What an undo of ``update_opportunity`` writes back: exactly the fields the tool writes."""

_NOT_FOUND = "There is no change of yours with that number; nothing was done."


def undoable(tool: str) -> bool:
    """Whether writes of ``tool`` can be undone (an undo itself cannot)."""
    return tool in UNDOABLE_TOOLS


def window(ctx: AgentContext) -> dt.timedelta:
    """How long after a write it may be undone."""
    return dt.timedelta(hours=ctx.settings.undo_window_hours)


@dataclass(frozen=True)
class Reverse:
    """The compensating change for one audited write."""

    original: audit.StoredAuditEntry
    kind: str
    """The original's tool."""
    record_id: str
    """The record the undo changes: the opportunity, the activity, the draft."""
    record_type: str
    name: str
    restore: dict[str, Any] = field(default_factory=dict)
    """``update_opportunity``: the values read before the write."""
    produced_version: int | None = None
    """``update_opportunity``: the version our write produced (the undo's expected version)."""
    activity_type: str | None = None
    """``log_activity``: the activity's type (a CRM with a table per type needs it to void it)."""


async def _reverse(ctx: AgentContext, audit_id: int) -> Reverse | WriteOutcome:
    """The reverse of write ``audit_id`` if this rep may undo it now; else the refusal."""
    async with ctx.pool.connection() as conn:
        stored = await audit.get_entry(conn, audit_id)
        if stored is None or not await _may_undo(conn, ctx, stored.entry):
            return WriteOutcome.refused("not_found", _NOT_FOUND)
        undone = await audit.undone_by(conn, audit_id)
    entry = stored.entry
    if entry.tool == UNDO_TOOL:
        return WriteOutcome.refused(
            "not_undoable",
            "An undo cannot itself be undone; ask for the change again instead. Nothing was done.",
        )
    if undone is not None:
        return WriteOutcome.refused("already_undone", "That change was already undone; nothing was done.")
    if not undoable(entry.tool):
        return WriteOutcome.refused(
            "not_undoable", f"{title(entry.tool)} cannot be undone; ask for the change again instead."
        )
    if ctx.clock() - entry.executed_at > window(ctx):
        hours = ctx.settings.undo_window_hours
        return WriteOutcome.refused(
            "undo_window_passed",
            f"That change is older than the undo window ({hours:g} hours); nothing was done.",
        )
    result = entry.crm_response
    if entry.tool == "update_opportunity":
        opportunity = result.get("opportunity") or {}
        previous = result.get("previous") or {}
        if not isinstance(previous, dict) or not previous or not opportunity.get("version"):
            return WriteOutcome.refused(
                "not_undoable", "The audit does not hold the values before that change."
            )
        return Reverse(
            stored,
            entry.tool,
            str(opportunity.get("id") or entry.target_record_id),
            "opportunity",
            str(opportunity.get("name") or ""),
            # The fields the rep's write set; values the CRM derives (closing a deal sets
            # its probability) are not the rep's to write back.
            restore={k: v for k, v in previous.items() if k in RESTORABLE_FIELDS},
            produced_version=int(opportunity["version"]),
        )
    if entry.tool == "log_activity":
        activity = result.get("activity") or {}
        kind = activity.get("type")
        return Reverse(
            stored,
            entry.tool,
            str(activity.get("id")),
            "activity",
            str(activity.get("subject") or ""),
            activity_type=str(kind) if kind else None,
        )
    draft = result.get("draft") or {}
    return Reverse(stored, entry.tool, str(draft.get("id")), "draft", str(draft.get("subject") or ""))


async def _may_undo(conn: Any, ctx: AgentContext, entry: audit.AuditEntry) -> bool:
    me = ctx.identity
    if entry.tenant_id != me.tenant_id:
        return False
    if entry.rep_aad_id == me.aad_object_id:
        return True
    try:
        # Someone else's write: only if they may open the thread it was made in (its
        # owner, or a delegate the owner named).
        await threads.authorize(
            conn, thread_id=entry.thread_id, tenant_id=me.tenant_id, aad_id=me.aad_object_id, now=ctx.clock()
        )
    except (ThreadAccessDenied, ThreadNotFound):
        return False
    return True


def _refusal_record(ctx: AgentContext, args: dict[str, Any], refusal: WriteOutcome) -> ProposalRecord:
    return {
        "tool": UNDO_TOOL,
        "proposed": dict(args),
        "taken_at": now_iso(ctx.clock),
        "target": {"type": "write", "id": None, "name": "The change you named"},
        "version": None,
        "current": {},
        "error": {"code": refusal.code or "refused", "message": refusal.message},
    }


async def _snapshot(ctx: AgentContext, store: BaseStore | None, args: dict[str, Any]) -> ProposalRecord:
    try:
        audit_id = UndoWriteArgs.model_validate(args).audit_id
    except ValueError:
        return _refusal_record(ctx, args, WriteOutcome.refused("validation", "no change was named"))
    reverse = await _reverse(ctx, audit_id)
    if isinstance(reverse, WriteOutcome):
        return _refusal_record(ctx, args, reverse)
    record: ProposalRecord = {
        "tool": UNDO_TOOL,
        "proposed": dict(args),
        "taken_at": now_iso(ctx.clock),
        "target": {"type": reverse.record_type, "id": reverse.record_id, "name": reverse.name},
        "version": None,
        "current": {},
        "error": None,
    }
    if reverse.kind == "update_opportunity":
        read, error = await read_safely(connector.writer(ctx, write=False), "opportunity", reverse.record_id)
        record["error"] = error
        record["restored"] = dict(reverse.restore)
        record["summary"] = "Put back the values this opportunity had before your change."
        if read is not None:
            opp = read.values
            record["version"] = read.version
            record["current"] = {k: opp.get(k) for k in (*reverse.restore, "currency") if k in opp}
            if read.version != reverse.produced_version:
                record["error"] = {
                    "code": "conflict",
                    "message": "the opportunity changed after your change; approving will not overwrite it",
                }
    elif reverse.kind == "log_activity":
        record["summary"] = f"Void the activity “{reverse.name}” (it stays in the history, marked void)."
    else:
        record["summary"] = f"Delete the unsent draft “{reverse.name}” from your Outlook drafts."
    return record


async def _check(
    ctx: AgentContext, plan: WritePlan, snapshot: ProposalRecord | None
) -> WritePlan | WriteOutcome:
    args = plan.args
    assert isinstance(args, UndoWriteArgs)
    shown = (snapshot or {}).get("proposed") or {}
    if shown.get("audit_id") != args.audit_id:
        # The card showed the reverse of one change: an edit naming another is not what
        # the rep reviewed (a CLI edit can name any field).
        return WriteOutcome.refused(
            "validation", "The change to undo cannot be edited; ask to undo the other change instead."
        )
    # Everything again, at execution: the rep's right to undo, the window, undone already.
    reverse = await _reverse(ctx, args.audit_id)
    if isinstance(reverse, WriteOutcome):
        return reverse
    target: dict[str, Any] = {
        "id": reverse.record_id,
        "kind": reverse.kind,
        "restore": reverse.restore,
        "activity_type": reverse.activity_type,
    }
    if reverse.kind == "update_opportunity":
        try:
            opp = await connector.writer(ctx, write=True).read("opportunity", reverse.record_id)
        except CrmCallError as exc:
            return WriteOutcome.refused(exc.crm_code, f"nothing was written: {exc.message}")
        if opp.access.edit is False:
            return WriteOutcome.refused(
                "permission_denied", f"you cannot edit opportunity {reverse.record_id}; nothing was written"
            )
    # No version comparison here: the CRM compares the version our write produced (after
    # replaying a keyed request it already applied), so an undo interrupted after the CRM
    # committed is completed, and a change by anyone since is the CRM's conflict.
    return WritePlan(
        tool=plan.tool,
        key=plan.key,
        args=args,
        expected_version=reverse.produced_version,
        target=target,
        undoes_audit_id=args.audit_id,
    )


async def _execute(ctx: AgentContext, store: BaseStore | None, plan: WritePlan) -> WriteOutcome:
    kind = plan.target["kind"]
    record_id = str(plan.target["id"])
    undoes = {"undoes_audit_id": plan.undoes_audit_id}
    if kind == "update_opportunity":
        return await _restore(connector.writer(ctx, write=True), plan, record_id, undoes)
    if kind == "log_activity":
        try:
            voided = await connector.writer(ctx, write=True).void_activity(
                ActivityRef(id=record_id, type=plan.target.get("activity_type")),
                f"Undone by its rep (audit record {plan.undoes_audit_id})",
            )
        except CrmCallError as exc:
            return WriteOutcome.refused(exc.crm_code, f"nothing was written: {exc.message}")
        return WriteOutcome.done({"activity": voided, **undoes})
    return await _delete_draft(ctx, record_id, undoes)


async def _restore(crm: CrmWriter, plan: WritePlan, record_id: str, undoes: dict[str, Any]) -> WriteOutcome:
    try:
        result = await crm.update_opportunity(
            OpportunityUpdate(
                key=plan.key,
                opportunity_id=record_id,
                expected_version=plan.expected_version if plan.expected_version is not None else 0,
                changes=plan.target["restore"],
            )
        )
    except CrmCallError as exc:
        return WriteOutcome.refused(exc.crm_code, f"nothing was written: {exc.message}")
    if isinstance(result, Conflict):
        return WriteOutcome.conflict(
            "The opportunity changed after your change, so it was not undone; nothing was written.",
            result.current,
        )
    return WriteOutcome.done({**updated_data(result), **undoes})


async def _delete_draft(ctx: AgentContext, draft_id: str, undoes: dict[str, Any]) -> WriteOutcome:
    token = await ctx.tokens.graph_token()
    try:
        async with httpx.AsyncClient(
            timeout=ctx.settings.crm_timeout_seconds, transport=shared_transport()
        ) as client:
            response = await client.delete(
                f"{ctx.settings.graph_base_url}/me/messages/{draft_id}",
                headers={"Authorization": f"Bearer {token}"},
            )
    except httpx.HTTPError as exc:
        raise MailboxUnavailable(f"the mailbox is unavailable ({type(exc).__name__})") from exc
    if response.status_code >= 500 or response.status_code == 429:
        raise MailboxUnavailable(f"the mailbox answered HTTP {response.status_code}")
    if response.status_code == 404:
        return WriteOutcome.refused("not_found", "The draft is no longer in your drafts; nothing was done.")
    if response.status_code == 409:
        return WriteOutcome.refused(
            "already_sent", "That email was already sent, so it cannot be undone; nothing was deleted."
        )
    if response.status_code not in (200, 204):
        return WriteOutcome.failed(
            "mailbox", f"the mailbox refused to delete the draft ({response.status_code})"
        )
    return WriteOutcome.done({"draft": {"id": draft_id, "deleted": True}, **undoes})


def _target(args: BaseModel) -> str | None:
    return None  # the record is the original write's: named in the plan (``target["id"]``)


UNDO_WRITE = register(
    WriteTool(
        name=UNDO_TOOL,
        cues=UNDO_CUES,
        title="Undo a change",
        description=(
            "Undo one of the rep's executed changes by its audit id (see recent_writes): put back "
            "an opportunity's previous values, void a logged activity, or delete an unsent draft. "
            "Needs the rep's approval."
        ),
        args_schema=UndoWriteArgs,
        # Mostly the CRM; a draft's undo reaches the mailbox with the rep's Graph token.
        backend="crm",
        target_type="write",
        target_id=_target,
        editable=(),
        header_fields=frozenset({"audit_id"}),
        snapshot=_snapshot,
        check=_check,
        execute=_execute,
    )
)
