"""Reading "since when" as a moment: an ISO date or date-time, or the words reps use ("Friday",
"this week", "last week", "yesterday", "3 days ago", "since my last check-in"), resolved
against the rep's today (pure; no I/O).

A phrase that names the rep's last catch-up (or nothing at all) reads as None: the caller then
uses the stored last catch-up, else its default window.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta, tzinfo

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_LAST_CATCH_UP = re.compile(r"\b(last|previous)\s+(catch[- ]?up|check[- ]?in|visit|look|login|time)\b", re.I)
_AGO = re.compile(r"\b(\d{1,3}|a|one|two|three|four|five|six|seven)\s+(day|week)s?\s+ago\b", re.I)
_NUMBERS = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}


class UnreadableSince(ValueError):
    """The text names no moment this reader knows."""


def _start(day: date, zone: tzinfo) -> datetime:
    return datetime.combine(day, time(0, 0), tzinfo=zone).astimezone(UTC)


def read_since(text: str | None, now: datetime, zone: tzinfo = UTC) -> datetime | None:
    """The moment ``text`` names (the start of a named day, in ``zone``), None for "since my last
    catch-up" or nothing; :class:`UnreadableSince` otherwise."""
    if text is None or not text.strip() or _LAST_CATCH_UP.search(text):
        return None
    words = text.strip().lower().removeprefix("since").strip()
    try:
        moment = datetime.fromisoformat(words.upper().replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is not None:
        if len(words) == 10:
            return _start(moment.date(), zone)
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    today = now.astimezone(zone).date()
    if re.search(r"\btoday\b", words):
        return _start(today, zone)
    if re.search(r"\byesterday\b", words):
        return _start(today - timedelta(days=1), zone)
    monday = today - timedelta(days=today.weekday())
    if re.search(r"\b(this|the)\s+week\b", words):
        return _start(monday, zone)
    if re.search(r"\b(last|previous|past)\s+week\b", words):
        return _start(monday - timedelta(days=7), zone)
    if re.search(r"\b(this|the)\s+month\b", words):
        return _start(today.replace(day=1), zone)
    ago = _AGO.search(words)
    if ago:
        count = _NUMBERS.get(ago.group(1)) or int(ago.group(1))
        days = count * (7 if ago.group(2) == "week" else 1)
        return _start(today - timedelta(days=days), zone)
    for index, name in enumerate(WEEKDAYS):
        if re.search(rf"\b{name[:3]}({name[3:]})?\b", words):
            back = (today.weekday() - index) % 7 or 7  # the latest such day before today
            return _start(today - timedelta(days=back), zone)
    raise UnreadableSince(
        f"cannot read {text!r} as a date: use a date (YYYY-MM-DD) or e.g. 'Friday', 'this week'"
    )
