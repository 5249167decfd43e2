"""Dates and ages as a rep reads them, in the rep's own locale (pure; no I/O).

Teams sends the client's locale on every activity (``activity.locale``, e.g. ``de-DE``);
cards format dates with it through Babel (the CLDR data every platform uses), and fall
back to ``en-US`` for a missing or unknown locale rather than failing the card.
"""

from __future__ import annotations

import datetime as dt
import re
from functools import lru_cache

from babel import Locale, UnknownLocaleError
from babel.dates import format_date, format_datetime, format_timedelta

from copilot.briefs.schedule import zone_name

DEFAULT_LOCALE = "en-US"

_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ISO_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


@lru_cache(maxsize=64)
def rep_locale(tag: str | None) -> Locale:
    """The Babel locale for a Teams locale tag (``en-US``, ``de-de``, ``fr``); en-US if unknown."""
    if tag:
        try:
            return Locale.parse(tag.strip(), sep="-" if "-" in tag else "_")
        except (UnknownLocaleError, ValueError, TypeError):
            pass
    return Locale.parse(DEFAULT_LOCALE, sep="-")


def as_date(value: object) -> dt.date | dt.datetime | None:
    """``value`` as a date or a (timezone-aware) datetime, if it is one or an ISO string of one."""
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, dt.date):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        if _ISO_DATE.match(text):
            return dt.date.fromisoformat(text)
        if _ISO_DATETIME.match(text):
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    except ValueError:
        return None
    return None


def format_when(value: dt.date | dt.datetime, locale: str | None, zone: dt.tzinfo | None = None) -> str:
    """A date (``Dec 31, 2026`` / ``31.12.2026``) or a date and time, in the rep's locale.

    A time is shown in the rep's ``zone`` (their mailbox settings', else Teams'), and names it;
    with no zone known, in UTC, and says so.
    """
    loc = rep_locale(locale)
    if isinstance(value, dt.datetime):
        tz = zone or dt.UTC
        return f"{format_datetime(value.astimezone(tz), 'medium', tzinfo=tz, locale=loc)} {zone_name(tz)}"
    return format_date(value, "medium", locale=loc)


def format_age(then: dt.datetime, now: dt.datetime, locale: str | None) -> str:
    """How long ago ``then`` was (``5 minutes ago``, ``vor 2 Stunden``), in the rep's locale."""
    delta = max(now - then, dt.timedelta(0))
    if delta < dt.timedelta(minutes=1):
        delta = dt.timedelta(minutes=1)  # "0 seconds ago" reads as a glitch
    return format_timedelta(-delta, granularity="minute", add_direction=True, locale=rep_locale(locale))
