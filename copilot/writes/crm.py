"""Write tools whose backend is the CRM: log an activity, update an opportunity."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from copilot.clock import Clock
from copilot.errors import CrmUnavailable
from copilot.tools.crm_client import CrmCallError, CrmGateway
from copilot.tools.schemas import LogActivityArgs, UpdateOpportunityArgs
from copilot.writes import crm_tools
from copilot.writes.registry import WriteTool, register
from copilot.writes.types import ProposalRecord, WriteOutcome, WritePlan

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from copilot.context import AgentContext

OPPORTUNITY_FIELDS = ("name", "stage", "close_date", "amount", "currency", "next_step", "probability")


def now_iso(clock: Clock) -> str:
    """Snapshot time on the service's clock, ISO 8601 UTC to the second."""
    return clock().astimezone(dt.UTC).isoformat(timespec="seconds")


async def read_safely(
    crm: CrmGateway, tool: str, args: dict[str, Any]
) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    """A CRM read for a snapshot: the record, or the reason it could not be read."""
    try:
        return await crm.call(tool, args), None
    except CrmCallError as exc:
        return None, {"code": exc.crm_code, "message": exc.message}
    except CrmUnavailable as exc:
        return None, {"code": "unavailable", "message": exc.message}


def _refused(exc: CrmCallError) -> WriteOutcome:
    return WriteOutcome.refused(exc.crm_code, f"nothing was written: {exc.message}")


# --- log_activity ---------------------------------------------------------------------------------


async def _snapshot_activity(
    ctx: AgentContext, store: BaseStore | None, args: dict[str, Any]
) -> ProposalRecord:
    record: ProposalRecord = {"tool": "log_activity", "proposed": dict(args), "taken_at": now_iso(ctx.clock)}
    if args.get("opportunity_id"):
        target, error = await read_safely(
            ctx.crm, crm_tools.GET_OPPORTUNITY, {"opportunity_id": str(args["opportunity_id"])}
        )
        kind, ident = "opportunity", str(args["opportunity_id"])
    else:
        target, error = await read_safely(
            ctx.crm, crm_tools.GET_ACCOUNT, {"account_id": str(args.get("account_id", ""))}
        )
        kind, ident = "account", str(args.get("account_id"))
    record["target"] = {"type": kind, "id": ident, "name": (target or {}).get("name", "")}
    record["version"] = None if target is None else int(target["version"])
    record["current"] = {}
    record["error"] = error
    return record


async def _check_activity(
    ctx: AgentContext, plan: WritePlan, snapshot: ProposalRecord | None
) -> WritePlan | WriteOutcome:
    args = plan.args
    assert isinstance(args, LogActivityArgs)
    writer = ctx.crm_write
    targets = []
    try:
        # Every record the activity will be attached to, as the rep may have edited either.
        if args.opportunity_id:
            targets.append(
                await writer.call(crm_tools.GET_OPPORTUNITY, {"opportunity_id": args.opportunity_id})
            )
        if args.account_id:
            targets.append(await writer.call(crm_tools.GET_ACCOUNT, {"account_id": args.account_id}))
    except CrmCallError as exc:
        return _refused(exc)
    for record in targets:
        if not (record.get("access") or {}).get("log_activity", True):
            return WriteOutcome.refused(
                "permission_denied", f"you cannot log activities on {record.get('id')}; nothing was written"
            )
    return WritePlan(tool=plan.tool, key=plan.key, args=args, target=targets[0])


async def _log_activity(ctx: AgentContext, store: BaseStore | None, plan: WritePlan) -> WriteOutcome:
    args = plan.args
    assert isinstance(args, LogActivityArgs)
    writer = ctx.crm_write
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
        result = await writer.call(crm_tools.UPSERT_ACTIVITY, payload)
    except CrmCallError as exc:
        return WriteOutcome.refused(exc.crm_code, exc.message)
    return WriteOutcome.done({"activity": result["activity"], "created": result["created"]})


def _activity_target(args: BaseModel) -> str | None:
    assert isinstance(args, LogActivityArgs)
    return args.opportunity_id or args.account_id


LOG_ACTIVITY = register(
    WriteTool(
        name="log_activity",
        title="Log an activity",
        description="Log a call, meeting, email or task on an account or opportunity. Needs the rep's approval.",
        args_schema=LogActivityArgs,
        backend="crm",
        target_type="account",
        target_id=_activity_target,
        editable=("type", "subject", "notes", "account_id", "opportunity_id"),
        multiline=frozenset({"notes"}),
        snapshot=_snapshot_activity,
        check=_check_activity,
        crm_reads=(crm_tools.GET_OPPORTUNITY, crm_tools.GET_ACCOUNT),
        crm_writes=(crm_tools.UPSERT_ACTIVITY,),
        execute=_log_activity,
    )
)


# --- update_opportunity ---------------------------------------------------------------------------


