"""Times on the approval card in Teams are in the rep's zone, as Teams reports it with the
message (the bot on the dev server, the sandbox, the offline model)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from copilot.settings import Settings
from tests.support.fake_connector import card_of
from tests.support.moments import WEDNESDAY_AFTERNOON, SteppingClock
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import Teams, running_bot

pytestmark = pytest.mark.integration

DICTATION = "spoke with Tom Becker at Acme yesterday, the pilot starts in January. log it"


@pytest.fixture
async def teams(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[Teams]:
    async with running_bot(copilot_settings) as running:
        running.set_clock(SteppingClock(WEDNESDAY_AFTERNOON))
        yield running


async def _card_text(teams: Teams, **fields: str) -> str:
    activity = teams.activity(text=DICTATION, **fields)
    assert await teams.send(activity) in (200, 201, 202)
    card = card_of(teams.connector.cards()[-1])
    assert "Log an activity" in repr(card), repr(card)[:400]
    return repr(card)


async def test_the_approval_card_shows_when_in_the_zone_teams_reports_for_the_rep(teams: Teams) -> None:
    # Tuesday 8 December, noon UTC: 4 AM in Los Angeles.
    local = await _card_text(teams, localTimezone="America/Los_Angeles")
    assert "America/Los_Angeles" in local
    assert "4:00:00" in local
    assert "UTC" not in local


async def test_without_a_zone_from_teams_the_card_says_utc(teams: Teams) -> None:
    teams.conversation = "conv-no-zone"
    plain = await _card_text(teams)
    assert "12:00:00" in plain
    assert "UTC" in plain
