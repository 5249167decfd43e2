"""Write tools whose backend is the copilot's own store: the rep's drafting preferences."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from copilot.tools.preferences import apply_update, load_preferences, save_preferences
from copilot.tools.schemas import UpdatePreferencesArgs
from copilot.writes.crm import now_iso
from copilot.writes.registry import WriteTool, register
from copilot.writes.types import ProposalRecord, WriteOutcome, WritePlan

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from copilot.context import AgentContext

PREFERENCE_CUES: tuple[str, ...] = (
    "prefer",
    "tone",
    "signature",
    "sign off",
    "cadence",
    "formal",
    "casual",
    "setting",
)
"""Word stems of a rep speaking of their drafting preferences (the read and the update)."""


async def _snapshot(ctx: AgentContext, store: BaseStore | None, args: dict[str, Any]) -> ProposalRecord:
    current = (await load_preferences(store, ctx.identity)).model_dump() if store is not None else {}
    return {
        "tool": "update_preferences",
        "proposed": dict(args),
        "taken_at": now_iso(ctx.clock),
        "target": {"type": "preferences", "id": None, "name": "Your preferences"},
        "version": None,
        "current": current,
        "error": None,
    }


async def _check(ctx: AgentContext, plan: WritePlan, snapshot: ProposalRecord | None) -> WritePlan:
    return plan  # the rep's own preferences: nothing to re-read or re-authorise


async def _save(ctx: AgentContext, store: BaseStore | None, plan: WritePlan) -> WriteOutcome:
    args = plan.args
    assert isinstance(args, UpdatePreferencesArgs)
    if store is None:
        return WriteOutcome.failed("unavailable", "preferences storage is not configured")
    updated = apply_update(await load_preferences(store, ctx.identity), args)
    await save_preferences(store, ctx.identity, updated)
    return WriteOutcome.done({"preferences": updated.model_dump()})


def _target(args: BaseModel) -> str | None:
    return None


UPDATE_PREFERENCES = register(
    WriteTool(
        name="update_preferences",
        cues=PREFERENCE_CUES,
        title="Change your drafting preferences",
        description=(
            "Change or reset the rep's email tone, signature or follow-up cadence, when the rep asks. "
            "Needs approval."
        ),
        args_schema=UpdatePreferencesArgs,
        backend="store",
        target_type="preferences",
        target_id=_target,
        editable=("email_tone", "signature", "followup_cadence_days", "reset"),
        multiline=frozenset({"signature"}),
        changes_record=True,
        snapshot=_snapshot,
        check=_check,
        execute=_save,
    )
)
