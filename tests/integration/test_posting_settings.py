"""Briefs and the digest turned on, off or moved in the rep's own words: the settings tool
(``change_briefs_and_digest``, ``copilot/writes/posting.py``) proposes the change on an approval
card, nothing changes before Approve, and the bot's port (``bot/posting_settings.py``) keeps it
with the rep's 1:1 chat. The offline model binds it by naming a setting and its value, as any
model reads a tool's schema. The moment is pinned.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import time, timedelta

import pytest

from bot import brief_store
from copilot.identity import RepIdentity
from copilot.settings import Settings
from sandbox.directory import PLAYGROUND_AAD_OBJECT_ID
from tests.support.copilot_env import service, sign_in
from tests.support.fake_connector import card_of, find_actions
from tests.support.moments import SEED_MIDNIGHT, SteppingClock
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import TENANT, Teams, running_bot

pytestmark = pytest.mark.integration

NOW = SEED_MIDNIGHT + timedelta(hours=15)
REP = RepIdentity(TENANT, PLAYGROUND_AAD_OBJECT_ID)


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    return pinned_sandbox


@pytest.fixture
async def teams(copilot_settings: Settings) -> AsyncIterator[Teams]:
    async with running_bot(copilot_settings) as running:
        running.set_clock(SteppingClock(NOW))
        yield running


async def _prefs(teams: Teams) -> brief_store.Preferences:
    assert teams.runtime is not None
    return await brief_store.preferences(teams.runtime.service.pool, REP)


def _waiting_card_text(teams: Teams) -> str:
    card = next(m for m in reversed(teams.connector.messages()) if m.body.get("attachments"))
    assert find_actions(card_of(card), "Approve"), card.body
    return repr(card_of(card))


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("brief on", {"enabled": True}),
        ("turn on my meeting briefs please", {"enabled": True}),
        ("brief 30 minutes before", {"enabled": True, "lead_minutes": 30}),
        ("digest on", {"digest_enabled": True}),
        ("send my digest at 8am", {"digest_enabled": True, "digest_time": time(8, 0)}),
        ("digest at 17:30", {"digest_enabled": True, "digest_time": time(17, 30)}),
    ],
)
async def test_a_setting_said_in_own_words_is_proposed_on_a_card_and_changed_only_on_approve(
    teams: Teams, said: str, expected: dict[str, object]
) -> None:
    teams.conversation = f"conv-posting-{abs(hash(said))}"
    before = await _prefs(teams)
    await teams.say(said)
    assert "Change my briefs and digest" in _waiting_card_text(teams)
    assert await _prefs(teams) == before, "nothing changes before the rep approves"
    outcome = await teams.approve_last()
    after = await _prefs(teams)
    for field, value in expected.items():
        assert getattr(after, field) == value, (field, after)
    assert ("Meeting prep briefs are on" if "enabled" in expected else "the daily digest is on") in outcome, (
        outcome[-3000:]
    )


async def test_off_turns_briefs_off_again(teams: Teams) -> None:
    await teams.say("brief on")
    await teams.approve_last()
    assert (await _prefs(teams)).enabled
    await teams.say("stop the briefs")
    outcome = await teams.approve_last()
    assert not (await _prefs(teams)).enabled
    assert "Meeting prep briefs are off" in outcome


async def test_a_time_that_is_not_one_changes_nothing_and_says_why(teams: Teams) -> None:
    before = await _prefs(teams)
    await teams.say("digest at 25:00")
    assert "not a time of day" in teams.last_text()
    assert await _prefs(teams) == before


async def test_a_question_about_the_digest_proposes_nothing(teams: Teams) -> None:
    await teams.say("is my digest on?")
    assert not any(
        find_actions(card_of(m), "Approve") for m in teams.connector.messages() if m.body.get("attachments")
    )


async def test_in_the_terminal_chat_the_rep_is_told_where_to_say_it_and_nothing_is_proposed(
    copilot_settings: Settings,
) -> None:
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, clock=SteppingClock(NOW)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "brief on")
    assert not result.proposals
    assert result.answer is not None
    assert "1:1 chat with me in Teams" in result.answer


async def test_a_setting_already_so_is_said_and_not_proposed_again(teams: Teams) -> None:
    await teams.say("digest on")
    await teams.approve_last()
    cards_before = len([m for m in teams.connector.messages() if m.body.get("attachments")])
    await teams.say("digest on please")
    assert len([m for m in teams.connector.messages() if m.body.get("attachments")]) == cards_before
    print(teams.last_text())
    assert "already" in teams.last_text().lower()
