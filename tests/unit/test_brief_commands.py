"""The rep's brief and digest commands, parsed: what each says, and a clear refusal of bad values."""

from __future__ import annotations

from datetime import time

import pytest

from bot.brief_commands import (
    MAX_LEAD_MINUTES,
    MIN_LEAD_MINUTES,
    BadBriefCommand,
    BriefLead,
    BriefMe,
    BriefToggle,
    DigestAt,
    DigestMe,
    DigestToggle,
    parse_brief_command,
)


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("brief on", BriefToggle(True)),
        ("Brief OFF", BriefToggle(False)),
        ("brief me", BriefMe()),
        ("  digest   on ", DigestToggle(True)),
        ("digest off.", DigestToggle(False)),
        ("digest me", DigestMe()),
        ("brief 30", BriefLead(30)),
        ("brief 45 minutes before", BriefLead(45)),
        ("brief 10 min before", BriefLead(10)),
        ("digest at 8:00", DigestAt(time(8, 0))),
        ("digest at 08:00", DigestAt(time(8, 0))),
        ("digest at 8am", DigestAt(time(8, 0))),
        ("digest at 5:30 pm", DigestAt(time(17, 30))),
        ("digest at 12am", DigestAt(time(0, 0))),
        ("digest at 12pm", DigestAt(time(12, 0))),
        ("digest at 17:30", DigestAt(time(17, 30))),
        ("digest at 7", DigestAt(time(7, 0))),
    ],
)
def test_each_command_reads_as_what_the_rep_meant(text: str, command: object) -> None:
    assert parse_brief_command(text) == command


@pytest.mark.parametrize(
    "text",
    [
        "brief me on acme before my call",
        "what is in my digest",
        "brief",
        "digest",
        "my pipeline",
        "briefing on",
    ],
)
def test_anything_else_is_a_question_for_the_copilot(text: str) -> None:
    assert parse_brief_command(text) is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("digest at 25:00", "hours go from 0 to 23"),
        ("digest at 8:75", "minutes from 0 to 59"),
        ("digest at 13pm", "with am/pm the hour is 1 to 12"),
        ("digest at noonish", "can't read"),
        ("digest at 8:0", "can't read"),
        ("brief 0", f"{MIN_LEAD_MINUTES} to {MAX_LEAD_MINUTES} minutes"),
        ("brief 2 minutes before", "you said 2"),
        ("brief 100000", "you said 100000"),
        ("brief -5", "you said -5"),
    ],
)
def test_a_recognised_command_with_a_bad_value_is_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(BadBriefCommand) as refused:
        parse_brief_command(text)
    assert says in refused.value.message
