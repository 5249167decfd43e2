"""Brief and digest settings said in the rep's words (pure): the offline model finds a setting
by its title in the settings tool's schema and a value of its type (``offline_model/
settings_write.py``); the tool's arguments accept what is a setting and refuse, saying why,
what is not (``copilot/tools/schemas.py`` ``ChangeBriefsAndDigestArgs``,
``copilot/posting.py``)."""

from __future__ import annotations

from datetime import time
from typing import Any

import pytest
from pydantic import ValidationError

from copilot.posting import MAX_LEAD_MINUTES, MIN_LEAD_MINUTES, Preferences, describe, parse_clock
from copilot.tools.schemas import ChangeBriefsAndDigestArgs
from copilot.writes import write_tool
from offline_model.catalog import describe_tool
from offline_model.settings_write import setting_args

_ENTRY = write_tool("change_briefs_and_digest")
assert _ENTRY is not None
TOOL = describe_tool(_ENTRY.langchain_tool())


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("brief on", {"briefs": True}),
        ("Brief OFF", {"briefs": False}),
        ("  digest   on ", {"digest": True}),
        ("digest off.", {"digest": False}),
        ("stop my daily digest", {"digest": False}),
        ("turn on my meeting briefs", {"briefs": True}),
        ("brief 45 minutes before", {"lead_minutes": 45}),
        ("briefs 10 minutes before my meetings", {"lead_minutes": 10}),
        ("digest at 8:00", {"digest_time": "8:00"}),
        ("send my digest at 8am", {"digest_time": "8am"}),
        ("digest at 5:30 pm", {"digest_time": "5:30 pm"}),
        ("digest at 7", {"digest_time": "7"}),
        ("digest on at 6:45", {"digest": True, "digest_time": "6:45"}),
    ],
)
def test_a_setting_named_with_a_value_is_read_as_that_setting(text: str, args: dict[str, Any]) -> None:
    assert setting_args(TOOL, text) == args
    ChangeBriefsAndDigestArgs.model_validate(args)  # and the tool takes it


@pytest.mark.parametrize(
    "text",
    [
        "brief me",
        "digest me",
        "brief me on acme before my call",
        "what is in my digest",
        "brief",
        "my pipeline",
    ],
)
def test_a_setting_named_without_a_value_or_nothing_named_sets_nothing(text: str) -> None:
    assert setting_args(TOOL, text) == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8:00", time(8, 0)),
        ("08:00", time(8, 0)),
        ("8am", time(8, 0)),
        ("5:30 pm", time(17, 30)),
        ("12am", time(0, 0)),
        ("12pm", time(12, 0)),
        ("17:30", time(17, 30)),
        ("7", time(7, 0)),
    ],
)
def test_a_clock_time_reads_as_that_time_of_day(text: str, expected: time) -> None:
    assert parse_clock(text) == expected


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"digest_time": "25:00"}, "hours 0 to 23"),
        ({"digest_time": "8:75"}, "minutes 0 to 59"),
        ({"digest_time": "13pm"}, "with am/pm the hour is 1 to 12"),
        ({"digest_time": "noonish"}, "is not a time"),
        ({"digest_time": "8:0"}, "is not a time"),
        ({"lead_minutes": MIN_LEAD_MINUTES - 1}, f"greater than or equal to {MIN_LEAD_MINUTES}"),
        ({"lead_minutes": MAX_LEAD_MINUTES + 1}, f"less than or equal to {MAX_LEAD_MINUTES}"),
        ({}, "nothing to change"),
    ],
)
def test_a_value_that_is_not_a_setting_is_refused_saying_why(args: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        ChangeBriefsAndDigestArgs.model_validate(args)
    assert says in str(refused.value)


def test_the_settings_are_said_back_in_a_sentence() -> None:
    assert describe(Preferences()) == "Meeting prep briefs are off; the daily digest is off."
    said = describe(
        Preferences(
            enabled=True, lead_minutes=30, digest_enabled=True, digest_time=time(8), time_zone="Europe/Berlin"
        )
    )
    assert said.startswith("Meeting prep briefs are on, 30 minutes before each meeting")
    assert "the daily digest is on, every working day at 08:00 (Europe/Berlin)" in said
