"""What time it is for the copilot: one clock, given to whatever needs "now".

Product code never reads the wall clock where the service's clock is meant: briefs, digests,
quiet hours, rotation, retention, the audit seal, delegation expiry and undo windows all take
the clock (or the moment) they are given, so a test can name the moment it runs at and a
suite passes on any day of the week. Only the edges (a timer trigger, the CLI, the dev
server) start from :func:`system_clock`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

Clock = Callable[[], dt.datetime]
"""A source of aware UTC datetimes."""


def system_clock() -> dt.datetime:
    """The wall clock, in UTC (the default a service starts with)."""
    return dt.datetime.now(dt.UTC)


def fixed_clock(moment: dt.datetime) -> Clock:
    """A clock that always reads ``moment`` (aware; for replaying a day)."""
    if moment.tzinfo is None:
        raise ValueError("a fixed clock needs an aware datetime")
    return lambda: moment
