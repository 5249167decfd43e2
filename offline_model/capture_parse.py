"""Capture from dictation: a described call or meeting ending in "log it", and "remind me to …".

Two shapes of message, told apart by their grammar, not by a list of sentences:

* **Dictation**: what happened, in the rep's words, ended by a command to keep it ("… wants a
  proposal by the 15th. log it", "… capture this"). It becomes the activity (a call or meeting,
  as the words say), naming the people the rep named and the deal the words name, with the
  rep's words as its notes. A promise with a date in it ("a proposal by the 15th") becomes a
  follow-up task due that day, proposed beside it: two proposals, each decided on its own.
* **Reminder**: "remind me to <do something> <when>" becomes one task due that day, regarding
  the person it names (their contact and their account).

Dates are read by the one date reader (:func:`offline_model.text.find_dates`), forward from
the rep's today. People are the capitalised names the rep wrote; the account is a name after
"at" / "from", else the account of the person found among the rep's contacts.

This module is the parsing (pure); :mod:`offline_model.capture` plans the proposals.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass

from offline_model.text import Span, find_activity_type, find_dates, find_period, mask, name_runs

# "… . log it", "…, capture this please": a keep-verb and a pronoun closing the message.
_KEEP_COMMAND = re.compile(
    r"(?:^|[\s.,;:!\-—–]+)(?:(?:please|pls|can you|could you)\s+)?(?:log|capture|record|save|note)\s+"
    r"(?:it|that|this|all that|this one)(?:\s+(?:down|for me|please|in the crm|in crm))*\s*[.!]*\s*$",
    re.I,
)
_REMINDER = re.compile(
    r"^\s*(?:(?:please|pls|can you|could you)\s+)?remind\s+me\s+(?:to\s+)?(?P<what>.+)$", re.I
)
# A promise with a deadline: the date phrase follows one of these words.
_DEADLINE_WORD = re.compile(r"\b(?:by|before|until|due|no later than|for)\s*$", re.I)
_CLAUSE_BREAK = re.compile(r"\s[-–—]\s|[.;!?]\s|,\s|\s(?:and|but)\s")
_HEADER_BREAK = re.compile(r"\s[-–—]\s|[—–:;]|[.!?](?:\s|$)|,\s")
_ACCOUNT_PREPOSITIONS = frozenset({"at", "from"})


@dataclass(frozen=True)
class FollowUp:
    """A task the rep's words promise, due on a date ("wants a proposal by the 15th")."""

    what: str
    """The clause that promises it, in the rep's words."""
    due: dt.date


@dataclass(frozen=True)
class CaptureSpec:
    """A dictated activity (and the follow-up it promises), or a reminder."""

    type: str
    """The activity's type: a call or meeting as the words say (a task for a reminder)."""
    notes: str
    """What the rep said, without the command."""
    summary: str
    """The first thing said about it: the subject's tail."""
    people: tuple[str, ...]
    """The names of people the rep wrote ("Sarah Chen", "Maria")."""
    account: str | None
    """An account named after "at" / "from" ("… Sarah Chen at Initech")."""
    follow_up: FollowUp | None
    reminder: bool
    """A "remind me to …": only the task is proposed (``follow_up`` holds it)."""
    occurred_on: dt.date | None
    """When a dictated activity happened, when the rep said (a past day)."""
    match_text: str
    """The message with names and dates blanked: the words that may name a deal."""


def _sentence(text: str) -> str:
    text = re.sub(r"\s{2,}", " ", text).strip(" ,;:.-—–")
    return text[:1].upper() + text[1:] if text else text


_CALENDAR_WORDS = frozenset(
    w.lower()
    for w in (*calendar.month_name[1:], *calendar.month_abbr[1:], *calendar.day_name, *calendar.day_abbr)
)
"""Month and weekday names: capitalised, and never a person."""


