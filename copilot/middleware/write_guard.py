"""The write guard: the only way an approved write reaches the CRM, mailbox or store.

Runs inside the human-in-the-loop middleware, so it sees a write tool call only after
the rep approved (or edited) it. Before anything is written it

1. refuses a call whose tool name differs from what the model proposed;
2. re-validates the final (possibly edited) arguments against the tool's schema;
3. claims the idempotency key ``thread_id:tool_call_id`` (a repeat returns the stored
   result: double clicks, concurrent resumes, retries after a crash);
4. re-reads the (possibly different) target record as the rep: permission to edit,
   and for opportunity updates the version against the one the rep reviewed;
5. records the key as *in flight* (durably, with that version), runs the registry
   entry's executor with the :class:`WritePlan` it validated (handed over explicitly, as
   the tool the approved call runs), then appends the audit row in the same transaction
   that marks the key done. The typed :class:`WriteOutcome` is the tool message's
   artifact; its JSON is what the model reads.

A key found in flight is an earlier attempt that may have reached the backend (the
process died, or the backend timed out): it is finished under its recorded plan, the
backend being asked by key before any version check, so a write the CRM applied is
always completed and audited, never reported as a conflict.

If the backend is unavailable it raises :class:`CrmUnavailable` or
:class:`MailboxUnavailable`, which aborts the run with the approval still pending (to
be finished by key when it is approved again).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.types import Command
from pydantic import ValidationError

from copilot.context import AgentContext
from copilot.decisions import validation_problems
from copilot.errors import CrmUnavailable, IdempotencyMismatch, MailboxUnavailable
from copilot.persistence import audit, idempotency
from copilot.tracing import current_trace, trace_event
from copilot.writes import ProposalRecord, WriteOutcome, WritePlan, WriteTool, write_tool

Handler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]


def _original_call(request: ToolCallRequest) -> dict[str, Any] | None:
    """The model's call this request executes; None unless exactly one call has its id.

    Ids are re-keyed by the copilot on every model response, so two calls sharing one
    id (which would let a rep approve one and get the other) mean state was tampered
    with or written by something else: refuse rather than guess which one was shown.
    """
    call_id = request.tool_call["id"]
    found = [
        dict(call)
        for message in request.state.get("messages", [])
        if isinstance(message, AIMessage)
        for call in message.tool_calls
        if call["id"] == call_id
    ]
    return found[0] if len(found) == 1 else None


def _message(request: ToolCallRequest, outcome: WriteOutcome) -> ToolMessage:
    return ToolMessage(
        content=json.dumps(outcome.to_json(), default=str),
        artifact=outcome.model_dump(mode="json"),
        name=request.tool_call["name"],
        tool_call_id=request.tool_call["id"],
        status="error" if outcome.is_error else "success",
    )


def _journal(plan: WritePlan) -> dict[str, Any]:
    """What an interrupted attempt needs to be finished: the version it was approved over."""
    return {"tool": plan.tool, "expected_version": plan.expected_version, "target_id": plan.target.get("id")}


def field_diff(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The fields an edit changed: ``{field: {"from": proposed, "to": approved}}``."""
    before = before or {}
    return {
        name: {"from": before.get(name), "to": after.get(name)}
        for name in sorted(set(before) | set(after))
        if before.get(name) != after.get(name)
    }


def _traced(call_id: str, name: str, outcome: WriteOutcome) -> WriteOutcome:
    """Record a conflict in the trace (the rep's approval met a changed record)."""
    if outcome.status == "conflict":
        trace_event("conflict", tool=name, tool_call_id=call_id, outcome=outcome.to_json())
    return outcome


def _unavailable(entry: WriteTool) -> Exception:
    if entry.backend == "mailbox":
        return MailboxUnavailable(f"{entry.name} could not reach the mailbox; the approval is kept")
    return CrmUnavailable(f"{entry.name} could not reach the CRM; the approval is kept")


