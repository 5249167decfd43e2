"""Reading "since when" for a catch-up (``copilot/insight/since.py``), at a named moment."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from copilot.insight.since import UnreadableSince, read_since

WEDNESDAY = datetime(2026, 12, 9, 15, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("since Friday", datetime(2026, 12, 4, tzinfo=UTC)),
        ("fri", datetime(2026, 12, 4, tzinfo=UTC)),
        ("this week", datetime(2026, 12, 7, tzinfo=UTC)),
        ("last week", datetime(2026, 11, 30, tzinfo=UTC)),
        ("yesterday", datetime(2026, 12, 8, tzinfo=UTC)),
        ("3 days ago", datetime(2026, 12, 6, tzinfo=UTC)),
        ("Wednesday", datetime(2026, 12, 2, tzinfo=UTC)),
        ("2026-12-01", datetime(2026, 12, 1, tzinfo=UTC)),
        ("2026-12-01T10:30:00Z", datetime(2026, 12, 1, 10, 30, tzinfo=UTC)),
    ],
)
def test_words_and_dates_read_as_the_moment_they_name(text: str, expected: datetime):
    assert read_since(text, WEDNESDAY) == expected


@pytest.mark.parametrize("text", [None, "", "since my last check-in", "since my last catch-up", "last visit"])
def test_the_last_catch_up_or_nothing_reads_as_none(text: str | None):
    assert read_since(text, WEDNESDAY) is None


def test_a_named_day_starts_in_the_reps_time_zone():
    pacific = ZoneInfo("America/Los_Angeles")
    assert read_since("this week", WEDNESDAY, pacific) == datetime(2026, 12, 7, 8, 0, tzinfo=UTC)


def test_words_that_name_no_moment_are_refused():
    with pytest.raises(UnreadableSince):
        read_since("whenever", WEDNESDAY)
