"""The risk and what-changed cards in Teams (``bot/insight_cards.py``), through the bot's dev server
as the Playground user (alex): compact, one column for a phone, every line cited, valid Adaptive
Cards 1.5; the catch-up card moves the rep's stored last catch-up. The moment is pinned.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from copilot.identity import RepIdentity
from copilot.insight.catchup import last_catch_up
from copilot.persistence.database import connect
from copilot.settings import Settings
from sandbox.directory import find_user
from tests.support.adaptive_cards import validate_cards, walk
from tests.support.fake_connector import card_of
from tests.support.moments import SEED_MIDNIGHT, SteppingClock
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import Teams, running_bot

pytestmark = pytest.mark.integration

NOW = SEED_MIDNIGHT + timedelta(hours=15)


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    return pinned_sandbox


@pytest.fixture
async def teams(copilot_settings: Settings) -> AsyncIterator[Teams]:
    async with running_bot(copilot_settings) as running:
        running.set_clock(SteppingClock(NOW))
        yield running


def _texts(card: dict[str, Any]) -> list[str]:
    return [str(node.get("text")) for node, _ in walk(card) if node.get("type") == "TextBlock"]


def _phone_ready(card: dict[str, Any]) -> None:
    nodes = [node for node, _ in walk(card)]
    assert card["version"] == "1.5"
    assert "ColumnSet" not in {n.get("type") for n in nodes}
    assert all(n.get("wrap") is True for n in nodes if n.get("type") == "TextBlock")
    assert validate_cards([card]) == [{"errors": [], "warnings": []}]


async def test_deals_at_risk_answers_with_a_compact_cited_card(teams: Teams):
    await teams.say("deals at risk")
    card = card_of(teams.connector.messages()[-1])
    _phone_ready(card)
    text = "\n".join(_texts(card))
    assert "Deals at risk" in text
    # The expansion's close date was pushed twice (the CRM's history): cited on its line.
    assert any("close date moved later 2 times" in t and "[opp-acme-expansion]" in t for t in _texts(card))
    assert "opp-acme-renewal" not in text  # a healthy deal
    assert "Sources" in text
    assert "language model" in text  # the notes signal was not computed, and the card says so


async def test_catch_me_up_answers_with_the_changes_card_and_moves_the_stored_moment(
    teams: Teams, copilot_settings: Settings
):
    await teams.say("catch me up")
    card = card_of(teams.connector.messages()[-1])
    _phone_ready(card)
    lines = _texts(card)
    assert any("Proposal → Negotiation" in t and "[opp-acme-analytics]" in t for t in lines), lines
    assert any(t == "Stage movements" for t in lines)
    user = find_user("alex")
    assert user is not None
    async with connect(copilot_settings) as conn:
        assert await last_catch_up(conn, RepIdentity(user.tenant_id, str(user.aad_object_id))) == NOW


def _stream_types(posted: list[Any]) -> list[str | None]:
    return [
        next(
            (e.get("streamType") for e in p.body.get("entities") or [] if e.get("type") == "streaminfo"), None
        )
        for p in posted
    ]


@pytest.mark.parametrize(
    ("said", "kicker"),
    [
        ("which of my deals are at risk?", "Deals at risk"),
        ("anything slipping in my deals at risk of being lost?", "Deals at risk"),
        ("what changed on my deals since Friday?", "What changed"),
    ],
)
async def test_risk_and_changes_asked_in_free_words_answer_with_the_compact_card_and_close_the_stream(
    teams: Teams, said: str, kicker: str
):
    await teams.say(said)
    posted = teams.connector.messages()
    card = card_of(posted[-1])
    _phone_ready(card)
    assert _texts(card)[0] == kicker
    # The card is the answer: no text wall beside it, and the progress stream was ended first.
    assert not any(p.body.get("text", "").startswith(kicker) for p in posted[:-1])
    types = _stream_types(posted[:-1])
    if "informative" in types or "streaming" in types:
        assert types[-1] == "final", types