def _names(text: str, today: dt.date) -> tuple[list[str], str | None, list[Span]]:
    """The people and the account (after "at"/"from") the text names, and where the names are.

    A name is a run of capitalised words the sentence does not capitalise by itself.
    """
    people: list[str] = []
    account: str | None = None
    spans: list[Span] = []
    # Dates and periods first: "next Tuesday" is a day and "in January" a month, not people.
    period = find_period(text, today)
    text = mask(text, find_dates(text, today) + ([period[1]] if period else []))
    for run in name_runs(text):
        if not run.capitalised or not run.firm:
            continue
        words = run.text.split()
        # Within a run ("call Maria"), the name is the capitalised words.
        start = next((i for i, w in enumerate(words) if w[:1].isupper()), None)
        if start is None:
            continue
        proper: list[str] = []
        for word in words[start:]:
            # A person's name is title case: "Sarah", not "SOW" (an acronym) nor "fleet".
            if not (word[:1].isupper() and any(ch.islower() for ch in word[1:])):
                break
            if word.lower().strip(".,") in _CALENDAR_WORDS:
                break  # "starts in January", "on Friday": a time, however it was masked
            proper.append(word)
        if not proper:
            continue
        name = " ".join(proper)
        offset = text.find(name, run.start)
        if offset >= 0:
            spans.append(Span(name, offset, offset + len(name)))
        if run.after in _ACCOUNT_PREPOSITIONS and start == 0 and account is None:
            account = name
        elif name not in people:
            people.append(name)
    return people, account, spans


def _follow_up(text: str, today: dt.date) -> FollowUp | None:
    """The first clause with a deadline in it ("wants a proposal by the 15th"), if any."""
    for span in find_dates(text, today):
        if not isinstance(span.value, dt.date) or span.value < today:
            continue
        if not _DEADLINE_WORD.search(text[: span.start]):
            continue
        before = [m.end() for m in _CLAUSE_BREAK.finditer(text[: span.start])]
        start = before[-1] if before else 0
        after = _CLAUSE_BREAK.search(text, span.end)
        end = after.start() if after else len(text)
        return FollowUp(_sentence(text[start:end]), span.value)
    return None


def _reminder(what: str, today: dt.date) -> tuple[str, dt.date | None]:
    """A reminder's task ("call Maria") and its day ("tomorrow"): the first date in it."""
    dates = [s for s in find_dates(what, today) if isinstance(s.value, dt.date)]
    if not dates:
        return _sentence(what), None
    first = dates[0]
    rest = (what[: first.start] + what[first.end :]).strip()
    rest = re.sub(r"\s+(?:on|by|at|before|until)\s*$", "", rest, flags=re.I)
    assert isinstance(first.value, dt.date)
    return _sentence(rest), first.value


def parse_capture(text: str, today: dt.date) -> CaptureSpec | None:
    """A dictated activity or a reminder in ``text`` (``today``: the rep's day); None if neither."""
    reminder = _REMINDER.match(text)
    if reminder is not None:
        what, due = _reminder(reminder.group("what"), today)
        if due is None or not what:
            return None  # a reminder with no day is not one the CRM can keep: read as anything else
        # Names as the rep typed them (the task's first word is capitalised only in its subject).
        people, account, spans = _names(reminder.group("what"), today)
        return CaptureSpec(
            type="task",
            notes=_sentence(text),
            summary=what,
            people=tuple(people),
            account=account,
            follow_up=FollowUp(what, due),
            reminder=True,
            occurred_on=None,
            match_text=mask(reminder.group("what"), spans),
        )
    command = _KEEP_COMMAND.search(text)
    if command is None or command.start() == 0:
        return None
    body = text[: command.start()].strip()
    kind = find_activity_type(body)
    if kind is None or kind == "task":
        # Dictation describes something that happened; a to-do is said as a reminder.
        kind = "call" if kind is None else kind
    header_end = _HEADER_BREAK.search(body)
    header = body[: header_end.start()] if header_end else body
    details = body[header_end.end() :] if header_end else ""
    people, account, spans = _names(body, today)
    dates = find_dates(header, today, past=True)
    occurred = dates[0].value if dates and isinstance(dates[0].value, dt.date) else None
    first = _CLAUSE_BREAK.split(details, maxsplit=1)[0] if details else ""
    date_spans = find_dates(body, today)
    return CaptureSpec(
        type=kind,
        notes=_sentence(body),
        summary=first.strip(" .,;:-—–"),
        people=tuple(people),
        account=account,
        follow_up=_follow_up(details or body, today),
        reminder=False,
        occurred_on=occurred if occurred is not None and occurred < today else None,
        match_text=mask(body, spans + date_spans),
    )


def named_people(text: str, today: dt.date) -> list[str]:
    """The title-case names ``text`` writes (people, or an account's or deal's name: the caller
    keeps those that are contacts)."""
    people, account, _ = _names(text, today)
    return people + ([account] if account else [])


def follow_up_of(text: str, today: dt.date) -> FollowUp | None:
    """The first clause with a deadline ("due Dec 11", "by the 15th") and its day, if any."""
    return _follow_up(text, today)
