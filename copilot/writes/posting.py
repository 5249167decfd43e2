"""Write tool whose backend is the rep's posting settings: meeting prep briefs and the daily
digest turned on or off, or moved ("brief on", "send my digest at 8am", "stop the briefs").

Like every change it is proposed on an approval card and made only once the rep approves. The
settings are kept by the Teams bot with the chat the posts go to (:mod:`copilot.posting`):
where no chat is known for the rep (no bot behind the service, or never seen in a 1:1 chat),
the call is answered with where to say it (:data:`~copilot.writes.types.UNRESOLVED`), so
nothing is proposed that could not be done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from copilot.posting import NO_CHAT, PostingChange, PostingUnreachable, Preferences, describe, parse_clock
from copilot.tools.schemas import ChangeBriefsAndDigestArgs
from copilot.writes.crm import now_iso
from copilot.writes.registry import WriteTool, register
from copilot.writes.types import UNRESOLVED, ProposalRecord, Target, WriteOutcome, WritePlan

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from copilot.context import AgentContext

POSTING_CUES: tuple[str, ...] = ("brief", "digest")
"""Word stems of a rep speaking of their meeting prep briefs or daily digest."""
TARGET: Target = {"type": "settings", "id": None, "name": "Your briefs and digest"}


def _current(prefs: Preferences) -> dict[str, Any]:
    """The settings under the tool's argument names (as the card shows current → proposed)."""
    return {
        "briefs": prefs.enabled,
        "lead_minutes": prefs.lead_minutes,
        "digest": prefs.digest_enabled,
        "digest_time": f"{prefs.digest_time:%H:%M}",
    }


async def _snapshot(ctx: AgentContext, store: BaseStore | None, args: dict[str, Any]) -> ProposalRecord:
    record: ProposalRecord = {
        "tool": "change_briefs_and_digest",
        "proposed": dict(args),
        "taken_at": now_iso(ctx.clock),
        "target": Target(**TARGET),
        "version": None,
        "current": {},
        "error": None,
    }
    try:
        ChangeBriefsAndDigestArgs.model_validate(args)
    except ValidationError as exc:
        # A setting that cannot be ("digest at 25:00") is not put to the rep: they are told why.
        said = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        record["error"] = {"code": UNRESOLVED, "message": f"I can't set that: {said}."}
        return record
    try:
        if ctx.posting is None:
            raise PostingUnreachable(NO_CHAT)
        record["current"] = _current(await ctx.posting.current(ctx.owner))
    except PostingUnreachable as exc:
        record["error"] = {"code": UNRESOLVED, "message": exc.message}
    return record


async def _check(ctx: AgentContext, plan: WritePlan, snapshot: ProposalRecord | None) -> WritePlan:
    return plan  # the rep's own settings: nothing to re-read or re-authorise


async def _change(ctx: AgentContext, store: BaseStore | None, plan: WritePlan) -> WriteOutcome:
    args = plan.args
    assert isinstance(args, ChangeBriefsAndDigestArgs)
    change = PostingChange(
        # A lead time turns briefs on, a digest time the digest, unless the rep said off.
        briefs=args.briefs if args.briefs is not None else (True if args.lead_minutes is not None else None),
        lead_minutes=args.lead_minutes,
        digest=args.digest if args.digest is not None else (True if args.digest_time is not None else None),
        digest_time=parse_clock(args.digest_time) if args.digest_time is not None else None,
    )
    try:
        if ctx.posting is None:
            raise PostingUnreachable(NO_CHAT)
        prefs = await ctx.posting.change(ctx.owner, change)
    except PostingUnreachable as exc:
        return WriteOutcome.failed("unavailable", exc.message)
    return WriteOutcome.done(_current(prefs), message=describe(prefs))


def _no_target(args: BaseModel) -> str | None:
    return None


CHANGE_BRIEFS_AND_DIGEST = register(
    WriteTool(
        name="change_briefs_and_digest",
        cues=POSTING_CUES,
        title="Change my briefs and digest",
        description=(
            "Turn the rep's meeting prep briefs (posted before each customer meeting) or daily "
            "digest on or off, or set how many minutes before a meeting the brief comes or the "
            "local time the digest comes, when the rep asks. Needs approval."
        ),
        args_schema=ChangeBriefsAndDigestArgs,
        backend="store",
        target_type="settings",
        target_id=_no_target,
        editable=("briefs", "lead_minutes", "digest", "digest_time"),
        changes_record=True,
        snapshot=_snapshot,
        check=_check,
        execute=_change,
    )
)
