"""``deals_at_risk`` and ``catch_up``: the copilot's own computed insight as read tools, so any
model can answer "which of my deals are at risk?" and "what changed since Friday?".

Both read the CRM as the run's rep (:func:`copilot.crm.connector.run_reads`), compute with no
model call (:mod:`copilot.insight`), and return the records' ids with every fact, to be cited,
and keep the typed result as the tool message's artifact (:mod:`copilot.views`) for a
client that shows it as a card.
The rep comes from the run's context, never from the arguments. ``catch_up`` over the whole book
also stores the moment as the rep's last catch-up (the copilot's own bookkeeping, not a CRM
write).
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from langgraph.runtime import Runtime, get_runtime
from pydantic import BaseModel, ConfigDict, Field

from copilot.context import AgentContext
from copilot.crm.connector import run_reads
from copilot.errors import CrmCallError
from copilot.evidence import Evidence
from copilot.insight import catchup
from copilot.insight.risk import RiskSettings, deal_risks
from copilot.insight.since import UnreadableSince, read_since
from copilot.models.factory import build_model
from copilot.settings import is_offline_model
from copilot.views import CatchUpView, RiskView, view_artifact

RISK_TOOL = "deals_at_risk"
CATCH_UP_TOOL = "catch_up"


class DealsAtRiskArgs(BaseModel):
    """Which open deals are at risk, and why (computed from the CRM, each reason cited)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, title="Deals at risk")

    account_id: str | None = Field(
        default=None, description="Only this account's open deals (default: your own)."
    )
    opportunity_id: str | None = Field(default=None, description="Only this one deal.")
    limit: int = Field(default=20, ge=1, le=50, description="At most this many deals, riskiest first.")


class CatchUpArgs(BaseModel):
    """What changed since a moment: field changes, stage movements, new deals and activities."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, title="What changed")

    since: str | None = Field(
        default=None,
        max_length=60,
        description=(
            "Since when: a date (YYYY-MM-DD) or words such as 'Friday', 'this week', 'yesterday', "
            "'3 days ago'; empty = since your last catch-up (else 7 days)."
        ),
    )
    account_id: str | None = Field(default=None, description="Only this account and its deals.")
    opportunity_id: str | None = Field(default=None, description="Only this one deal.")
    limit: int = Field(default=30, ge=1, le=100, description="At most this many changes, newest first.")


ToolAnswer = tuple[str, dict[str, Any] | None]
"""The JSON text the model reads, and the typed result kept beside it (:mod:`copilot.views`)."""


def _error(exc: CrmCallError) -> ToolAnswer:
    return json.dumps({"error": exc.crm_code, "message": str(exc)}), None


async def _deals_at_risk(
    account_id: str | None = None, opportunity_id: str | None = None, limit: int = 20
) -> ToolAnswer:
    runtime: Runtime[AgentContext] = get_runtime(AgentContext)
    ctx = runtime.context
    evidence = Evidence(run_reads(ctx))
    model = ctx.settings.copilot_model
    try:
        report = await deal_risks(
            evidence,
            RiskSettings(),
            ctx.clock(),
            account_id=account_id,
            opportunity_id=opportunity_id,
            notes_model=None if is_offline_model(model) else build_model(model),
        )
    except CrmCallError as exc:
        return _error(exc)
    items: list[dict[str, Any]] = [
        {
            "id": d.id,
            "name": d.name,
            "stage": d.stage,
            "close_date": d.close_date,
            "amount": d.amount,
            "signals": [{"kind": s.kind, "reason": s.text, "record_ids": list(s.cited)} for s in d.signals],
        }
        for d in report.deals[:limit]
    ]
    text = json.dumps(
        {
            "items": items,
            "count": len(items),
            "open_deals_checked": report.checked,
            "not_checked": list(report.skipped),
        }
    )
    return text, view_artifact(RiskView(report=report))


async def _catch_up(
    since: str | None = None,
    account_id: str | None = None,
    opportunity_id: str | None = None,
    limit: int = 30,
) -> ToolAnswer:
    runtime: Runtime[AgentContext] = get_runtime(AgentContext)
    ctx = runtime.context
    now = ctx.clock()
    try:
        moment = read_since(since, now)
    except UnreadableSince as exc:
        return json.dumps({"error": "validation", "message": str(exc)}), None
    async with ctx.pool.connection() as conn:
        try:
            catch_up = await catchup.catch_up_from(
                Evidence(run_reads(ctx)),
                conn,
                ctx.identity,
                now=now,
                since=moment,
                account_id=account_id,
                opportunity_id=opportunity_id,
            )
        except CrmCallError as exc:
            return _error(exc)
    items = catch_up.items
    text = json.dumps(
        {
            "scope": catch_up.scope,
            "since": catch_up.since.isoformat(timespec="minutes"),
            "since_from": catch_up.since_source,
            "open_deals": catch_up.deals,
            "items": [
                {
                    "kind": i.kind,
                    "what": i.text,
                    "record_ids": list(i.cited),
                    "at": i.at.isoformat(),
                    "by": i.by,
                }
                for i in items[:limit]
            ],
            "count": len(items),
            "not_listed": list(catch_up.skipped),
        }
    )
    return text, view_artifact(CatchUpView(catch_up=catch_up))


def insight_tools() -> list[BaseTool]:
    """The two read tools the agent is given."""
    return [
        StructuredTool.from_function(
            coroutine=_deals_at_risk,
            name=RISK_TOOL,
            description=(
                "List the rep's open deals at risk and why: close date passed, closing soon with "
                "nothing logged lately, close date pushed repeatedly, stuck in a stage, amount "
                "lowered. Each reason cites its record ids."
            ),
            args_schema=DealsAtRiskArgs,
            response_format="content_and_artifact",
            # Selection cues (word stems): the tool is offered when the conversation speaks of it.
            metadata={
                "readOnlyHint": True,
                "title": "Deals at risk",
                "cues": ("risk", "slip", "stall", "stuck", "worr", "health", "trouble", "danger"),
            },
        ),
        StructuredTool.from_function(
            coroutine=_catch_up,
            name=CATCH_UP_TOOL,
            description=(
                "What changed since a moment (default: the rep's last catch-up): field changes "
                "(old → new, who, when), stage movements, new deals, and calls, meetings, emails "
                "and tasks logged, over the rep's deals or one of them. Each item cites its record ids."
            ),
            args_schema=CatchUpArgs,
            response_format="content_and_artifact",
            metadata={
                "readOnlyHint": True,
                "title": "What changed",
                "cues": ("chang", "catch", "since", "what's new", "whats new", "happened", "moved", "updat"),
            },
        ),
    ]
