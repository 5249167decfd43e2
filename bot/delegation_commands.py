"""The chat commands of approval delegation, parsed from what a rep types (pure; no I/O).

* ``delegate approvals to <name or email> until <date>`` (also "delegate my approvals …")
* ``revoke delegation`` (all of the rep's grants; "revoke delegation to <name or email>": one)
* ``my delegations`` (the card listing who may approve for the rep, and for whom the rep may)

A date is ISO (``2026-12-24``), ``today`` / ``tomorrow``, ``in N days`` / ``in N weeks``, a
month and day in English (``Dec 24``, ``24 December 2026``), or a numeric date in the rep's
own locale (``12/24/2026`` in en-US, ``24.12.2026`` in de-DE). A month and day without a
year is the next such day from today.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass

from babel.dates import parse_date

from bot.dates import rep_locale

DELEGATIONS_COMMANDS: tuple[str, ...] = ("my delegations", "delegations", "show delegations")
"""Messages (lower-cased) answered with the delegation card; the first is the one shown."""
DELEGATE_EXAMPLE = "delegate approvals to megan@contoso.example until 2026-12-24"
REVOKE_COMMAND = "revoke delegation"


@dataclass(frozen=True)
class Delegate:
    """Grant: ``who`` (a name or email, resolved in the directory) may decide until ``until``."""

    who: str
    until: dt.date


@dataclass(frozen=True)
class Revoke:
    """End the rep's live grants: all of them, or only the one to ``who``."""

    who: str | None


@dataclass(frozen=True)
class ShowDelegations:
    """Show the delegation card."""


@dataclass(frozen=True)
class Unparsed:
    """A delegation command whose parts could not be read: ``message`` says how to phrase it."""

    message: str


DelegationCommand = Delegate | Revoke | ShowDelegations | Unparsed

_DELEGATE = re.compile(
    r"^delegate\s+(?:my\s+)?approvals?\s+to\s+(?P<who>.+?)(?:\s+until\s+(?P<until>.+?))?\s*[.!]?$",
    re.IGNORECASE,
)
_REVOKE = re.compile(
    r"^(?:revoke|end|stop|cancel)\s+(?:my\s+)?delegations?(?:\s+(?:to|for)\s+(?P<who>.+?))?\s*[.!]?$",
    re.IGNORECASE,
)
_IN = re.compile(r"^in\s+(\d{1,3})\s+(day|days|week|weeks)$")
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name} | {
    name.lower(): i for i, name in enumerate(calendar.month_abbr) if name
}
_MONTH_DAY = re.compile(r"^(?P<m>[a-z]+)\.?\s+(?P<d>\d{1,2})(?:st|nd|rd|th)?(?:,?\s+(?P<y>\d{4}))?$")
_DAY_MONTH = re.compile(r"^(?P<d>\d{1,2})(?:st|nd|rd|th)?\s+(?P<m>[a-z]+)\.?(?:,?\s+(?P<y>\d{4}))?$")


def parse_delegation_command(
    text: str, *, today: dt.date, locale: str | None = None
) -> DelegationCommand | None:
    """The delegation command ``text`` is, or None if it is not one (it is then a question)."""
    stripped = " ".join(text.strip().split())
    lowered = stripped.lower()
    if lowered in DELEGATIONS_COMMANDS:
        return ShowDelegations()
    if (revoke := _REVOKE.match(stripped)) is not None:
        who = revoke.group("who")
        return Revoke(who.strip() if who else None)
    delegate = _DELEGATE.match(stripped)
    if delegate is None:
        return None
    who = delegate.group("who").strip().strip("<>\"'")
    until_text = delegate.group("until")
    if until_text is None:
        return Unparsed(f'Say until when, for example "{DELEGATE_EXAMPLE}".')
    until = parse_until(until_text, today=today, locale=locale)
    if until is None:
        return Unparsed(
            f"I couldn't read {until_text!r} as a date. Use a date like 2026-12-24, "
            f'"Dec 24" or "in 2 weeks", for example "{DELEGATE_EXAMPLE}".'
        )
    return Delegate(who=who, until=until)


def parse_until(text: str, *, today: dt.date, locale: str | None = None) -> dt.date | None:
    """The day ``text`` names (see the module docstring), or None."""
    value = text.strip().lower().rstrip(".")
    if value == "today":
        return today
    if value == "tomorrow":
        return today + dt.timedelta(days=1)
    if (within := _IN.match(value)) is not None:
        n = int(within.group(1))
        return today + dt.timedelta(days=n * (7 if within.group(2).startswith("week") else 1))
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        pass
    named = _MONTH_DAY.match(value) or _DAY_MONTH.match(value)
    if named is not None and named.group("m") in _MONTHS:
        return _next_day(today, _MONTHS[named.group("m")], int(named.group("d")), named.group("y"))
    if re.fullmatch(r"\d{1,4}[./-]\d{1,2}[./-]\d{1,4}", value):
        try:
            return parse_date(value, locale=rep_locale(locale))
        except (ValueError, IndexError):
            return None
    return None


def _next_day(today: dt.date, month: int, day: int, year: str | None) -> dt.date | None:
    try:
        if year is not None:
            return dt.date(int(year), month, day)
        candidate = dt.date(today.year, month, day)
        return candidate if candidate >= today else dt.date(today.year + 1, month, day)
    except ValueError:
        return None
