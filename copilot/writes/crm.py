"""Write tools whose backend is the CRM: log an activity, update an opportunity."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from copilot.clock import Clock
from copilot.crm import connector
from copilot.crm.types import (
    ActivityRequest,
    Conflict,
    CrmRecord,
    CrmWriter,
    OpportunityUpdate,
    TargetKind,
    Updated,
)
from copilot.errors import CrmCallError, CrmUnavailable
from copilot.tools.schemas import LogActivityArgs, UpdateOpportunityArgs, vocabulary_schemas
from copilot.vocabulary import Vocabulary, install_vocabulary
from copilot.writes.registry import WriteTool, register, reschema
from copilot.writes.types import ProposalRecord, WriteOutcome, WritePlan

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from copilot.context import AgentContext

OPPORTUNITY_FIELDS = ("name", "stage", "close_date", "amount", "currency", "next_step", "probability")


def now_iso(clock: Clock) -> str:
    """Snapshot time on the service's clock, ISO 8601 UTC to the second."""
    return clock().astimezone(dt.UTC).isoformat(timespec="seconds")


async def read_safely(
    crm: CrmWriter, kind: TargetKind, record_id: str
) -> tuple[CrmRecord | None, dict[str, str] | None]:
    """A CRM read for a snapshot: the record, or the reason it could not be read."""
    try:
        return await crm.read(kind, record_id), None
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
    reader = connector.writer(ctx, write=False)
    kind: TargetKind
    if args.get("opportunity_id"):
        kind, ident = "opportunity", str(args["opportunity_id"])
        target, error = await read_safely(reader, kind, ident)
    else:
        kind = "account"
        target, error = await read_safely(reader, kind, str(args.get("account_id", "")))
        ident = str(args.get("account_id"))
    record["target"] = {"type": kind, "id": ident, "name": target.name if target is not None else ""}
    record["version"] = None if target is None else target.version
    record["current"] = {}
    record["error"] = error
    contacts = [str(c) for c in args.get("contact_ids") or []]
    if contacts:
        # The people it names, by name for the card; one the rep cannot read is named by id
        # here and refused at the check (nothing is written).
        names: dict[str, str] = {}
        for contact_id in contacts:
            found, _ = await read_safely(reader, "contact", contact_id)
            names[contact_id] = found.name if found is not None else ""
        record["contacts"] = names
    return record


async def _readable_contacts(writer: CrmWriter, contact_ids: list[str]) -> list[CrmRecord] | WriteOutcome:
    """Every contact the activity names, read as the rep; a refusal names the contact."""
    found: list[CrmRecord] = []
    for contact_id in contact_ids:
        try:
            found.append(await writer.read("contact", contact_id))
        except CrmCallError as exc:
            # Not found and not readable read the same to the rep: the CRM decides which it says.
            return WriteOutcome.refused(
                exc.crm_code,
                f"the activity cannot name contact {contact_id} ({exc.message}); nothing was written",
            )
    return found


async def _check_activity(
    ctx: AgentContext, plan: WritePlan, snapshot: ProposalRecord | None
) -> WritePlan | WriteOutcome:
    args = plan.args
    assert isinstance(args, LogActivityArgs)
    writer = connector.writer(ctx, write=True)
    targets: list[CrmRecord] = []
    try:
        # Every record the activity will be attached to, as the rep may have edited either.
        if args.opportunity_id:
            targets.append(await writer.read("opportunity", args.opportunity_id))
        if args.account_id:
            targets.append(await writer.read("account", args.account_id))
    except CrmCallError as exc:
        return _refused(exc)
    contacts = await _readable_contacts(writer, args.contact_ids)
    if isinstance(contacts, WriteOutcome):
        return contacts
    for record in targets:
        # False = the CRM says no; None = it does not say (it decides at the write).
        if record.access.log_activity is False:
            return WriteOutcome.refused(
                "permission_denied", f"you cannot log activities on {record.id}; nothing was written"
            )
    return WritePlan(tool=plan.tool, key=plan.key, args=args, target=dict(targets[0].values))


async def _log_activity(ctx: AgentContext, store: BaseStore | None, plan: WritePlan) -> WriteOutcome:
    args = plan.args
    assert isinstance(args, LogActivityArgs)
    request = ActivityRequest(
        key=plan.key,
        type=args.type,
        subject=args.subject,
        notes=args.notes,
        occurred_at=args.occurred_at,
        account_id=args.account_id,
        opportunity_id=args.opportunity_id,
        contact_ids=tuple(args.contact_ids),
        due=args.due_date,
    )
    try:
        # Exactly once by key: a repeat of the key returns the activity the CRM stored.
        result = await connector.writer(ctx, write=True).create_activity(request)
    except CrmCallError as exc:
        return WriteOutcome.refused(exc.crm_code, exc.message)
    return WriteOutcome.done({"activity": result.activity, "created": result.created})


def _activity_target(args: BaseModel) -> str | None:
    assert isinstance(args, LogActivityArgs)
    return args.opportunity_id or args.account_id


LOG_ACTIVITY = register(
    WriteTool(
        name="log_activity",
        cues=(
            "log",
            "call",
            "meeting",
            "met ",
            "spoke",
            "talked",
            "note",
            "visit",
            "demo",
            "record",
            "capture",
            "remind",
        ),
        title="Log an activity",
        description=(
            "Log a call, meeting, email or task on an account or opportunity, naming the contacts who took"
            " part; a task (a reminder, a follow-up) has a due date. Needs the rep's approval."
        ),
        args_schema=LogActivityArgs,
        backend="crm",
        target_type="account",
        target_id=_activity_target,
        editable=("type", "subject", "notes", "account_id", "opportunity_id", "contact_ids", "due_date"),
        multiline=frozenset({"notes"}),
        snapshot=_snapshot_activity,
        check=_check_activity,
        execute=_log_activity,
    )
)


