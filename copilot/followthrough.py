"""The meeting followed through: after a customer meeting on the rep's calendar ends, what to
propose, pre-filled from the calendar and the rep's own CRM reads (no model, no transcript yet).

For each meeting that ended in ``(at - window, at]`` with an external attendee who is a CRM
contact the rep may see (matched as briefs match them; a hidden account's contact is no match,
so its meeting gets nothing), the deal the meeting was about is the account's open deal whose
name shares the most words with the subject (the only one if there is one; none if it is not
clear). It offers three suggestions, each only ever proposed through its own approval card
(:mod:`copilot.briefs.suggestions`' path: the card's button asks in chat):

* ``log_meeting``: the meeting as an activity regarding the deal (its attendees named);
* ``set_next_step``: the deal's next step, pre-filled to follow up with the attendees;
* ``follow_up_task``: a follow-up task due two working days after the meeting.

The suggestion ledger applies (a suggestion the rep declined at the deal's version is not made
again), and every line cites its records, checked like a brief's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from datetime import date, datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from pydantic import BaseModel, ConfigDict

from copilot.briefs import ledger
from copilot.briefs.calendar import read_meetings
from copilot.briefs.compose import check_citations, plain
from copilot.briefs.evidence import Evidence
from copilot.briefs.matching import domain_of, external_attendees, visible_contacts
from copilot.briefs.service import BriefTokens
from copilot.briefs.types import CitationCheck, Meeting, Suggestion
from copilot.crm import connector
from copilot.identity import RepIdentity
from copilot.settings import Settings

WINDOW_MINUTES = 60
"""How long after a meeting ends its follow-through is still offered."""
TASK_WORKING_DAYS = 2
_WORD = re.compile(r"[a-z0-9]+")
_NOISE = frozenset(
    {"the", "a", "an", "and", "of", "for", "with", "on", "to", "in", "review", "call", "meeting"}
)


class FollowThrough(BaseModel):
    """What to propose after one meeting."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    meeting_id: str
    subject: str
    end: datetime
    account_id: str
    account_name: str
    contacts: tuple[str, ...]
    """The attending contacts' names (matched, visible to the rep)."""
    deal_id: str | None
    deal_name: str = ""
    suggestions: tuple[Suggestion, ...]
    text: str
    citation_check: CitationCheck


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _NOISE and len(w) > 2}


def meeting_deal(subject: str, deals: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The open deal the meeting was about: the only one, else the one whose name shares the most
    words with the subject (None on a tie or no shared word)."""
    if len(deals) == 1:
        return deals[0]
    said = _words(subject)
    scored = sorted(((len(said & _words(str(d.get("name") or ""))), d) for d in deals), key=lambda p: -p[0])
    if not scored or scored[0][0] == 0 or (len(scored) > 1 and scored[1][0] == scored[0][0]):
        return None
    return scored[0][1]


def due_after(day: date, working_days: int = TASK_WORKING_DAYS) -> date:
    """``working_days`` Monday-to-Friday days after ``day``."""
    due = day
    while working_days:
        due += timedelta(days=1)
        working_days -= due.weekday() < 5
    return due


def suggestions_for(
    meeting: Meeting,
    account: Mapping[str, Any],
    contacts: Sequence[Mapping[str, Any]],
    deal: Mapping[str, Any] | None,
) -> tuple[Suggestion, ...]:
    """The three suggestions after ``meeting`` (pure); none without a deal to hang them on, or a
    deal whose version the CRM does not give (it could not be held back)."""
    if deal is None or not isinstance(deal.get("version"), int) or not deal.get("id"):
        return ()
    deal_id, version = str(deal["id"]), int(deal["version"])
    name, subject = plain(deal.get("name")) or deal_id, plain(meeting.subject) or "the meeting"
    people = ", ".join(plain(c.get("name")) for c in contacts) or plain(account.get("name"))
    due = due_after(meeting.end.date())
    cites = tuple(dict.fromkeys([deal_id, str(account["id"]), *(str(c["id"]) for c in contacts)]))
    account_cite = f"[{account['id']}]"
    return (
        Suggestion(
            kind="log_meeting",
            record_id=deal_id,
            record_version=version,
            record_name=name,
            text=f"Log “{subject}” with {people} {account_cite} as a meeting on {name} [{deal_id}]?",
            cited=cites,
            value=subject,
        ),
        Suggestion(
            kind="set_next_step",
            record_id=deal_id,
            record_version=version,
            record_name=name,
            text=f"Set the next step of {name} [{deal_id}] to follow up with {people}?",
            cited=(deal_id,),
            value=f"Follow up with {people} on {subject}",
        ),
        Suggestion(
            kind="follow_up_task",
            record_id=deal_id,
            record_version=version,
            record_name=name,
            text=f"Add a follow-up task on {name} [{deal_id}] due {due:%a %Y-%m-%d}?",
            cited=(deal_id,),
            value=f"Follow up on {subject} (due {due.isoformat()})",
        ),
    )


async def follow_throughs_at(
    settings: Settings,
    identity: RepIdentity,
    tokens: BriefTokens,
    conn: AsyncConnection[Any],
    *,
    at: datetime,
    window_minutes: int = WINDOW_MINUTES,
) -> list[FollowThrough]:
    """The follow-throughs of the rep's customer meetings that ended in ``(at - window, at]``, with
    the suggestions the ledger still offers (recorded as made)."""
    since = at - timedelta(minutes=window_minutes)
    meetings = [
        m
        for m in await read_meetings(settings, tokens, since - timedelta(hours=8), at)
        if since < m.end <= at
    ]
    own_domain = domain_of(identity.username)
    found: list[FollowThrough] = []
    async with AsyncExitStack() as stack:
        evidence = Evidence(connector.reads(stack, settings, tokens))
        addresses = [a.address for m in meetings for a in external_attendees(m, own_domain)]
        directory = await visible_contacts(evidence, addresses) if addresses else {}
        for meeting in meetings:
            keys = [a.address.strip().lower() for a in external_attendees(meeting, own_domain)]
            contacts = [directory[k] for k in keys if k in directory]
            if not contacts:
                continue  # internal, or only contacts the rep may not see: nothing is offered
            account_id = str(contacts[0]["account_id"])
            mine = [c for c in contacts if str(c["account_id"]) == account_id]
            account = await evidence.account(account_id)
            deal = meeting_deal(meeting.subject, await evidence.open_opportunities(account_id=account_id))
            offered = await ledger.offer(conn, identity, suggestions_for(meeting, account, mine, deal))
            lines = [f"How did “{plain(meeting.subject) or 'the meeting'}” go?"] + [s.text for s in offered]
            text = "\n".join(lines)
            found.append(
                FollowThrough(
                    meeting_id=meeting.id,
                    subject=meeting.subject,
                    end=meeting.end,
                    account_id=account_id,
                    account_name=plain(account.get("name")),
                    contacts=tuple(plain(c.get("name")) for c in mine),
                    deal_id=str(deal["id"]) if deal else None,
                    deal_name=plain(deal.get("name")) if deal else "",
                    suggestions=tuple(offered),
                    text=text,
                    citation_check=check_citations(text, evidence.messages),
                )
            )
    return found
