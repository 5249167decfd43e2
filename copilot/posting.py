"""The rep's settings for what the copilot posts on its own (meeting prep briefs, the daily
digest), and the port through which the copilot changes them.

The settings live with the chat the posts go to, which only the Teams bot knows: the bot
implements :class:`PostingSettings` over its own table and hands it to the service
(``CopilotService.posting``). The write tool ``change_briefs_and_digest``
(:mod:`copilot.writes.posting`) reads and changes them through it, behind the approval card
like every change. Where no bot is behind the service (the terminal chat), there is no port
and the tool says where to say it. Pure apart from the port.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import time
from typing import Protocol

from copilot.errors import CopilotError
from copilot.identity import RepIdentity

MIN_LEAD_MINUTES = 5
"""The brief timer runs every 5 minutes: a shorter lead time would miss meetings."""
MAX_LEAD_MINUTES = 24 * 60
DEFAULT_DIGEST_TIME = time(7, 30)
"""The rep's local digest time until they set one."""
_CLOCK = re.compile(r"^(\d{1,2})(?:[:.h](\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)?$")


@dataclass(frozen=True)
class Preferences:
    """A rep's settings for what the copilot posts on its own (none stored: all defaults, all off)."""

    enabled: bool = False
    """Meeting prep briefs on."""
    lead_minutes: int | None = None
    """None: the admin's ``COPILOT_BRIEF_LEAD_MINUTES``."""
    digest_enabled: bool = False
    digest_time: time = DEFAULT_DIGEST_TIME
    time_zone: str | None = None
    """The IANA zone Teams last reported for the rep (None: not seen yet)."""


@dataclass(frozen=True)
class PostingChange:
    """The settings to change (None: left as they are)."""

    briefs: bool | None = None
    lead_minutes: int | None = None
    digest: bool | None = None
    digest_time: time | None = None


class PostingUnreachable(CopilotError):
    """No chat is known to post to for this rep (not seen in a 1:1 chat with the bot yet, or no
    bot behind the service); the message is for the rep."""

    code = "posting_unreachable"


NO_CHAT = (
    "Briefs and the digest are posted to your 1:1 chat with me in Teams: say it there and I'll set it up."
)


class PostingSettings(Protocol):
    """Where a rep's posting settings are kept (the Teams bot's table)."""

    async def current(self, identity: RepIdentity) -> Preferences:
        """The rep's settings; :class:`PostingUnreachable` when no chat is known for them."""
        ...

    async def change(self, identity: RepIdentity, change: PostingChange) -> Preferences:
        """Apply ``change``; the settings as stored now. :class:`PostingUnreachable` as above."""
        ...


def parse_clock(text: str) -> time:
    """``8:00``, ``08:00``, ``8am``, ``5:30 pm``, ``17:30`` as a time; ``ValueError`` (its message
    for the rep) when it is not one."""
    match = _CLOCK.match(text.strip().lower())
    if match is None:
        raise ValueError(f'"{text.strip()}" is not a time: say for example 8:00, 8am or 17:30')
    hour, minute = int(match.group(1)), int(match.group(2) or 0)
    half = (match.group(3) or "").replace(".", "")
    if half:
        if not 1 <= hour <= 12:
            raise ValueError(f'"{text.strip()}" is not a time: with am/pm the hour is 1 to 12')
        hour = hour % 12 + (12 if half == "pm" else 0)
    if hour > 23 or minute > 59:
        raise ValueError(f'"{text.strip()}" is not a time of day: hours 0 to 23, minutes 0 to 59')
    return time(hour, minute)


def describe(prefs: Preferences) -> str:
    """The rep's settings in a sentence, as the outcome of a change says them."""
    if prefs.enabled:
        lead = f"{prefs.lead_minutes} minutes " if prefs.lead_minutes else ""
        briefs = (
            f"Meeting prep briefs are on, {lead}before each meeting with a CRM contact you can see "
            "(in your working hours)"
        )
    else:
        briefs = "Meeting prep briefs are off"
    if prefs.digest_enabled:
        zone = prefs.time_zone or "your time zone"
        digest = f"the daily digest is on, every working day at {prefs.digest_time:%H:%M} ({zone})"
    else:
        digest = "the daily digest is off"
    return f"{briefs}; {digest}."
