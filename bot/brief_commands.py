"""The rep's commands for what the copilot posts on its own, parsed (pure, no I/O).

``brief on|off``, ``brief <N>`` / ``brief <N> minutes before`` (the rep's own lead time),
``brief me`` (a brief of the next customer meeting, now), ``digest on|off``, ``digest at 8:00``
(also ``08:00``, ``8am``, ``5:30 pm``, ``17:30``) and ``digest me`` (today's digest, now).
:func:`parse_brief_command` returns ``None`` for anything else (a question for the copilot) and
raises :class:`BadBriefCommand` for a command it recognises with a value it cannot use
(``digest at 25:00``, ``brief 0``), so the rep learns why rather than getting an answer to a
question they did not ask.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import time

from copilot.errors import CopilotError

MIN_LEAD_MINUTES = 5
"""The brief timer runs every 5 minutes: a shorter lead time would miss meetings."""
MAX_LEAD_MINUTES = 24 * 60


class BadBriefCommand(CopilotError):
    """A brief/digest command with a value that cannot be used; the message is for the rep."""

    code = "bad_brief_command"


@dataclass(frozen=True)
class BriefToggle:
    """``brief on`` / ``brief off``."""

    enabled: bool


@dataclass(frozen=True)
class BriefLead:
    """``brief 30`` / ``brief 30 minutes before``: the rep's lead time (turns briefs on)."""

    minutes: int


@dataclass(frozen=True)
class BriefMe:
    """``brief me``: a brief of the rep's next customer meeting, now."""


@dataclass(frozen=True)
class DigestToggle:
    """``digest on`` / ``digest off``."""

    enabled: bool


@dataclass(frozen=True)
class DigestAt:
    """``digest at 8:00``: the rep's local digest time (turns the digest on)."""

    at: time


@dataclass(frozen=True)
class DigestMe:
    """``digest me``: today's digest, now."""


BriefCommand = BriefToggle | BriefLead | BriefMe | DigestToggle | DigestAt | DigestMe

_FIXED: dict[str, BriefCommand] = {
    "brief on": BriefToggle(True),
    "brief off": BriefToggle(False),
    "brief me": BriefMe(),
    "digest on": DigestToggle(True),
    "digest off": DigestToggle(False),
    "digest me": DigestMe(),
}
_LEAD = re.compile(r"^brief\s+(-?\d+)(?:\s*(?:min|mins|minutes?))?(?:\s+before)?$")
_DIGEST_AT = re.compile(r"^digest\s+at\s+(.+)$")
_CLOCK = re.compile(r"^(\d{1,2})(?:[:.h](\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)?$")


def parse_clock(text: str) -> time:
    """``8:00``, ``08:00``, ``8am``, ``5:30 pm``, ``17:30`` as a time; :class:`BadBriefCommand` if not one."""
    match = _CLOCK.match(text.strip().lower())
    if match is None:
        raise BadBriefCommand(
            f'I can\'t read "{text.strip()}" as a time: say for example "digest at 8:00", '
            '"digest at 8am" or "digest at 17:30".'
        )
    hour, minute = int(match.group(1)), int(match.group(2) or 0)
    half = (match.group(3) or "").replace(".", "")
    if half:
        if not 1 <= hour <= 12:
            raise BadBriefCommand(f'"{text.strip()}" is not a time: with am/pm the hour is 1 to 12.')
        hour = hour % 12 + (12 if half == "pm" else 0)
    if hour > 23 or minute > 59:
        raise BadBriefCommand(
            f'"{text.strip()}" is not a time of day: hours go from 0 to 23 and minutes from 0 to 59.'
        )
    return time(hour, minute)


def parse_brief_command(text: str) -> BriefCommand | None:
    """The brief/digest command ``text`` is (case and spacing ignored), else ``None``."""
    said = " ".join(text.strip().lower().split()).rstrip(".!")
    if (fixed := _FIXED.get(said)) is not None:
        return fixed
    if (lead := _LEAD.match(said)) is not None:
        minutes = int(lead.group(1))
        if not MIN_LEAD_MINUTES <= minutes <= MAX_LEAD_MINUTES:
            raise BadBriefCommand(
                f"A brief can come {MIN_LEAD_MINUTES} to {MAX_LEAD_MINUTES} minutes before a meeting "
                f'(you said {minutes}): say for example "brief 30 minutes before".'
            )
        return BriefLead(minutes)
    if (at := _DIGEST_AT.match(said)) is not None:
        return DigestAt(parse_clock(at.group(1)))
    return None
