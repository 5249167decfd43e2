"""The changes a brief or the digest suggests, derived from the reads they already make (pure).

A suggestion is a question to the rep ("The close date of … [opp-1] passed 6 days ago: move
it?"), never a write: its button asks the copilot in chat, so the model proposes the change
and the normal approval card follows. Each suggestion cites its record, carries the record's
id and the version as read (the ledger holds a declined one back while that version stands,
``copilot/briefs/ledger.py``), and goes into the brief's or digest's text, so it passes the
same citation check as every other line.

Kinds are the one vocabulary :data:`copilot.briefs.types.SUGGESTION_KINDS`; each names the write it
asks for in :data:`copilot.briefs.types.SUGGESTED_CHANGES`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date, timedelta
from typing import Any

from copilot.briefs.compose import AccountReads
from copilot.briefs.types import Suggestion
from copilot.cited_text import plain

MOVE_BY_DAYS = 14
"""A passed close date is offered moved to this many days after the day (the rep may edit it)."""


def _close(deal: Mapping[str, Any]) -> date | None:
    try:
        return date.fromisoformat(str(deal.get("close_date") or "")[:10])
    except ValueError:
        return None


def close_date_passed(deals: Iterable[Mapping[str, Any]], day: date) -> tuple[Suggestion, ...]:
    """``close_date_passed`` for each open deal (as read) whose close date is before ``day``.

    A deal without an id, a readable close date or an integer version is left out (it could
    not be held back by version, nor proposed against one).
    """
    found: dict[str, Suggestion] = {}
    for deal in deals:
        record_id, version, closes = deal.get("id"), deal.get("version"), _close(deal)
        if not isinstance(record_id, str) or not record_id or closes is None or closes >= day:
            continue
        if not isinstance(version, int) or isinstance(version, bool) or record_id in found:
            continue
        late = (day - closes).days
        name = plain(deal.get("name")) or record_id
        found[record_id] = Suggestion(
            kind="close_date_passed",
            record_id=record_id,
            record_version=version,
            record_name=name,
            text=f"The close date of {name} [{record_id}] passed {late} day{'s' if late != 1 else ''} ago: move it?",
            cited=(record_id,),
            value=(day + timedelta(days=MOVE_BY_DAYS)).isoformat(),
        )
    return tuple(found.values())


def owner_id(deal: Mapping[str, Any]) -> str:
    """The CRM user id of a deal's owner as the CRM returned it ("" if none)."""
    owner = deal.get("owner")
    return str(owner.get("id") or "") if isinstance(owner, Mapping) else ""


def for_brief(accounts: Sequence[AccountReads], me: str, day: date) -> tuple[Suggestion, ...]:
    """A brief's suggestions: over the open deals it lists, only the rep's own (``me``: the rep's
    CRM user id), as a brief lists colleagues' deals of the account too."""
    return close_date_passed((d for r in accounts for d in r.opportunities if owner_id(d) == me), day)


def for_digest(overdue: Sequence[Mapping[str, Any]], day: date) -> tuple[Suggestion, ...]:
    """The digest's suggestions: its overdue deals (the rep's own open deals, close date passed)."""
    return close_date_passed(overdue, day)
