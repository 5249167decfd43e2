"""The rep's own desk as read tools: what waits for their approval, who may approve for them,
the brief of their next meeting, today's digest and their approval stats.

These were the bot's typed commands ("my approvals", "brief me", "digest me", …), parsed word
for word, so "anything waiting on my approval?" got "I couldn't read that question". As tools,
any model understands them in the rep's own words, in Teams and in the terminal alike; the
offline model binds them by their titles and names, as it does every tool it has no role for
(so the titles and names are the rep's own short words for them: "My approvals", "brief me").
Each keeps a view beside its JSON (:mod:`copilot.views`), so the Teams bot answers with the
desk's card whatever the words.

Each reads as the run's rep (the rep comes from the run's context, never from the arguments),
with no model call, and returns the records' ids with every fact, to be cited. None changes
anything: the grants (a delegation, its revocation) are write tools behind the approval card
(:mod:`copilot.writes.delegation`).
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from datetime import datetime, timedelta
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from langgraph.runtime import Runtime, get_runtime

from copilot import delegation
from copilot.analytics.team import StatsUnavailable, approval_stats
from copilot.briefs.digest import digest_at, waiting_proposals
from copilot.briefs.mailbox_settings import rep_schedule
from copilot.briefs.service import briefs_at
from copilot.context import AgentContext
from copilot.crm import connector
from copilot.errors import AuthError, CalendarUnavailable, CrmCallError, CrmUnavailable
from copilot.evidence import Evidence
from copilot.tools.schemas import NoArgs
from copilot.views import BriefView, DeskCard, DeskView, StatsView, view_artifact
from copilot.writes import title

WAITING_TOOL = "pending_approvals"
DELEGATIONS_TOOL = "who_can_approve"
BRIEF_TOOL = "brief_me"
DIGEST_TOOL = "todays_digest"
STATS_TOOL = "approval_stats"

BRIEF_AHEAD_DAYS = 7
"""How far ahead the next customer meeting is looked for."""

DELEGATION_CUES = ("delegat", "approve for", "approve my", "on my behalf", "who can approve", "cover")
"""Word stems of a rep speaking of who may approve for them (the read, the grant, the revocation)."""


def _context() -> AgentContext:
    runtime: Runtime[AgentContext] = get_runtime(AgentContext)
    return runtime.context


ToolAnswer = tuple[str, dict[str, Any] | None]
"""The JSON text the model reads, and the view kept beside it for a client's card (:mod:`copilot.views`)."""


def _unavailable(
    what: str, exc: AuthError | CrmUnavailable | CrmCallError | CalendarUnavailable
) -> ToolAnswer:
    return json.dumps({"error": "unavailable", "message": f"I couldn't read {what}: {exc.message}"}), None


def _desk(text: str, card: DeskCard) -> ToolAnswer:
    return text, view_artifact(DeskView(card=card))


async def _pending_approvals(**_: Any) -> ToolAnswer:
    ctx = _context()
    if ctx.proposals is None:
        return json.dumps({"items": [], "count": 0}), None
    try:
        async with AsyncExitStack() as stack, ctx.pool.connection() as conn:
            evidence = Evidence(connector.reads(stack, ctx.settings, ctx.tokens))
            waiting = await waiting_proposals(evidence, conn, ctx.proposals, ctx.identity)
    except (AuthError, CrmUnavailable, CrmCallError) as exc:
        return _unavailable("your proposals' records", exc)
    items: list[dict[str, Any]] = []
    for w in waiting:
        target = w.target or {}
        name = str(target.get("name") or "")
        items.append(
            {
                "what": title(w.tool) + (f": {name}" if name else ""),
                "record_ids": [str(target["id"])] if target.get("id") else [],
                "proposed_at": w.proposed_at,
            }
        )
    text = json.dumps(
        {
            "items": items,
            "count": len(items),
            "how_to_decide": "each is decided on its own approval card (approve, edit or reject)",
        }
    )
    return _desk(text, "approvals")


async def _who_can_approve(**_: Any) -> ToolAnswer:
    ctx = _context()
    now = ctx.clock()
    async with ctx.pool.connection() as conn:
        granted = await delegation.granted_by(conn, ctx.identity, now=now)
        held = await delegation.held_by(conn, ctx.identity, now=now)
    text = json.dumps(
        {
            "items": [
                {"what": f"{d.delegate_name} may approve your proposals until {_until(d.ends_at)}"}
                for d in granted
            ]
            + [
                {"what": f"You may approve {d.owner_name}'s proposals until {_until(d.ends_at)}"}
                for d in held
            ],
            "count": len(granted) + len(held),
        }
    )
    return _desk(text, "delegations")


def _until(ends_at: datetime) -> str:
    # A grant "until Friday" ends as Friday ends: the day it runs through is what the rep named.
    return (ends_at - timedelta(days=1)).date().isoformat()


