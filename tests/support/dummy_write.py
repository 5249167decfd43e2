"""A throwaway write tool, registered only inside a test: proof that a new registry entry
is picked up by every generic suite with no other edit.

Its schema has one field of each kind the derivations know (an id, free text, an enum, a
bounded integer, a boolean, a date, a list), so each derived case has something to bite on.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from copilot.writes import REGISTRY, ProposalRecord, WriteOutcome, WritePlan, WriteTool, register

DUMMY_TOOL = "pin_dummy_badge"
EXECUTED: list[WritePlan] = []


class DummyBadgeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    account_id: str = Field(min_length=1, title="Account")
    label: str = Field(min_length=1, max_length=80, title="Label")
    colour: Literal["gold", "silver", "bronze"] = Field(title="Colour")
    weight: int = Field(default=1, ge=1, le=10, title="Weight")
    pinned: bool = Field(default=False, title="Pinned")
    until: dt.date | None = Field(default=None, title="Until")
    tags: list[str] = Field(default_factory=list, title="Tags")


async def _snapshot(ctx: Any, store: Any, args: dict[str, Any]) -> ProposalRecord:
    return {
        "tool": DUMMY_TOOL,
        "proposed": dict(args),
        "taken_at": "2030-01-01T00:00:00+00:00",
        "target": {"type": "account", "id": str(args.get("account_id", "")), "name": "Dummy account"},
        "version": None,
        "current": {},
        "error": None,
    }


async def _check(ctx: Any, plan: WritePlan, snapshot: ProposalRecord | None) -> WritePlan | WriteOutcome:
    return plan


async def _execute(ctx: Any, store: Any, plan: WritePlan) -> WriteOutcome:
    EXECUTED.append(plan)
    return WriteOutcome.done({"badge": plan.args.model_dump(mode="json")})


def _target(args: BaseModel) -> str | None:
    assert isinstance(args, DummyBadgeArgs)
    return args.account_id


def dummy_tool() -> WriteTool:
    return WriteTool(
        name=DUMMY_TOOL,
        title="Pin a dummy badge",
        description="Pin a badge to an account (a test's throwaway write tool). Needs approval.",
        args_schema=DummyBadgeArgs,
        backend="store",
        target_type="account",
        target_id=_target,
        editable=("label", "colour", "weight"),
        snapshot=_snapshot,
        check=_check,
        execute=_execute,
    )


@pytest.fixture
def dummy_write() -> Iterator[WriteTool]:
    """The dummy tool registered for one test; the registry exactly as it was afterwards."""
    saved = dict(REGISTRY)
    EXECUTED.clear()
    try:
        yield register(dummy_tool())
    finally:
        REGISTRY.clear()
        REGISTRY.update(saved)
