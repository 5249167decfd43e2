"""The moments time-sensitive tests run at: named, never read off the wall clock.

A test about briefs, digests, quiet hours, rotation, retention, the audit seal, delegation
expiry or undo windows sets the service's clock (``CopilotService.clock``) and the sandbox's
seed date (``SANDBOX_SEED_DATE``) from here, together, so it passes on any day of the week
(``tests/test_any_day.py`` replays those files under ``faketime`` to prove it).
"""

from __future__ import annotations

import datetime as dt

SEED_DAY = dt.date(2026, 12, 9)
"""The day the sandbox seeds its calendar and records from in time-sensitive tests: a
Wednesday, so midnight UTC is a working Tuesday afternoon in America/Los_Angeles and a working
Wednesday in Asia/Dubai (a test that needs a working day picks it here, explicitly)."""

SEED_MIDNIGHT = dt.datetime.combine(SEED_DAY, dt.time(), dt.UTC)
"""Midnight (UTC) of :data:`SEED_DAY`: the seeded meetings follow it."""

SEED_MORNING = SEED_MIDNIGHT + dt.timedelta(hours=8)
"""08:00 UTC on :data:`SEED_DAY`, before its first seeded meeting (17:00 UTC)."""

WEDNESDAY_AFTERNOON = SEED_MIDNIGHT + dt.timedelta(hours=15)
"""15:00 UTC on :data:`SEED_DAY`: working hours in Europe and on the US east coast."""


class SteppingClock:
    """A clock a test moves by hand (``clock.now += timedelta(...)``); nothing sleeps."""

    def __init__(self, start: dt.datetime = WEDNESDAY_AFTERNOON) -> None:
        if start.tzinfo is None:
            raise ValueError("a clock reads aware datetimes")
        self.now = start

    def __call__(self) -> dt.datetime:
        return self.now