class WriteGuardMiddleware(AgentMiddleware[Any, AgentContext, Any]):
    """Validation, permission, version, idempotency and audit around every write tool."""

    def __init__(self, after_commit_hook: Callable[[str], None] | None = None):
        super().__init__()
        # Tests use the hook to simulate a crash after the backend committed.
        self._after_commit_hook = after_commit_hook

    async def awrap_tool_call(self, request: ToolCallRequest, handler: Handler) -> ToolMessage | Command[Any]:
        name = request.tool_call["name"]
        entry = write_tool(name)
        if entry is None:
            return await handler(request)
        original = _original_call(request)
        if original is None or original["name"] != name:
            return _message(
                request,
                WriteOutcome.refused(
                    "validation",
                    "the tool of a proposal cannot be changed (or the proposal is ambiguous); nothing was written",
                ),
            )
        try:
            args = entry.args_schema.model_validate(request.tool_call["args"])
        except ValidationError as exc:
            return _message(
                request,
                WriteOutcome.refused(
                    "validation", f"invalid values, nothing was written: {validation_problems(exc)}"
                ),
            )
        ctx = request.runtime.context
        assert isinstance(ctx, AgentContext)
        call_id = str(request.tool_call["id"])
        key = idempotency.idempotency_key(ctx.thread_id, call_id)
        final_args = args.model_dump(mode="json", exclude_none=True)
        original_args = dict(original["args"])
        try:
            proposed = entry.args_schema.model_validate(original_args).model_dump(
                mode="json", exclude_none=True
            )
        except ValidationError:
            proposed = None  # the model's own call was invalid; the rep's edit fixed it
        edited = final_args != proposed
        snapshot: ProposalRecord | None = (request.state.get("proposals") or {}).get(call_id)
        try:
            async with idempotency.claim(
                ctx.pool,
                key=key,
                tenant_id=ctx.owner.tenant_id,
                rep_aad_id=ctx.owner.aad_object_id,
                thread_id=ctx.thread_id,
                tool_call_id=call_id,
                tool=name,
                args_hash=idempotency.args_hash(final_args),
            ) as claim:
                if claim.stored_result is not None:
                    stored = WriteOutcome.from_stored(claim.stored_result)
                    return _message(request, stored.model_copy(update={"replayed": True}))
                if edited:
                    trace_event(
                        "edit", tool=name, tool_call_id=call_id, diff=field_diff(proposed, final_args)
                    )
                draft = WritePlan(tool=name, key=key, args=args)
                planned: WritePlan | WriteOutcome | None = None
                if claim.in_flight_plan is not None and entry.recover is not None:
                    # An earlier attempt may have reached the backend (crash, kill, outage):
                    # finish it under the plan it was approved with. The backend is asked by
                    # key before any version check, so our own applied write is completed
                    # and audited, never mistaken for someone else's change.
                    planned = entry.recover(draft, claim.in_flight_plan)
                if planned is None:
                    planned = await entry.check(ctx, draft, snapshot)
                if isinstance(planned, WriteOutcome):
                    await claim.complete(_traced(call_id, name, planned).model_dump(mode="json"))
                    return _message(request, planned)
                await claim.begin(_journal(planned))
                result = await handler(
                    request.override(tool=entry.planned_tool(ctx, request.runtime.store, planned))
                )
                if not isinstance(result, ToolMessage):
                    return result
                if result.artifact is None:
                    # The backend stayed unavailable through the retries. Abort the run instead
                    # of answering the tool call: the key stays in flight and the approval
                    # pending, to be finished (asking the backend by key) on the next approval.
                    raise _unavailable(entry)
                outcome = _traced(call_id, name, WriteOutcome.model_validate(result.artifact))
                if self._after_commit_hook is not None:
                    self._after_commit_hook(key)
                audit_entry: audit.AuditEntry | None = None
                if outcome.status == "done":
                    # Said in the outcome, so the rep's card and the model's answer show what
                    # was written, fields only the edit set included.
                    outcome = outcome.model_copy(update={"applied": final_args})
                    now = ctx.clock()
                    # The tool run that just executed this call, as LangSmith received it.
                    trace = current_trace()
                    proposed_at = dt.datetime.fromisoformat(snapshot["taken_at"]) if snapshot else None
                    audit_entry = audit.AuditEntry(
                        # Whose write it is (the thread's owner), and who decided it.
                        tenant_id=ctx.owner.tenant_id,
                        rep_aad_id=ctx.owner.aad_object_id,
                        approver_aad_id=ctx.identity.aad_object_id,
                        thread_id=ctx.thread_id,
                        tool_call_id=call_id,
                        tool=name,
                        # A tool whose arguments do not name the record (an undo names
                        # an audit id) says which record it changed in its plan.
                        target_record_id=entry.target_id(args) or planned.target.get("id"),
                        record_version_read=planned.expected_version
                        if planned.expected_version is not None
                        else (snapshot or {}).get("version"),
                        original_args=original_args,
                        edited_args=final_args if edited else None,
                        decision="edit" if edited else "approve",
                        crm_response=outcome.to_json(),
                        proposed_at=proposed_at,
                        decided_at=now,
                        executed_at=now,
                        trace_url=trace.url_for_tool_call(call_id) if trace is not None else None,
                        undoes_audit_id=planned.undoes_audit_id,
                    )
                stored_json = await claim.complete(outcome.model_dump(mode="json"), audit_entry)
                return _message(request, WriteOutcome.model_validate(stored_json))
        except IdempotencyMismatch as exc:
            return _message(request, WriteOutcome.refused("idempotency_mismatch", exc.message))
