"""The daily digest: the rep's day at a glance, every line cited, read as the rep.

Four sections, each from reads made with the rep's own delegated tokens (the calendar's
``Calendars.Read``, the CRM's read session) or the rep's own threads:

* the day's customer meetings: meetings starting on the rep's day with at least one
  external attendee who is a CRM contact the rep may see (matched as briefs match them);
* the rep's open deals closing within 14 days with no activity regarding them in the last
  14 days;
* overdue next steps: the open tasks on the accounts of the rep's open deals whose due date
  has passed (a task's due date is the real date a step was promised for), and the rep's open
  deals whose close date has passed (the close date is the one date a next step without a task
  serves, so once it has passed the step is overdue, whatever it says, and a deal with none set
  says so);
* the rep's open deals at risk by the signals that need the CRM's change history (close date
  pushed later repeatedly, stalled in a stage, amount lowered: :mod:`copilot.insight.risk`; the
  other two risk signals are the two sections above);
* proposals still waiting for the rep's decision on their own threads.

Composition is pure (:func:`compose_digest`): the reads are kept as tool results
(:class:`copilot.evidence.Evidence`) and the text passes the answers' citation check,
as a brief does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any

from langchain_core.messages import BaseMessage
from psycopg import AsyncConnection
from psycopg.rows import DictRow

from copilot.briefs import ledger
from copilot.briefs.calendar import read_meetings
from copilot.briefs.compose import suggestion_lines
from copilot.briefs.matching import domain_of, external_attendees, visible_contacts
from copilot.briefs.schedule import zone_name
from copilot.briefs.service import BriefTokens
from copilot.briefs.suggestions import for_digest
from copilot.briefs.types import (
    DIGEST_SECTIONS,
    DIGEST_TITLES,
    Digest,
    DigestItem,
    DigestSection,
    Meeting,
    Suggestion,
)
from copilot.citations import cited_ids
from copilot.cited_text import amount_text, check_citations, plain, with_citations
from copilot.context import PendingWrite, WaitingProposals
from copilot.crm import connector
from copilot.crm.types import TargetKind
from copilot.errors import ThreadAccessDenied, ThreadNotFound
from copilot.evidence import Evidence
from copilot.identity import RepIdentity
from copilot.insight.risk import HISTORY_SIGNALS, RiskSettings, Signal, assess, history_of
from copilot.persistence.threads import list_threads
from copilot.settings import Settings
from copilot.tools.crm_client import CrmCallError
from copilot.writes import title

HORIZON_DAYS = 14
""""Closing within 14 days", "no activity in 14 days"."""
MAX_THREADS = 200
"""The rep's most recently active threads looked at for waiting proposals."""
READ_TARGET: dict[str, TargetKind] = {
    "account": "account",
    "opportunity": "opportunity",
    "contact": "contact",
}
"""A proposal's CRM target kinds, read again as the rep (so it is cited only if still readable)."""


@dataclass(frozen=True)
class CustomerMeeting:
    """A meeting of the day and the visible CRM contacts among its attendees, with their accounts."""

    meeting: Meeting
    contacts: Sequence[Mapping[str, Any]]
    accounts: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class WaitingProposal:
    """A proposal waiting on one of the rep's threads, and its CRM target as read now (if any)."""

    tool_call_id: str
    tool: str
    target: Mapping[str, Any] | None
    """The target record as the CRM returned it to the rep now; None if it has none or is hidden."""
    proposed_at: str


@dataclass(frozen=True)
class DigestReads:
    """Everything a digest is composed from."""

    meetings: Sequence[CustomerMeeting]
    closing_quiet: Sequence[Mapping[str, Any]]
    overdue: Sequence[Mapping[str, Any]]
    waiting: Sequence[WaitingProposal]
    at_risk: Sequence[tuple[Mapping[str, Any], Sequence[Signal]]] = ()
    """Open deals and their change-history risk signals (:data:`HISTORY_SIGNALS`)."""
    overdue_tasks: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]] = ()
    """Open tasks whose due date passed, each with the deal (or account) it is about."""


# --- composing (pure) ---------------------------------------------------------------------------


def _item(section: DigestSection, text: str, *ids: str) -> DigestItem:
    cited, cites = with_citations(text, *ids)
    return DigestItem(section=section, text=cited, cited=cites)


def _meeting_item(found: CustomerMeeting, zone: tzinfo) -> DigestItem:
    start, end = found.meeting.start.astimezone(zone), found.meeting.end.astimezone(zone)
    people = "; ".join(
        plain(c.get("name")) + (f", {plain(c.get('title'))}" if c.get("title") else "")
        for c in found.contacts
    )
    names = ", ".join(plain(a.get("name")) for a in found.accounts.values())
    text = f"{start:%H:%M}–{end:%H:%M} {plain(found.meeting.subject) or '(no subject)'} with {people}"
    ids = [*found.accounts, *(str(c["id"]) for c in found.contacts)]
    return _item("meeting", text + (f" ({names})" if names else ""), *ids)