# --- update_opportunity ---------------------------------------------------------------------------


async def _snapshot_opportunity(
    ctx: AgentContext, store: BaseStore | None, args: dict[str, Any]
) -> ProposalRecord:
    opp, error = await read_safely(
        connector.writer(ctx, write=False), "opportunity", str(args.get("opportunity_id", ""))
    )
    return {
        "tool": "update_opportunity",
        "proposed": dict(args),
        "taken_at": now_iso(ctx.clock),
        "target": {
            "type": "opportunity",
            "id": str(args.get("opportunity_id")),
            "name": opp.name if opp is not None else "",
        },
        "version": None if opp is None else opp.version,
        "current": {k: opp.values.get(k) for k in OPPORTUNITY_FIELDS} if opp else {},
        "error": error,
    }


async def _check_opportunity(
    ctx: AgentContext, plan: WritePlan, snapshot: ProposalRecord | None
) -> WritePlan | WriteOutcome:
    args = plan.args
    assert isinstance(args, UpdateOpportunityArgs)
    try:
        target = await connector.writer(ctx, write=True).read("opportunity", args.opportunity_id)
    except CrmCallError as exc:
        return _refused(exc)
    if target.access.edit is False:
        return WriteOutcome.refused(
            "permission_denied", f"you cannot edit opportunity {target.id}; nothing was written"
        )
    snapshot_target: dict[str, Any] = dict(snapshot.get("target") or {}) if snapshot else {}
    same_target = snapshot_target.get("id") == args.opportunity_id
    reviewed = snapshot.get("version") if same_target and snapshot is not None else None
    # No blind overwrite (invariant 4): write only over the version the rep saw. No reviewed
    # version (the snapshot failed, or the edit points at another record) is a conflict
    # too: the agent proposes again, showing the record's current values.
    if reviewed is None or target.version is None or int(reviewed) != target.version:
        return WriteOutcome.conflict(
            "The opportunity changed (or was not shown) before your approval; nothing was written.",
            target.values,
        )
    return WritePlan(
        tool=plan.tool, key=plan.key, args=args, expected_version=target.version, target=dict(target.values)
    )


def updated_data(result: Updated) -> dict[str, Any]:
    """What an applied opportunity update reports: the record and the values it replaced."""
    return {"opportunity": result.opportunity, "previous": result.previous}


async def _update_opportunity(ctx: AgentContext, store: BaseStore | None, plan: WritePlan) -> WriteOutcome:
    args = plan.args
    assert isinstance(args, UpdateOpportunityArgs)
    writer = connector.writer(ctx, write=True)
    changes = args.changes()
    request = OpportunityUpdate(
        key=plan.key,
        opportunity_id=args.opportunity_id,
        expected_version=plan.expected_version if plan.expected_version is not None else 0,
        changes=changes,
        # The values read at the approved version, for a CRM that does not report them.
        previous={k: plan.target[k] for k in changes if k in plan.target} or None,
    )
    try:
        result: Updated | Conflict | None = None
        if plan.recovering:
            # An earlier attempt may have applied it: asked by key before any version check.
            result = await writer.find_update(plan.key, args.opportunity_id)
        if result is None:
            result = await writer.update_opportunity(request)
    except CrmCallError as exc:
        return WriteOutcome.refused(exc.crm_code, exc.message)
    if isinstance(result, Conflict):
        return WriteOutcome.conflict(
            "The opportunity changed after you reviewed it; nothing was written.", result.current
        )
    # "recovered": the CRM had already applied this key (an attempt interrupted after its commit).
    return WriteOutcome.done({**updated_data(result), "recovered": result.replayed})


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
        tool=plan.tool,
        key=plan.key,
        args=args,
        expected_version=expected,
        target={"id": args.opportunity_id},
        recovering=True,
    )


def _opportunity_target(args: BaseModel) -> str | None:
    assert isinstance(args, UpdateOpportunityArgs)
    return args.opportunity_id


UPDATE_OPPORTUNITY = register(
    WriteTool(
        name="update_opportunity",
        cues=(
            "update",
            "move",
            "change",
            "set ",
            "push",
            "slip",
            "bump",
            "delay",
            "postpone",
            "pull in",
            "mark",
            "close it",
        ),
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
        recover=_recover_opportunity,
    )
)


# --- the CRM's vocabulary -------------------------------------------------------------------------


def apply_vocabulary(vocabulary: Vocabulary, crm: str | None = None) -> None:
    """Keep the CRM's vocabulary for the process and build the CRM write tools from it: their
    schemas (the activity types and stages the model may propose, the card lists and the write
    guard checks) and ``update_opportunity``'s editable fields."""
    install_vocabulary(vocabulary, crm)
    log_schema, update_schema = vocabulary_schemas(vocabulary)
    types = ", ".join(vocabulary.activity_types)
    reschema(
        LOG_ACTIVITY.name,
        log_schema,
        description=LOG_ACTIVITY.description
        if log_schema is LogActivityArgs
        else (
            f"Log an activity ({types}) on an account or opportunity, naming the contacts who took part;"
            " a task has a due date. Needs the rep's approval."
        ),
    )
    reschema(
        UPDATE_OPPORTUNITY.name,
        update_schema,
        editable=tuple(f for f in UPDATE_OPPORTUNITY.editable if f in vocabulary.opportunity_fields),
    )
