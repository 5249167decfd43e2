"""The write guard: the only way an approved write reaches the CRM, mailbox or store.

Runs inside the human-in-the-loop middleware, so it sees a write tool call only after
the rep approved (or edited) it. Before anything is written it

1. refuses a call whose tool name differs from what the model proposed;
2. re-validates the final (possibly edited) arguments against the tool's schema;
3. claims the idempotency key ``thread_id:tool_call_id`` (a repeat returns the stored
   result: double clicks, concurrent resumes, retries after a crash);
4. re-reads the (possibly different) target record as the rep: permission to edit,
   and for opportunity updates the version against the one the rep reviewed;
5. records the key as *in flight* (durably, with that version), runs the tool with a
   :class:`WritePlan` (the key goes to the backend as external id / idempotency key),
   then appends the audit row in the same transaction that marks the key done.

A key found in flight is an earlier attempt that may have reached the backend (the
process died, or the backend timed out): it is finished under its recorded plan, the
backend being asked by key before any version check, so a write the CRM applied is
always completed and audited, never reported as a conflict.

If the backend is unavailable it raises :class:`CrmUnavailable`, which aborts the run
with the approval still pending (to be finished by key when it is approved again).
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
from pydantic import BaseModel, ValidationError

from copilot.context import AgentContext
from copilot.decisions import validation_problems
from copilot.errors import CrmUnavailable, IdempotencyMismatch
from copilot.persistence import audit, idempotency
from copilot.proposals import ProposalRecord
from copilot.tools.crm_client import CrmCallError
from copilot.tools.schemas import WRITE_TOOL_SCHEMAS
from copilot.tools.write_tools import WritePlan, current_write

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


def _message(request: ToolCallRequest, payload: dict[str, Any], *, error: bool = False) -> ToolMessage:
    return ToolMessage(
        content=json.dumps(payload, default=str),
        name=request.tool_call["name"],
        tool_call_id=request.tool_call["id"],
        status="error" if error else "success",
    )


def _journal(plan: WritePlan) -> dict[str, Any]:
    """What an interrupted attempt needs to be finished: the version it was approved over."""
    return {"tool": plan.tool, "expected_version": plan.expected_version, "target_id": plan.target.get("id")}


def _target_id(tool: str, args: BaseModel) -> str | None:
    data = args.model_dump()
    if tool == "update_opportunity":
        return str(data["opportunity_id"])
    if tool == "log_activity":
        return data.get("opportunity_id") or data.get("account_id")
    if tool == "draft_followup_email":
        return str(data["contact_id"])
    return None


class WriteGuardMiddleware(AgentMiddleware[Any, AgentContext, Any]):
    """Validation, permission, version, idempotency and audit around every write tool."""

    def __init__(self, after_commit_hook: Callable[[str], None] | None = None):
        super().__init__()
        # Tests use the hook to simulate a crash after the CRM committed.
        self._after_commit_hook = after_commit_hook

    async def awrap_tool_call(self, request: ToolCallRequest, handler: Handler) -> ToolMessage | Command[Any]:
        name = request.tool_call["name"]
        schema = WRITE_TOOL_SCHEMAS.get(name)
        if schema is None:
            return await handler(request)
        original = _original_call(request)
        if original is None or original["name"] != name:
            return _message(
                request,
                {
                    "status": "error",
                    "code": "validation",
                    "message": "the tool of a proposal cannot be changed (or the proposal is ambiguous); "
                    "nothing was written",
                },
                error=True,
            )
        try:
            args = schema.model_validate(request.tool_call["args"])
        except ValidationError as exc:
            return _message(
                request,
                {
                    "status": "error",
                    "code": "validation",
                    "message": f"invalid values, nothing was written: {validation_problems(exc)}",
                },
                error=True,
            )
        ctx = request.runtime.context
        assert isinstance(ctx, AgentContext)
        call_id = str(request.tool_call["id"])
        key = idempotency.idempotency_key(ctx.thread_id, call_id)
        final_args = args.model_dump(mode="json", exclude_none=True)
        original_args = dict(original["args"])
        try:
            proposed = schema.model_validate(original_args).model_dump(mode="json", exclude_none=True)
        except ValidationError:
            proposed = None  # the model's own call was invalid; the rep's edit fixed it
        edited = final_args != proposed
        snapshot: ProposalRecord | None = (request.state.get("proposals") or {}).get(call_id)
        try:
            async with idempotency.claim(
                ctx.pool,
                key=key,
                tenant_id=ctx.identity.tenant_id,
                rep_aad_id=ctx.identity.aad_object_id,
                thread_id=ctx.thread_id,
                tool_call_id=call_id,
                tool=name,
                args_hash=idempotency.args_hash(final_args),
            ) as claim:
                if claim.stored_result is not None:
                    return _message(request, {**claim.stored_result, "replayed": True})
                if claim.in_flight_plan is not None:
                    # An earlier attempt may have reached the backend (crash, kill, outage):
                    # finish it under the plan it was approved with. The backend is asked by
                    # key before any version check, so our own applied write is completed
                    # and audited, never mistaken for someone else's change.
                    plan_or_refusal = await self._recovery_plan(ctx, name, key, args, claim.in_flight_plan)
                else:
                    plan_or_refusal = await self._plan(ctx, name, key, args, snapshot)
                if isinstance(plan_or_refusal, dict):
                    await claim.complete(plan_or_refusal)
                    return _message(request, plan_or_refusal, error=plan_or_refusal.get("status") == "error")
                await claim.begin(_journal(plan_or_refusal))
                token = current_write.set(plan_or_refusal)
                try:
                    outcome = await handler(request)
                finally:
                    current_write.reset(token)
                if not isinstance(outcome, ToolMessage):
                    return outcome
                if outcome.status == "error":
                    # The backend stayed unavailable through the retries. Abort the run instead
                    # of answering the tool call: the key stays in flight and the approval
                    # pending, to be finished (asking the backend by key) on the next approval.
                    raise CrmUnavailable(f"{name} could not reach the CRM; the approval is kept")
                result = json.loads(str(outcome.content))
                if self._after_commit_hook is not None:
                    self._after_commit_hook(key)
                entry: audit.AuditEntry | None = None
                if result.get("status") == "done":
                    now = dt.datetime.now(dt.UTC)
                    proposed_at = dt.datetime.fromisoformat(snapshot["taken_at"]) if snapshot else None
                    entry = audit.AuditEntry(
                        tenant_id=ctx.identity.tenant_id,
                        rep_aad_id=ctx.identity.aad_object_id,
                        thread_id=ctx.thread_id,
                        tool_call_id=call_id,
                        tool=name,
                        target_record_id=_target_id(name, args),
                        record_version_read=plan_or_refusal.expected_version
                        if plan_or_refusal.expected_version is not None
                        else (snapshot or {}).get("version"),
                        original_args=original_args,
                        edited_args=final_args if edited else None,
                        decision="edit" if edited else "approve",
                        crm_response=result,
                        proposed_at=proposed_at,
                        decided_at=now,
                        executed_at=now,
                    )
                stored = await claim.complete(result, entry)
                return _message(request, stored, error=stored.get("status") == "error")
        except IdempotencyMismatch as exc:
            return _message(
                request,
                {"status": "error", "code": "idempotency_mismatch", "message": exc.message},
                error=True,
            )

    async def _recovery_plan(
        self, ctx: AgentContext, tool: str, key: str, args: BaseModel, journal: dict[str, Any]
    ) -> WritePlan | dict[str, Any]:
        """The plan of an interrupted attempt, to finish it by key.

        Opportunity updates keep the version they were approved over and skip our own
        re-read: the CRM replays an update it already applied (by idempotency key) before
        it compares versions, and a real change by someone else is still its conflict.
        The other writes are idempotent by key at their backend, so their plan is made
        again as usual (permission re-checked, contact re-read).
        """
        if tool == "update_opportunity":
            expected = journal.get("expected_version")
            if isinstance(expected, int):
                data = args.model_dump()
                return WritePlan(
                    tool=tool,
                    key=key,
                    args=args,
                    expected_version=expected,
                    target={"id": data["opportunity_id"]},
                )
        return await self._plan(ctx, tool, key, args, None)

    async def _plan(
        self, ctx: AgentContext, tool: str, key: str, args: BaseModel, snapshot: ProposalRecord | None
    ) -> WritePlan | dict[str, Any]:
        """Re-check the target as the rep; a dict is a final refusal/conflict (nothing written)."""
        if tool == "update_preferences":
            return WritePlan(tool=tool, key=key, args=args)
        writer = await ctx.crm_writer()
        data = args.model_dump()
        try:
            if tool == "log_activity":
                # Every record the activity will be attached to, as the rep may have edited either.
                targets = []
                if data.get("opportunity_id"):
                    targets.append(
                        await writer.call("get_opportunity", {"opportunity_id": data["opportunity_id"]})
                    )
                if data.get("account_id"):
                    targets.append(await writer.call("get_account", {"account_id": data["account_id"]}))
                for record in targets:
                    if not (record.get("access") or {}).get("log_activity", True):
                        return {
                            "status": "error",
                            "code": "permission_denied",
                            "message": f"you cannot log activities on {record.get('id')}; nothing was written",
                        }
                return WritePlan(tool=tool, key=key, args=args, target=targets[0])
            if tool == "update_opportunity":
                target = await writer.call("get_opportunity", {"opportunity_id": data["opportunity_id"]})
            else:
                target = await writer.call("get_contact", {"contact_id": data["contact_id"]})
        except CrmCallError as exc:
            return {"status": "error", "code": exc.crm_code, "message": f"nothing was written: {exc.message}"}
        if tool == "update_opportunity":
            access = target.get("access") or {}
            if not access.get("edit", False):
                return {
                    "status": "error",
                    "code": "permission_denied",
                    "message": f"you cannot edit opportunity {target.get('id')}; nothing was written",
                }
            snapshot_target: dict[str, Any] = dict(snapshot.get("target") or {}) if snapshot else {}
            same_target = snapshot_target.get("id") == data["opportunity_id"]
            reviewed = snapshot.get("version") if same_target and snapshot is not None else None
            # Invariant 4: write only over the version the rep saw. No reviewed version (the
            # snapshot failed, or the edit points at another record) counts as a conflict too:
            # the agent proposes again, showing the record's current values.
            if reviewed is None or int(reviewed) != int(target["version"]):
                return {
                    "status": "conflict",
                    "message": "The opportunity changed (or was not shown) before your approval; nothing was written.",
                    "current": {k: v for k, v in target.items() if k != "access"},
                }
            return WritePlan(
                tool=tool, key=key, args=args, expected_version=int(target["version"]), target=target
            )
        return WritePlan(tool=tool, key=key, args=args, target=target)