def _deal(deal: Mapping[str, Any]) -> str:
    parts = [plain(deal.get("stage")), amount_text(deal)]
    return f"{plain(deal.get('name'))} ({', '.join(p for p in parts if p)})"


def digest_items(reads: DigestReads, day: date, zone: tzinfo) -> tuple[DigestItem, ...]:
    """The digest's lines, in the order of :data:`DIGEST_SECTIONS`."""
    items = [_meeting_item(m, zone) for m in reads.meetings]
    for deal in reads.closing_quiet:
        items.append(
            _item(
                "closing_quiet",
                f"{_deal(deal)} closes {plain(deal.get('close_date'))[:10]}; no activity in "
                f"{HORIZON_DAYS} days",
                str(deal["id"]),
            )
        )
    for task, about in reads.overdue_tasks:
        due = str(task.get("due_date"))[:10]
        late = (day - date.fromisoformat(due)).days
        items.append(
            _item(
                "overdue",
                f"Task “{plain(task.get('subject'))}” on {plain(about.get('name'))}: due {due}, "
                f"{late} day{'s' if late != 1 else ''} ago",
                str(task["id"]),
                str(about["id"]),
            )
        )
    for deal in reads.overdue:
        closes = plain(deal.get("close_date"))[:10]
        late = (day - date.fromisoformat(closes)).days
        step = plain(deal.get("next_step"))
        items.append(
            _item(
                "overdue",
                f"{_deal(deal)}: close date {closes} passed {late} day{'s' if late != 1 else ''} ago; "
                + (f"next step: {step}" if step else "no next step set"),
                str(deal["id"]),
            )
        )
    for deal, signals in reads.at_risk:
        reasons = "; ".join(plain(s.reason) for s in signals)
        items.append(_item("at_risk", f"{_deal(deal)}: {reasons}", str(deal["id"])))
    for proposal in reads.waiting:
        target = proposal.target
        what = f"{title(proposal.tool)}: {plain(target.get('name'))}" if target else title(proposal.tool)
        since = f" (proposed {_local_day(proposal.proposed_at, zone)})" if proposal.proposed_at else ""
        # Cited by its record, never by its tool call id (the runner's, not the rep's): a
        # proposal whose record the rep cannot read now cites nothing.
        items.append(_item("waiting", what + since, str(target["id"]) if target else ""))
    return tuple(items)


def _local_day(moment: str, zone: tzinfo) -> str:
    """An ISO moment's day in the rep's zone (the text's own date if it is no moment)."""
    try:
        return f"{_instant(moment).astimezone(zone):%Y-%m-%d}"
    except ValueError:
        return moment[:10]


def render_digest(
    rep: str,
    day: date,
    zone_name: str,
    items: Sequence[DigestItem],
    other: int,
    suggestions: Sequence[Suggestion] = (),
) -> str:
    """The digest as text: a heading, each section (an empty one says ``none``), the suggestions."""
    lines = [f"Daily digest for {rep}, {day:%a %Y-%m-%d} ({zone_name})"]
    for section in DIGEST_SECTIONS:
        facts = [i.text for i in items if i.section == section]
        if not facts:
            lines.append(f"{DIGEST_TITLES[section]}: none")
            continue
        lines.append(f"{DIGEST_TITLES[section]}:")
        lines.extend(f"  - {fact}" for fact in facts)
    lines.extend(suggestion_lines(suggestions))
    if other:
        noun = "meeting has" if other == 1 else "meetings have"
        lines.append(f"({other} other {noun} no CRM contact you can see.)")
    return "\n".join(lines)


def compose_digest(
    rep: str,
    at: datetime,
    zone: tzinfo,
    reads: DigestReads,
    meetings_today: int,
    evidence: Sequence[BaseMessage],
    suggestions: Sequence[Suggestion] = (),
    leave_out: Collection[str] = frozenset(),
) -> Digest:
    """The digest of ``rep``'s day (the day of ``at`` in ``zone``) from its reads, with the
    suggestions to make (already less the held-back ones).

    ``leave_out``: records the rep snoozed; a line whose record (its first citation) is one of
    them is not shown.
    """
    day = at.astimezone(zone).date()
    shown_zone = zone_name(zone)
    every = digest_items(reads, day, zone)
    items = tuple(i for i in every if not (i.cited and i.cited[0] in leave_out))
    other = meetings_today - len(reads.meetings)
    text = render_digest(rep, day, shown_zone, items, other, suggestions)
    return Digest(
        rep=rep,
        at=at,
        day=day,
        time_zone=shown_zone,
        items=items,
        meetings_today=meetings_today,
        meetings_without_customer=other,
        snoozed=len(every) - len(items),
        text=text,
        citations=tuple(cited_ids(text)),
        citation_check=check_citations(text, evidence),
        suggestions=tuple(suggestions),
    )