async def _snapshot_opportunity(
    ctx: AgentContext, store: BaseStore | None, args: dict[str, Any]
) -> ProposalRecord:
    opp, error = await read_safely(
        ctx.crm, crm_tools.GET_OPPORTUNITY, {"opportunity_id": str(args.get("opportunity_id", ""))}
    )
    return {
        "tool": "update_opportunity",
        "proposed": dict(args),
        "taken_at": now_iso(ctx.clock),
        "target": {
            "type": "opportunity",
            "id": str(args.get("opportunity_id")),
            "name": (opp or {}).get("name", ""),
        },
        "version": None if opp is None else int(opp["version"]),
        "current": {k: opp.get(k) for k in OPPORTUNITY_FIELDS} if opp else {},
        "error": error,
    }


async def _check_opportunity(
    ctx: AgentContext, plan: WritePlan, snapshot: ProposalRecord | None
) -> WritePlan | WriteOutcome:
    args = plan.args
    assert isinstance(args, UpdateOpportunityArgs)
    writer = ctx.crm_write
    try:
        target = await writer.call(crm_tools.GET_OPPORTUNITY, {"opportunity_id": args.opportunity_id})
    except CrmCallError as exc:
        return _refused(exc)
    if not (target.get("access") or {}).get("edit", False):
        return WriteOutcome.refused(
            "permission_denied", f"you cannot edit opportunity {target.get('id')}; nothing was written"
        )
    snapshot_target: dict[str, Any] = dict(snapshot.get("target") or {}) if snapshot else {}
    same_target = snapshot_target.get("id") == args.opportunity_id
    reviewed = snapshot.get("version") if same_target and snapshot is not None else None
    # No blind overwrite (invariant 4): write only over the version the rep saw. No reviewed
    # version (the snapshot failed, or the edit points at another record) is a conflict
    # too: the agent proposes again, showing the record's current values.
    if reviewed is None or int(reviewed) != int(target["version"]):
        return WriteOutcome.conflict(
            "The opportunity changed (or was not shown) before your approval; nothing was written.",
            {k: v for k, v in target.items() if k != "access"},
        )
    return WritePlan(
        tool=plan.tool, key=plan.key, args=args, expected_version=int(target["version"]), target=target
    )


async def _update_opportunity(ctx: AgentContext, store: BaseStore | None, plan: WritePlan) -> WriteOutcome:
    args = plan.args
    assert isinstance(args, UpdateOpportunityArgs)
    writer = ctx.crm_write
    try:
        result = await writer.call(
            crm_tools.UPDATE_OPPORTUNITY,
            {
                "opportunity_id": args.opportunity_id,
                "expected_version": plan.expected_version,
                "changes": args.changes(),
                "idempotency_key": plan.key,
            },
        )
    except CrmCallError as exc:
        if exc.crm_code == "conflict":
            return WriteOutcome.conflict(
                "The opportunity changed after you reviewed it; nothing was written.",
                exc.details.get("current"),
            )
        return WriteOutcome.refused(exc.crm_code, exc.message)
    return WriteOutcome.done(
        {
            "opportunity": result["opportunity"],
            "previous": result.get("previous"),
            # The CRM had already applied this key (an attempt interrupted after its commit).
            "recovered": bool(result.get("replayed")),
        }
    )


def _recover_opportunity(plan: WritePlan, journal: dict[str, Any]) -> WritePlan | None:
    # Keep the version the update was approved over and skip our own re-read: the CRM
    # replays an update it already applied (by idempotency key) before it compares
    # versions, and a real change by someone else is still its conflict.
    expected = journal.get("expected_version")
    if not isinstance(expected, int):
        return None
    args = plan.args
    assert isinstance(args, UpdateOpportunityArgs)
    return WritePlan(
        tool=plan.tool, key=plan.key, args=args, expected_version=expected, target={"id": args.opportunity_id}
    )


def _opportunity_target(args: BaseModel) -> str | None:
    assert isinstance(args, UpdateOpportunityArgs)
    return args.opportunity_id


UPDATE_OPPORTUNITY = register(
    WriteTool(
        name="update_opportunity",
        title="Update an opportunity",
        description="Change an opportunity's stage, close date, amount or next step. Needs the rep's approval.",
        args_schema=UpdateOpportunityArgs,
        backend="crm",
        target_type="opportunity",
        target_id=_opportunity_target,
        editable=("stage", "close_date", "amount", "next_step"),
        header_fields=frozenset({"opportunity_id"}),
        changes_record=True,
        snapshot=_snapshot_opportunity,
        check=_check_opportunity,
        execute=_update_opportunity,
        crm_reads=(crm_tools.GET_OPPORTUNITY,),
        crm_writes=(crm_tools.UPDATE_OPPORTUNITY,),
        recover=_recover_opportunity,
    )
)