async def _brief_next_meeting(**_: Any) -> ToolAnswer:
    ctx = _context()
    now = ctx.clock()
    schedule = await rep_schedule(ctx.settings, ctx.tokens, None)
    try:
        async with ctx.pool.connection() as conn:
            run = await briefs_at(
                ctx.settings,
                ctx.identity,
                ctx.tokens,
                conn,
                at=now,
                lead_minutes=BRIEF_AHEAD_DAYS * 24 * 60,
                zone=schedule.tz,
            )
    except (AuthError, CalendarUnavailable, CrmUnavailable, CrmCallError) as exc:
        return _unavailable("your calendar", exc)
    if not run.briefs:
        return json.dumps({"items": [], "count": 0, "looked_ahead_days": BRIEF_AHEAD_DAYS}), None
    brief = run.briefs[0]
    start = brief.start.astimezone(schedule.tz)
    text = json.dumps(
        {
            "meeting": brief.subject,
            "starts": f"{start:%a %Y-%m-%d %H:%M} {brief.time_zone}",
            "items": [
                {"text": item.text, "record_ids": list(item.cited)}
                for section in brief.accounts
                for item in section.items
            ],
            "count": sum(len(s.items) for s in brief.accounts),
        }
    )
    return text, view_artifact(BriefView(brief=brief))


async def _todays_digest(**_: Any) -> ToolAnswer:
    ctx = _context()
    if ctx.proposals is None:
        return json.dumps({"error": "unavailable", "message": "the digest needs the copilot's service"}), None
    schedule = await rep_schedule(ctx.settings, ctx.tokens, None)
    try:
        async with ctx.pool.connection() as conn:
            digest = await digest_at(
                ctx.settings, ctx.identity, ctx.tokens, conn, ctx.proposals, at=ctx.clock(), zone=schedule.tz
            )
    except (AuthError, CalendarUnavailable, CrmUnavailable, CrmCallError) as exc:
        return _unavailable("your day", exc)
    text = json.dumps(
        {
            "day": digest.day.isoformat(),
            "time_zone": digest.time_zone,
            "items": [
                {"section": i.section, "text": i.text, "record_ids": list(i.cited)} for i in digest.items
            ],
            "count": len(digest.items),
            "meetings_today": digest.meetings_today,
        }
    )
    return _desk(text, "digest")


async def _approval_stats(**_: Any) -> ToolAnswer:
    ctx = _context()
    stats = await approval_stats(ctx.settings, ctx.pool, ctx.identity, ctx.tokens)
    if isinstance(stats, StatsUnavailable):
        return json.dumps({"error": "unavailable", "message": stats.message}), None
    report = stats.report
    text = json.dumps(
        {
            "scope": stats.scope,
            "covers": stats.covers,
            "decided": report.decided,
            "items": [
                {"what": f"{title(t.tool)}: approved {t.approved}, edited {t.edited}, rejected {t.rejected}"}
                for t in report.tools
            ],
            "feedback": report.feedback,
        },
        default=str,
    )
    return text, view_artifact(StatsView(stats=stats))


def _tool(coroutine: Any, name: str, title_: str, description: str, cues: tuple[str, ...]) -> BaseTool:
    return StructuredTool.from_function(
        coroutine=coroutine,
        name=name,
        description=description,
        args_schema=NoArgs,
        # Selection cues (word stems): offered when the conversation speaks of it.
        metadata={"readOnlyHint": True, "title": title_, "cues": cues},
        response_format="content_and_artifact",
    )


def rep_desk_tools() -> list[BaseTool]:
    """The rep's desk, as read tools."""
    return [
        _tool(
            _pending_approvals,
            WAITING_TOOL,
            "My approvals",
            "List the proposed changes waiting for the rep's approval across their conversations, "
            "each with the record it changes. Each is decided on its own card.",
            ("approv", "pending", "waiting", "decide", "proposal"),
        ),
        _tool(
            _who_can_approve,
            DELEGATIONS_TOOL,
            "My delegations",
            "List who may approve the rep's proposals for them (and until when), and whose the rep may approve.",
            DELEGATION_CUES,
        ),
        _tool(
            _brief_next_meeting,
            BRIEF_TOOL,
            "Brief for my next meeting",
            "A brief of the rep's next customer meeting in the coming week: the accounts, attendees, "
            "deals, recent activities and next steps, each fact cited.",
            ("brief", "prep", "next meeting", "upcoming meeting"),
        ),
        _tool(
            _todays_digest,
            DIGEST_TOOL,
            "Digest for me",
            "The rep's digest of today: customer meetings, deals closing soon with nothing logged, "
            "overdue close dates, deals at risk, proposals waiting; each line cited.",
            ("digest", "my day", "today", "plate", "agenda"),
        ),
        _tool(
            _approval_stats,
            STATS_TOOL,
            "My stats",
            "How the rep's (or their direct reports') proposals were decided: approved, edited and "
            "rejected per kind of change, and feedback given.",
            ("stat", "how often", "approval rate", "feedback"),
        ),
    ]