# --- reading (as the rep) -----------------------------------------------------------------------


def day_bounds(at: datetime, zone: tzinfo) -> tuple[datetime, datetime]:
    """The rep's day containing ``at``: its start and the next day's start, in UTC."""
    day = at.astimezone(zone).date()
    start = datetime.combine(day, time(0, 0), tzinfo=zone)
    end = datetime.combine(day + timedelta(days=1), time(0, 0), tzinfo=zone)
    return start.astimezone(UTC), end.astimezone(UTC)


async def _customer_meetings(
    evidence: Evidence, meetings: Sequence[Meeting], own_domain: str
) -> list[CustomerMeeting]:
    addresses = [a.address for m in meetings for a in external_attendees(m, own_domain)]
    directory = await visible_contacts(evidence, addresses) if addresses else {}
    accounts: dict[str, dict[str, Any]] = {}
    found: list[CustomerMeeting] = []
    for meeting in meetings:
        keys = [a.address.strip().lower() for a in external_attendees(meeting, own_domain)]
        contacts = [directory[k] for k in keys if k in directory]
        if not contacts:
            continue
        for account_id in dict.fromkeys(str(c["account_id"]) for c in contacts):
            if account_id not in accounts:
                accounts[account_id] = await evidence.account(account_id)
        ids = dict.fromkeys(str(c["account_id"]) for c in contacts)
        found.append(CustomerMeeting(meeting, contacts, {i: accounts[i] for i in ids}))
    return found


async def _quiet(evidence: Evidence, deal: Mapping[str, Any], at: datetime) -> bool:
    """No activity regarding the deal in the ``HORIZON_DAYS`` before ``at``."""
    found = await evidence.activities(
        opportunity_id=str(deal["id"]), since=at - timedelta(days=HORIZON_DAYS), limit=100
    )
    moments = [a.get("occurred_at") for a in found]
    return not any(_instant(m) <= at for m in moments if isinstance(m, str) and m)


def _task_due(activity: Mapping[str, Any]) -> date | None:
    """An open task's due date (None for any other activity, or a task done or without one)."""
    if activity.get("type") != "task" or activity.get("done") or activity.get("voided"):
        return None
    try:
        return date.fromisoformat(str(activity.get("due_date") or "")[:10])
    except ValueError:
        return None


def _regarding(activity: Mapping[str, Any]) -> str:
    """The id of the record an activity regards: its deal, else its account (either CRM's shape)."""
    for key in ("opportunity", "account"):
        ref = activity.get(key)
        if isinstance(ref, Mapping) and ref.get("id"):
            return str(ref["id"])
    return str(activity.get("regarding_id") or "")


async def _overdue_tasks(
    evidence: Evidence, deals: Sequence[Mapping[str, Any]], day: date
) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Open tasks on the accounts of the rep's open deals whose due date is before ``day``, oldest
    due first, each with its deal (or its account)."""
    by_id = {str(d["id"]): d for d in deals}
    accounts: dict[str, Mapping[str, Any]] = {}
    for deal in deals:
        account: Mapping[str, Any] = deal.get("account") or {}
        account_id = str(account.get("id") or "") if isinstance(account, Mapping) else ""
        if account_id:
            accounts.setdefault(account_id, {"id": account_id, "name": account.get("name") or account_id})
    found: list[tuple[date, Mapping[str, Any], Mapping[str, Any]]] = []
    for account_id, account in accounts.items():
        for activity in await evidence.activities(account_id=account_id, limit=100):
            due = _task_due(activity)
            if due is None or due >= day:
                continue
            about = by_id.get(_regarding(activity))
            if about is None:
                # About the account (or one of its contacts): named as the CRM names the account.
                if account.get("name") == account_id:
                    accounts[account_id] = account = {
                        "id": account_id,
                        "name": (await evidence.account(account_id)).get("name") or account_id,
                    }
                about = account
            found.append((due, activity, about))
    found.sort(key=lambda f: (f[0], str(f[1].get("id"))))
    return [(activity, about) for _, activity, about in found]


async def _at_risk(
    evidence: Evidence, deals: Sequence[Mapping[str, Any]], at: datetime, day: date
) -> list[tuple[Mapping[str, Any], Sequence[Signal]]]:
    """The deals whose change history shows a risk (a deal without history is not judged here)."""
    found: list[tuple[Mapping[str, Any], Sequence[Signal]]] = []
    settings = RiskSettings()
    for deal in deals:
        history = await history_of(evidence, str(deal["id"]))
        if history is None:
            continue
        signals = [s for s in assess(deal, (), history, settings, at, day) if s.kind in HISTORY_SIGNALS]
        if signals:
            found.append((deal, signals))
    return found


def _instant(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


async def waiting_proposals(
    evidence: Evidence,
    conn: AsyncConnection[DictRow],
    proposals: WaitingProposals,
    identity: RepIdentity,
) -> list[WaitingProposal]:
    """The proposals waiting on the rep's own threads (not those shared with them), newest thread first."""
    owned = [
        t
        for t in await list_threads(
            conn, tenant_id=identity.tenant_id, aad_id=identity.aad_object_id, limit=MAX_THREADS
        )
        if not t.delegated
    ]
    found: list[WaitingProposal] = []
    for thread in owned:
        try:
            waiting = list(await proposals.waiting(identity, thread.thread_id))
        except (ThreadNotFound, ThreadAccessDenied):
            continue  # expired or rotated away since it was listed
        if not waiting:
            continue
        # Their targets are read again from the CRM below, as the rep: only those are cited.
        for proposal in waiting:
            found.append(await _with_target(evidence, proposal))
    return found


