"""The typed vocabulary of meeting prep briefs (one definition, imported by every module)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from copilot.cited_text import CitationCheck

AttendeeType = Literal["required", "optional", "resource"]
Section = Literal["account", "attendee", "deal", "activity", "next_step", "playbook"]
SECTIONS: tuple[Section, ...] = ("account", "attendee", "deal", "activity", "next_step", "playbook")
SECTION_TITLES: dict[Section, str] = {
    "account": "Account",
    "attendee": "Attendees",
    "deal": "Open deals",
    "activity": "Last activities",
    "next_step": "Open next steps",
    "playbook": "Playbook",
}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Attendee(_Frozen):
    """One attendee of a calendar event, as Graph gives it."""

    name: str = ""
    address: str
    type: AttendeeType = "required"


class Meeting(_Frozen):
    """One event of the rep's calendar (Graph ``event``), times in UTC."""

    id: str
    subject: str
    start: datetime
    end: datetime
    is_online: bool = False
    organizer: Attendee | None = None
    attendees: tuple[Attendee, ...] = ()


class BriefItem(_Frozen):
    """One fact of a brief: its text (with its ``[id]`` citations) and the ids it cites."""

    section: Section
    text: str
    cited: tuple[str, ...] = Field(min_length=1)


class AccountBrief(_Frozen):
    """What a brief says about one account whose contacts attend the meeting."""

    account_id: str
    name: str
    items: tuple[BriefItem, ...]


# --- suggestions ----------------------------------------------------------------------------------

SuggestionKind = Literal["close_date_passed", "log_meeting", "set_next_step", "follow_up_task"]
SUGGESTION_KINDS: tuple[SuggestionKind, ...] = (
    "close_date_passed",
    "log_meeting",
    "set_next_step",
    "follow_up_task",
)
"""What a brief or the digest may suggest changing (``copilot/briefs/suggestions.py`` derives them)."""

SuggestionState = Literal["made", "declined", "accepted"]
SUGGESTION_STATES: tuple[SuggestionState, ...] = ("made", "declined", "accepted")
"""A suggestion's standing in the ledger (``copilot/briefs/ledger.py``): shown, declined, accepted."""
SuggestionDecision = Literal["declined", "accepted"]
"""What the rep made of a suggestion ("Not now" or a rejected proposal; an approved or edited one)."""


class SuggestedChange(_Frozen):
    """The write a suggestion kind asks for: which tool, which argument names the record, which field."""

    tool: str
    record_arg: str
    field: str


SUGGESTED_CHANGES: dict[SuggestionKind, SuggestedChange] = {
    "close_date_passed": SuggestedChange(
        tool="update_opportunity", record_arg="opportunity_id", field="close_date"
    ),
    # After a meeting (copilot/followthrough.py): the meeting logged, the next step, a follow-up task.
    "log_meeting": SuggestedChange(tool="log_activity", record_arg="opportunity_id", field="subject"),
    "set_next_step": SuggestedChange(
        tool="update_opportunity", record_arg="opportunity_id", field="next_step"
    ),
    "follow_up_task": SuggestedChange(tool="log_activity", record_arg="opportunity_id", field="subject"),
}


class Suggestion(_Frozen):
    """A change a brief or the digest suggests: only ever proposed through the approval card.

    ``record_version`` is the record's version as this run read it: a declined suggestion is
    held back while the record keeps that version (until the record changes).
    """

    kind: SuggestionKind
    record_id: str
    record_version: int
    record_name: str
    text: str
    """The question, citing its record as ``[id]`` ("The close date of … [opp-1] passed 6 days ago: move it?")."""
    cited: tuple[str, ...] = Field(min_length=1)
    value: str
    """The value the suggestion offers for its kind's field (the rep may edit it on the card)."""
    contacts: tuple[str, ...] = ()
    """The people it names, as the CRM names them (a logged meeting's attendees)."""
    due: date | None = None
    """A suggested task's due date."""


class Brief(_Frozen):
    """A meeting prep brief: the meeting, an account section per visible CRM account, the text."""

    meeting_id: str
    subject: str
    start: datetime
    end: datetime
    is_online: bool
    time_zone: str = "UTC"
    """The zone its times are shown in (the rep's, or UTC when none is known)."""
    accounts: tuple[AccountBrief, ...]
    other_external_attendees: int
    """External attendees who are no CRM contact the rep may see (neither named nor counted by
    account: a hidden account's contact is just one of these)."""
    text: str
    citations: tuple[str, ...]
    citation_check: CitationCheck
    suggestions: tuple[Suggestion, ...] = ()
    """The changes this brief suggests, less those the rep declined at the record's version read."""


class BriefRun(_Frozen):
    """What the timer would post at ``at``: the briefs of meetings starting within the lead time."""

    rep: str
    at: datetime
    time_zone: str = "UTC"
    """The zone the run's times are shown in (the rep's, or UTC when none is known)."""
    lead_minutes: int
    meetings_in_window: int
    briefs: tuple[Brief, ...]
    meetings_without_brief: int
    """Meetings in the window with no CRM contact the rep may see (internal ones, hidden accounts)."""


# --- the daily digest ----------------------------------------------------------------------------

DigestSection = Literal["meeting", "closing_quiet", "overdue", "at_risk", "waiting"]
DIGEST_SECTIONS: tuple[DigestSection, ...] = ("meeting", "closing_quiet", "overdue", "at_risk", "waiting")
DIGEST_TITLES: dict[DigestSection, str] = {
    "meeting": "Today's customer meetings",
    "closing_quiet": "Closing within 14 days, no activity in 14 days",
    "overdue": "Overdue next steps (task due date or close date passed)",
    "at_risk": "Deals at risk (close date pushed, stalled in stage, amount lowered)",
    "waiting": "Proposals still waiting for your decision",
}


class DigestItem(_Frozen):
    """One line of a digest: its text (with its ``[id]`` citations) and the ids it cites (none
    only for a waiting proposal whose record the rep cannot read now)."""

    section: DigestSection
    text: str
    cited: tuple[str, ...] = ()


class Digest(_Frozen):
    """The daily digest of a rep for one day of theirs, as it stood at ``at``."""

    rep: str
    at: datetime
    day: date
    time_zone: str
    """The zone the rep's day is taken in (the rep's, or UTC when none is known)."""
    items: tuple[DigestItem, ...]
    meetings_today: int
    meetings_without_customer: int
    """Meetings of the day with no CRM contact the rep may see (internal ones, hidden accounts)."""
    snoozed: int = 0
    """Lines left out because the rep snoozed their record."""
    text: str
    citations: tuple[str, ...]
    citation_check: CitationCheck
    suggestions: tuple[Suggestion, ...] = ()
    """The changes this digest suggests, less those the rep declined at the record's version read."""
