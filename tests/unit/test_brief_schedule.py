"""When the copilot may speak first: working hours in the rep's zone, their day, the digest's moment."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta

import pytest

from copilot.briefs.schedule import (
    DIGEST_GRACE,
    RepSchedule,
    Weekday,
    brief_verdict,
    digest_due,
    fallback_schedule,
    iana_name,
    is_working_time,
    local_day,
    schedule_from_mailbox,
)


def _mailbox(
    zone: str, days: Sequence[str], start: str = "08:00:00.0000000", end: str = "17:00:00.0000000"
) -> dict:
    return {
        "timeZone": zone,
        "workingHours": {"daysOfWeek": days, "startTime": start, "endTime": end, "timeZone": {"name": zone}},
    }


WEEK: list[Weekday] = ["monday", "tuesday", "wednesday", "thursday", "friday"]
LA = schedule_from_mailbox(_mailbox("Pacific Standard Time", WEEK), None)
DUBAI = schedule_from_mailbox(
    _mailbox("Arabian Standard Time", ["sunday", "monday", "tuesday", "wednesday", "thursday"]), None
)


def test_windows_zone_names_from_graph_map_to_iana_zones() -> None:
    assert LA.zone == "America/Los_Angeles"
    assert DUBAI.zone == "Asia/Dubai"
    assert iana_name("W. Europe Standard Time") == "Europe/Berlin"
    assert iana_name("Europe/London") == "Europe/London"
    assert iana_name("Not A Zone") is None
    assert iana_name(None) is None


def test_working_hours_are_read_in_the_reps_own_zone() -> None:
    # Thursday 2026-12-03, 16:00 UTC = 08:00 in Los Angeles, 20:00 in Dubai.
    at = datetime(2026, 12, 3, 16, 0, tzinfo=UTC)
    assert brief_verdict(at, LA) == "post"
    assert brief_verdict(at, DUBAI) == "quiet_hours"
    assert brief_verdict(at - timedelta(minutes=1), LA) == "quiet_hours"
    assert is_working_time(datetime(2026, 12, 4, 0, 59, tzinfo=UTC), LA)  # 16:59 LA
    assert not is_working_time(datetime(2026, 12, 4, 1, 0, tzinfo=UTC), LA)  # 17:00 LA


def test_a_weekend_is_the_reps_own_week() -> None:
    friday_noon_dubai = datetime(2026, 12, 4, 8, 0, tzinfo=UTC)
    sunday_noon_dubai = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)
    assert brief_verdict(friday_noon_dubai, DUBAI) == "day_off"
    assert brief_verdict(sunday_noon_dubai, DUBAI) == "post"
    sunday_noon_la = datetime(2026, 12, 6, 20, 0, tzinfo=UTC)
    assert brief_verdict(sunday_noon_la, LA) == "day_off"


def test_the_reps_day_is_their_local_day() -> None:
    late_evening_la = datetime(2026, 12, 4, 6, 0, tzinfo=UTC)  # Thu 22:00 in Los Angeles
    assert local_day(late_evening_la, LA) == date(2026, 12, 3)
    assert local_day(late_evening_la, DUBAI) == date(2026, 12, 4)


def test_the_digest_is_due_at_its_time_on_a_working_day_late_within_the_grace_and_not_after() -> None:
    thursday_0730_la = datetime(2026, 12, 3, 15, 30, tzinfo=UTC)
    assert digest_due(thursday_0730_la - timedelta(minutes=1), LA, time(7, 30)) is None
    assert digest_due(thursday_0730_la, LA, time(7, 30)) == date(2026, 12, 3)
    assert digest_due(thursday_0730_la + DIGEST_GRACE - timedelta(minutes=1), LA, time(7, 30)) == date(
        2026, 12, 3
    )
    assert digest_due(thursday_0730_la + DIGEST_GRACE, LA, time(7, 30)) is None
    # Before working hours counts (the rep chose the time); a day off never does.
    assert digest_due(datetime(2026, 12, 3, 13, 0, tzinfo=UTC), LA, time(5, 0)) == date(2026, 12, 3)
    assert digest_due(datetime(2026, 12, 5, 15, 30, tzinfo=UTC), LA, time(7, 30)) is None  # Saturday


def test_a_late_digest_past_midnight_is_still_the_day_it_was_due() -> None:
    due = datetime(2026, 12, 3, 23, 0, tzinfo=LA.tz)
    assert digest_due(due + timedelta(hours=2), LA, time(23, 0)) == date(2026, 12, 3)


def test_without_mailbox_settings_the_teams_zone_with_monday_to_friday_eight_to_six_holds() -> None:
    fallback = fallback_schedule("Europe/Berlin")
    assert fallback == RepSchedule(
        zone="Europe/Berlin", days=tuple(WEEK), start=time(8), end=time(18), source="fallback"
    )
    assert fallback_schedule(None).zone == "UTC"
    assert brief_verdict(datetime(2026, 12, 3, 16, 30, tzinfo=UTC), fallback) == "post"  # 17:30 Berlin


def test_mailbox_settings_without_working_hours_or_a_known_zone_are_unreadable() -> None:
    with pytest.raises(ValueError, match="no workingHours"):
        schedule_from_mailbox({"timeZone": "UTC"}, None)
    with pytest.raises(ValueError, match="no time zone"):
        schedule_from_mailbox(_mailbox("Nowhere Standard Time", WEEK), None)
    # A zone Graph does not know falls back to the Teams one for the same hours.
    assert schedule_from_mailbox(_mailbox("Nowhere Standard Time", WEEK), "Asia/Tokyo").zone == "Asia/Tokyo"
