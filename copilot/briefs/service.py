"""The briefs the timer would post at a moment: one per meeting with a CRM contact the rep may see.

The same function serves ``python -m copilot brief`` and (later) the Functions timer:
read the rep's calendar with their delegated ``Calendars.Read`` token, keep the meetings
starting within the lead time, match external attendees to CRM contacts with the rep's
CRM read token (the connector's typed reads, :func:`copilot.crm.connector.reads`, so any CRM
serves), and compose each brief from the CRM's and the knowledge store's answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Protocol

from psycopg import AsyncConnection
from psycopg.rows import DictRow

from copilot.auth.tokens import TokenBroker
from copilot.briefs import ledger
from copilot.briefs.calendar import read_meetings
from copilot.briefs.compose import AccountReads, compose_brief, starts_within
from copilot.briefs.matching import domain_of, external_attendees, visible_contacts
from copilot.briefs.schedule import zone_name
from copilot.briefs.suggestions import for_brief
from copilot.briefs.types import Brief, BriefRun, Meeting
from copilot.crm import connector
from copilot.evidence import Evidence
from copilot.identity import RepIdentity
from copilot.insight.risk import RiskSettings, assess, history_of
from copilot.knowledge.acl import Reader
from copilot.knowledge.store import compact, search
from copilot.settings import Settings

DEFAULT_LEAD_MINUTES = 60
MAX_LEAD_MINUTES = 7 * 24 * 60
LAST_ACTIVITIES = 3


class BriefTokens(TokenBroker, Protocol):
    """A broker that also gives the Graph calendar token (``Calendars.Read``)."""

    async def token_for(self, scopes: list[str]) -> str: ...


async def _playbooks(
    conn: AsyncConnection[DictRow], evidence: Evidence, reader: Reader, stages: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Per stage, the stage playbook's best chunk the rep may read (the answers' access filter)."""
    found: dict[str, dict[str, Any]] = {}
    for stage in dict.fromkeys(stages):
        hits = await search(conn, reader, f"{stage} stage playbook next steps", limit=5)
        chunks = [compact(h) for h in hits]
        evidence.record("search_knowledge", {"items": chunks, "count": len(chunks)})
        match = next((c for c in chunks if stage.lower() in str(c["title"]).lower()), None)
        if match is not None:
            found[stage] = match
    return found


async def _account_reads(
    evidence: Evidence,
    conn: AsyncConnection[DictRow],
    reader: Reader,
    account_id: str,
    contacts: list[dict[str, Any]],
    at: datetime,
) -> AccountReads:
    account = await evidence.account(account_id)
    deals = await evidence.open_opportunities(account_id=account_id)
    activities = await evidence.activities(account_id=account_id, limit=LAST_ACTIVITIES)
    stages = [str(d["stage"]) for d in deals if d.get("stage")]
    return AccountReads(
        account=account,
        contacts=contacts,
        opportunities=deals,
        activities=activities,
        playbooks=await _playbooks(conn, evidence, reader, stages),
        risks=await _risks(evidence, deals, at),
    )


async def _risks(evidence: Evidence, deals: list[dict[str, Any]], at: datetime) -> dict[str, list[str]]:
    """Why each of the account's open deals is at risk, for those that are (computed, not guessed)."""
    settings, day, found = RiskSettings(), at.astimezone(UTC).date(), {}
    for deal in deals:
        deal_id = str(deal["id"])
        activities = await evidence.activities(opportunity_id=deal_id, limit=20)
        signals = assess(deal, activities, await history_of(evidence, deal_id), settings, at, day)
        if signals:
            found[deal_id] = [s.reason for s in signals]
    return found


async def _brief_reads(
    meeting: Meeting,
    evidence: Evidence,
    conn: AsyncConnection[DictRow],
    reader: Reader,
    own_domain: str,
    directory: dict[str, dict[str, Any]],
    at: datetime,
) -> tuple[list[AccountReads], int] | None:
    """The reads of a meeting's accounts and how many external attendees matched no contact
    (``None``: no external attendee is a CRM contact the rep may see, so no brief)."""
    external = external_attendees(meeting, own_domain)
    matched = [
        directory[a.address.strip().lower()] for a in external if a.address.strip().lower() in directory
    ]
    if not matched:
        return None
    by_account: dict[str, list[dict[str, Any]]] = {}
    for contact in matched:
        by_account.setdefault(str(contact["account_id"]), []).append(contact)
    accounts = [await _account_reads(evidence, conn, reader, a, c, at) for a, c in by_account.items()]
    return accounts, len(external) - len(matched)


async def briefs_at(
    settings: Settings,
    identity: RepIdentity,
    tokens: BriefTokens,
    conn: AsyncConnection[DictRow],
    *,
    at: datetime,
    lead_minutes: int = DEFAULT_LEAD_MINUTES,
    zone: tzinfo = UTC,
) -> BriefRun:
    """The briefs for the rep's meetings starting in ``[at, at + lead_minutes)``.

    No brief for a meeting without an external attendee who is a CRM contact the rep may
    see; every fact comes from a read made as the rep (``conn`` serves the knowledge search and
    the suggestion ledger: a brief's suggestions are recorded as made, less those the rep
    declined at the record's version read now). Times are shown in the rep's ``zone``, and
    "today" (for suggestions) is the rep's day.
    """
    until = at + timedelta(minutes=lead_minutes)
    meetings = [m for m in await read_meetings(settings, tokens, at, until) if starts_within(m, at, until)]
    own_domain = domain_of(identity.username)
    reader = Reader.of(identity)
    briefs: list[Brief] = []
    async with AsyncExitStack() as stack:
        evidence = Evidence(connector.reads(stack, settings, tokens))
        addresses = [a.address for m in meetings for a in external_attendees(m, own_domain)]
        directory = await visible_contacts(evidence, addresses) if addresses else {}
        found = [
            (meeting, reads)
            for meeting in meetings
            if (reads := await _brief_reads(meeting, evidence, conn, reader, own_domain, directory, at))
        ]
        # Who the rep is in the CRM (a brief lists colleagues' deals of the account too, and
        # only the rep's own are suggested changes), read once and only if there is a brief.
        me = str((await evidence.me()).get("id") or "") if found else ""
        for meeting, (accounts, other) in found:
            suggested = for_brief(accounts, me, at.astimezone(zone).date()) if me else ()
            offered = await ledger.offer(conn, identity, suggested)
            briefs.append(compose_brief(meeting, accounts, other, evidence.messages, offered, zone))
    return BriefRun(
        rep=identity.username or identity.name,
        at=at,
        time_zone=zone_name(zone),
        lead_minutes=lead_minutes,
        meetings_in_window=len(meetings),
        briefs=tuple(briefs),
        meetings_without_brief=len(meetings) - len(briefs),
    )
