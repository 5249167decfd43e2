"""Composing a brief from its reads (pure: no I/O, no model).

A brief is a deterministic summary of what the CRM and the knowledge store returned to the
rep, so it cannot say anything they did not: each fact is one :class:`BriefItem` that cites
the record it came from as ``[id]``, exactly as answers cite, and the whole text then passes
the answers' citation check against the run's reads.

The brief is shown to the rep, never sent to a model, so nothing in it is redacted; but it
carries no email address or phone number at all (attendees appear by name and title), so a
brief handed to a model later would need no masking either.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

from langchain_core.messages import BaseMessage

from copilot.briefs.schedule import zone_name
from copilot.briefs.types import (
    SECTION_TITLES,
    SECTIONS,
    AccountBrief,
    Brief,
    BriefItem,
    Meeting,
    Section,
    Suggestion,
)
from copilot.citations import cited_ids
from copilot.cited_text import amount_text, check_citations, plain, with_citations

MAX_ACTIVITIES = 3
MAX_PLAYBOOK_CHARS = 280
_BULLET = re.compile(r"\s+[-*]\s+")
SUGGESTIONS_TITLE = "Suggestions"


@dataclass(frozen=True)
class AccountReads:
    """What was read for one account of a meeting (CRM answers and knowledge chunks, as returned)."""

    account: Mapping[str, Any]
    contacts: Sequence[Mapping[str, Any]]
    opportunities: Sequence[Mapping[str, Any]]
    activities: Sequence[Mapping[str, Any]]
    playbooks: Mapping[str, Mapping[str, Any]]
    """Stage → the chunk (``id``, ``title``, ``section``, ``snippet``) that advises on it."""
    risks: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Deal id → why it is at risk (:mod:`copilot.insight.risk`), for the deals that are."""


def _advice(snippet: Any) -> str:
    """A playbook snippet as one line: its Markdown bullets joined with "; ", a cut-off end marked."""
    parts = [p.strip() for p in _BULLET.split(" " + plain(snippet)) if p.strip()]
    text = ""
    for part in parts:
        text += part if not text else (" " if text[-1] in ".!?;:" else "; ") + part
    return text if not text or text[-1] in ".!?…" else text + " …"


def _item(section: Section, text: str, *ids: str) -> BriefItem:
    cited, cites = with_citations(text, *ids)
    return BriefItem(section=section, text=cited, cited=cites)


def account_items(reads: AccountReads) -> tuple[BriefItem, ...]:
    """The facts of one account's section, in the order of :data:`SECTIONS`."""
    account = reads.account
    items: list[BriefItem] = []
    details = ", ".join(plain(account.get(k)) for k in ("industry", "city") if account.get(k))
    items.append(
        _item("account", plain(account.get("name")) + (f" ({details})" if details else ""), account["id"])
    )
    for contact in reads.contacts:
        title = plain(contact.get("title"))
        items.append(
            _item("attendee", plain(contact.get("name")) + (f", {title}" if title else ""), contact["id"])
        )
    for deal in reads.opportunities:
        parts = [plain(deal.get("stage")), amount_text(deal), f"closes {plain(deal.get('close_date'))[:10]}"]
        items.append(
            _item("deal", f"{plain(deal.get('name'))}: " + ", ".join(p for p in parts if p), deal["id"])
        )
        reasons = reads.risks.get(str(deal["id"]))
        if reasons:
            items.append(
                _item(
                    "deal",
                    f"{plain(deal.get('name'))} is at risk: " + "; ".join(map(plain, reasons)),
                    deal["id"],
                )
            )
    for activity in list(reads.activities)[:MAX_ACTIVITIES]:
        when = plain(activity.get("occurred_at"))[:10]
        people = [
            plain(p.get("name"))
            for p in activity.get("contacts") or []
            if isinstance(p, Mapping) and p.get("name")
        ]
        extra = f" with {', '.join(people)}" if people else ""
        if activity.get("due_date"):
            extra += f" (due {plain(activity.get('due_date'))[:10]})"
        items.append(
            _item(
                "activity",
                f"{when} {plain(activity.get('type'))}: {plain(activity.get('subject'))}{extra}",
                activity["id"],
            )
        )
    for deal in reads.opportunities:
        step = plain(deal.get("next_step"))
        if step:
            items.append(_item("next_step", f"{step} ({plain(deal.get('name'))})", deal["id"]))
    for stage, chunk in reads.playbooks.items():
        advice = _advice(chunk.get("snippet"))
        if len(advice) > MAX_PLAYBOOK_CHARS:
            advice = advice[: MAX_PLAYBOOK_CHARS - 1].rstrip() + "…"
        items.append(_item("playbook", f"{stage}: {advice}", str(chunk["id"])))
    return tuple(items)


def render(
    meeting: Meeting, accounts: Sequence[AccountBrief], other_external: int, zone: tzinfo = UTC
) -> str:
    """The brief as text: the meeting (its times in the rep's ``zone``), then each account's
    sections (an empty one says so)."""
    start, end = meeting.start.astimezone(zone), meeting.end.astimezone(zone)
    when = f"{start:%a %Y-%m-%d %H:%M}–{end:%H:%M} {zone_name(zone)}"
    lines = [
        f"Meeting: {plain(meeting.subject) or '(no subject)'} — {when}{' (online)' if meeting.is_online else ''}"
    ]
    for account in accounts:
        for section in SECTIONS:
            facts = [i.text for i in account.items if i.section == section]
            if section == "account":
                lines.append(f"Account: {facts[0] if facts else account.name}")
                continue
            if not facts:
                lines.append(f"  {SECTION_TITLES[section]}: none")
                continue
            lines.append(f"  {SECTION_TITLES[section]}:")
            lines.extend(f"    - {fact}" for fact in facts)
    if other_external:
        noun = "attendee is" if other_external == 1 else "attendees are"
        lines.append(f"  ({other_external} other external {noun} not a CRM contact you can see.)")
    return "\n".join(lines)


def suggestion_lines(suggestions: Sequence[Suggestion], indent: str = "") -> list[str]:
    """Suggestions as text lines under their heading (none: no lines at all, not "none")."""
    if not suggestions:
        return []
    return [f"{indent}{SUGGESTIONS_TITLE}:", *(f"{indent}  - {s.text}" for s in suggestions)]


def compose_brief(
    meeting: Meeting,
    accounts: Sequence[AccountReads],
    other_external: int,
    reads: Sequence[BaseMessage],
    suggestions: Sequence[Suggestion] = (),
    zone: tzinfo = UTC,
) -> Brief:
    """A brief for ``meeting`` from the reads of its accounts (at least one), with the
    suggestions to make (already less the held-back ones), which its text ends with; its
    times are shown in the rep's ``zone``."""
    sections = tuple(
        AccountBrief(
            account_id=str(r.account["id"]), name=plain(r.account.get("name")), items=account_items(r)
        )
        for r in accounts
    )
    text = "\n".join([render(meeting, sections, other_external, zone), *suggestion_lines(suggestions)])
    return Brief(
        meeting_id=meeting.id,
        subject=meeting.subject,
        start=meeting.start,
        end=meeting.end,
        is_online=meeting.is_online,
        time_zone=zone_name(zone),
        accounts=sections,
        other_external_attendees=other_external,
        text=text,
        citations=tuple(cited_ids(text)),
        citation_check=check_citations(text, reads),
        suggestions=tuple(suggestions),
    )


def starts_within(meeting: Meeting, at: datetime, until: datetime) -> bool:
    """Whether the meeting starts in ``[at, until)`` (what the timer posts a brief for)."""
    return at <= meeting.start < until
