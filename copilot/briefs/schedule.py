"""When the copilot may speak first: the rep's working hours, their local day, when the digest is due.

Pure (no I/O). A rep's :class:`RepSchedule` comes from their Outlook mailbox settings
(``workingHours``: days, start and end, in a time zone) or, when those cannot be read, from
the Teams time zone with :data:`FALLBACK_DAYS` :data:`FALLBACK_START`–:data:`FALLBACK_END`.
The rules:

* nothing proactive on a day that is not one of the rep's working days;
* outside working hours (quiet hours) no brief is posted; a brief held by quiet hours goes
  out when working hours start, if its meeting has not started by then (the timer's window
  starts at the moment it runs, so a meeting that has started is no longer in it);
* the digest is due at the rep's digest time on a working day (a digest time before working
  hours counts: the rep chose it), and a run that missed the moment still posts it up to
  :data:`DIGEST_GRACE` later; never twice (the claim is per local day).

Graph may name zones the Windows way (``Pacific Standard Time``); they are mapped to IANA
names with the CLDR table Babel ships (``windows_zone_mapping``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from babel.core import get_global
from pydantic import BaseModel, ConfigDict

Weekday = Literal["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
WEEKDAYS: tuple[Weekday, ...] = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
"""Graph's ``dayOfWeek`` values, in ``date.weekday()`` order."""

ScheduleSource = Literal["mailbox", "fallback"]
"""Where a schedule came from: the rep's mailbox settings, or the fallback (none readable)."""

FALLBACK_DAYS: tuple[Weekday, ...] = WEEKDAYS[:5]
FALLBACK_START = time(8, 0)
FALLBACK_END = time(18, 0)
DIGEST_GRACE = timedelta(hours=3)
"""How late a digest is still posted when the timer missed its moment (a host down, a deploy)."""


class RepSchedule(BaseModel):
    """The rep's working week: which days, from when to when, in which zone (an IANA name)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    zone: str
    days: tuple[Weekday, ...]
    start: time
    end: time
    source: ScheduleSource

    @property
    def tz(self) -> tzinfo:
        """The zone as a ``tzinfo`` (UTC if the name is somehow unknown)."""
        return resolve_zone(self.zone) or UTC


def resolve_zone(name: str | None) -> ZoneInfo | None:
    """An IANA or Windows time zone name as a zone; ``None`` for nothing usable."""
    if not name or not isinstance(name, str):
        return None
    name = name.strip()
    mapped = _windows_zones().get(name, name)
    try:
        return ZoneInfo(mapped)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def zone_name(zone: tzinfo) -> str:
    """A zone as the rep reads it: its IANA name (``America/Los_Angeles``), ``UTC`` for UTC."""
    name = str(getattr(zone, "key", None) or zone)
    return "UTC" if name in ("UTC", "Etc/UTC", "UTC+00:00") else name


def iana_name(name: str | None) -> str | None:
    """The IANA name of an IANA or Windows zone name, if it is a zone."""
    zone = resolve_zone(name)
    return zone.key if zone is not None else None


def _windows_zones() -> Mapping[str, str]:
    mapping: Mapping[str, str] = get_global("windows_zone_mapping")
    return mapping


def fallback_schedule(zone_name: str | None) -> RepSchedule:
    """No mailbox settings readable: the Teams time zone (else UTC), Mon–Fri 08:00–18:00."""
    return RepSchedule(
        zone=iana_name(zone_name) or "UTC",
        days=FALLBACK_DAYS,
        start=FALLBACK_START,
        end=FALLBACK_END,
        source="fallback",
    )


def _clock(value: Any) -> time:
    """A Graph ``timeOfDay`` (``08:00:00.0000000``) as a time."""
    if not isinstance(value, str):
        raise ValueError("not a time of day")
    return time.fromisoformat(value.partition(".")[0])


def schedule_from_mailbox(body: Mapping[str, Any], teams_zone: str | None) -> RepSchedule:
    """A Graph ``mailboxSettings`` resource as the rep's schedule (``ValueError`` if unreadable).

    The working hours' own zone wins, then the mailbox's ``timeZone``, then the Teams one.
    """
    hours = body.get("workingHours")
    if not isinstance(hours, Mapping):
        raise ValueError("no workingHours")
    days = tuple(d for d in WEEKDAYS if d in {str(x).lower() for x in hours.get("daysOfWeek") or []})
    zone_of_hours = hours.get("timeZone")
    zone = (
        iana_name(zone_of_hours.get("name") if isinstance(zone_of_hours, Mapping) else None)
        or iana_name(body.get("timeZone"))
        or iana_name(teams_zone)
    )
    if zone is None:
        raise ValueError("no time zone that is known")
    return RepSchedule(
        zone=zone,
        days=days,
        start=_clock(hours.get("startTime")),
        end=_clock(hours.get("endTime")),
        source="mailbox",
    )


def local_day(at: datetime, schedule: RepSchedule) -> date:
    """The rep's day containing ``at``."""
    return at.astimezone(schedule.tz).date()


def is_working_day(at: datetime, schedule: RepSchedule) -> bool:
    """Whether ``at`` falls on one of the rep's working days (in their zone)."""
    return WEEKDAYS[local_day(at, schedule).weekday()] in schedule.days


def is_working_time(at: datetime, schedule: RepSchedule) -> bool:
    """Whether ``at`` is inside the rep's working hours on a working day (else: quiet hours)."""
    if not is_working_day(at, schedule):
        return False
    clock = at.astimezone(schedule.tz).time().replace(tzinfo=None)
    if schedule.start <= schedule.end:
        return schedule.start <= clock < schedule.end
    # A working day past midnight (e.g. 22:00–06:00): both ends of the local day count.
    return clock >= schedule.start or clock < schedule.end


BriefVerdict = Literal["post", "quiet_hours", "day_off"]


def brief_verdict(at: datetime, schedule: RepSchedule) -> BriefVerdict:
    """Whether the timer may post briefs to the rep at ``at``."""
    if not is_working_day(at, schedule):
        return "day_off"
    return "post" if is_working_time(at, schedule) else "quiet_hours"


def digest_due(at: datetime, schedule: RepSchedule, digest_time: time) -> date | None:
    """The rep's day whose digest is due at ``at`` (its time passed less than
    :data:`DIGEST_GRACE` ago, on a working day); ``None`` if none is."""
    zone = schedule.tz
    day = at.astimezone(zone).date()
    for candidate in (day, day - timedelta(days=1)):  # a grace period may reach past midnight
        moment = datetime.combine(candidate, digest_time, tzinfo=zone)
        if WEEKDAYS[candidate.weekday()] in schedule.days and moment <= at < moment + DIGEST_GRACE:
            return candidate
    return None