async def _with_target(evidence: Evidence, proposal: PendingWrite) -> WaitingProposal:
    record: Mapping[str, Any] = proposal.record or {}
    target = record.get("target") or {}
    kind, target_id = str(target.get("type") or ""), target.get("id")
    read: Mapping[str, Any] | None = None
    if kind in READ_TARGET and isinstance(target_id, str) and target_id:
        try:
            read = await evidence.record_of(READ_TARGET[kind], target_id)
        except CrmCallError:
            read = None  # no longer readable by the rep: listed, but neither named nor cited
    return WaitingProposal(
        tool_call_id=proposal.tool_call_id,
        tool=proposal.tool,
        target=read if read and read.get("id") else None,
        proposed_at=str(record.get("taken_at") or ""),
    )


async def digest_at(
    settings: Settings,
    identity: RepIdentity,
    tokens: BriefTokens,
    conn: AsyncConnection[DictRow],
    proposals: WaitingProposals,
    *,
    at: datetime,
    zone: tzinfo = UTC,
    leave_out: Collection[str] = frozenset(),
) -> Digest:
    """The rep's daily digest for their day containing ``at`` (in ``zone``), as it stands at ``at``.

    ``conn`` lists the rep's threads and keeps the suggestion ledger (the digest's suggestions
    are recorded as made, less those the rep declined at the record's version read now);
    ``proposals`` (the runner) reads what waits on each thread; ``leave_out``: the records the
    rep snoozed (their lines are left out).
    """
    start, end = day_bounds(at, zone)
    day = at.astimezone(zone).date()
    meetings = [m for m in await read_meetings(settings, tokens, start, end) if start <= m.start < end]
    async with AsyncExitStack() as stack:
        evidence = Evidence(connector.reads(stack, settings, tokens))
        customer = await _customer_meetings(evidence, meetings, domain_of(identity.username))
        mine = await evidence.open_opportunities(mine=True)
        closes = {str(d["id"]): date.fromisoformat(str(d.get("close_date"))[:10]) for d in mine}
        soon = [d for d in mine if day <= closes[str(d["id"])] <= day + timedelta(days=HORIZON_DAYS)]
        quiet = [d for d in soon if await _quiet(evidence, d, at)]
        overdue = [d for d in mine if closes[str(d["id"])] < day]
        overdue_tasks = await _overdue_tasks(evidence, mine, day)
        at_risk = await _at_risk(evidence, mine, at, day)
        waiting = await waiting_proposals(evidence, conn, proposals, identity)
    reads = DigestReads(
        meetings=customer,
        closing_quiet=sorted(quiet, key=lambda d: (closes[str(d["id"])], str(d["id"]))),
        overdue=sorted(overdue, key=lambda d: (closes[str(d["id"])], str(d["id"]))),
        waiting=waiting,
        at_risk=at_risk,
        overdue_tasks=overdue_tasks,
    )
    # A snoozed record's line is left out, and so is its suggestion.
    overdue_shown = [d for d in reads.overdue if str(d["id"]) not in leave_out]
    offered = await ledger.offer(conn, identity, for_digest(overdue_shown, day))
    return compose_digest(
        identity.username or identity.name,
        at,
        zone,
        reads,
        len(meetings),
        evidence.messages,
        offered,
        leave_out,
    )
