"""Teams / Microsoft 365 Copilot Chat streaming rules, through the bot's dev server and a fake
Bot Connector: one stream per turn, informative updates at least every 15 s however long the
turn, the stream closed (its final message) before any card, and nothing on it after that.

A 50-second turn is a model that takes 50 s of injected time (``tests/support/virtual_time.py``):
the bot's progress stream and the connector's arrival stamps read the same clock, so the test
sees the turn's real timeline in a fraction of a second.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import PrivateAttr

from bot.progress import KEEPALIVE_SECONDS
from copilot.settings import Settings
from tests.support.fake_connector import Recorded, card_of, find_actions
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls
from tests.support.teams_client import Teams, running_bot
from tests.support.virtual_time import VirtualTime

pytestmark = pytest.mark.integration

COPILOT_CHAT_FIRST_RESPONSE_SECONDS = 15
"""Microsoft 365 Copilot Chat: a response within 15 s; a stream silent for 45 s fails the turn."""


class SlowModel(ScriptedChatModel):
    """A scripted model whose call number ``slow_call`` (0: the first; the gate's checks are not
    counted) takes ``thinking`` seconds of the injected time."""

    thinking: float = 50.0
    slow_call: int = 0
    _time: VirtualTime = PrivateAttr(default_factory=VirtualTime)
    _calls: int = PrivateAttr(default=0)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if kwargs.get("tool_choice") is None:
            if self._calls == self.slow_call:
                await self._time.advance(self.thinking)
            self._calls += 1
        return self._generate(messages, stop, **kwargs)


def _streaminfo(recorded: Recorded) -> dict[str, Any] | None:
    for entity in recorded.body.get("entities") or []:
        if entity.get("type") == "streaminfo":
            return dict(entity)
    return None


def _has_card(recorded: Recorded) -> bool:
    return any(
        a.get("contentType") == "application/vnd.microsoft.card.adaptive"
        for a in recorded.body.get("attachments") or []
    )


@pytest.fixture
async def teams(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[Teams]:
    async with running_bot(copilot_settings) as running:
        yield running


async def test_a_fifty_second_turn_keeps_its_stream_alive_and_closes_it_before_the_card(teams: Teams):
    assert KEEPALIVE_SECONDS <= COPILOT_CHAT_FIRST_RESPONSE_SECONDS, "the default itself keeps the rule"
    time = VirtualTime()
    model = SlowModel(
        steps=[calls(call("log_activity", type="call", subject="Pricing call", account_id="acc-acme"))],
        final="Done.",
    )
    model._time = time
    assert teams.runtime is not None
    teams.runtime.service.model = model
    teams.runtime.bot.progress_clock = time.now
    teams.runtime.bot.progress_sleep = time.sleep
    teams.connector.clock = time.now

    await teams.say("log a call with Acme about pricing")

    posted = [c for c in teams.connector.calls if c.method == "POST"]
    informative = [c for c in posted if (_streaminfo(c) or {}).get("streamType") == "informative"]
    assert informative, "the turn streamed no progress"
    stream_id = informative[0].activity_id
    # One stream: every later update names the first one's id, in sequence.
    assert all((_streaminfo(c) or {}).get("streamId") == stream_id for c in informative[1:])
    sequences = [(_streaminfo(c) or {}).get("streamSequence") for c in informative]
    assert sequences == list(range(1, len(informative) + 1))

    finals = [i for i, c in enumerate(posted) if (_streaminfo(c) or {}).get("streamType") == "final"]
    assert len(finals) == 1, "the stream is closed exactly once"
    closing = posted[finals[0]]
    assert (_streaminfo(closing) or {}).get("streamId") == stream_id
    assert closing.body["type"] == "message"
    assert closing.body.get("text")
    cards = [i for i, c in enumerate(posted) if _has_card(c)]
    assert cards, "the turn ends in an approval card"
    assert finals[0] < cards[0], "the stream is closed before any card is sent"
    after = posted[finals[0] + 1 :]
    assert not any(_streaminfo(c) for c in after), "nothing is sent on the stream after it ended"

    # The timeline, in the injected time: a 50-second turn, never silent for more than 15 s.
    moments = [c.at for c in [*informative, closing]]
    assert all(m is not None for m in moments)
    stamped = [float(m) for m in moments if m is not None]
    assert stamped[-1] - stamped[0] >= model.thinking
    gaps = [b - a for a, b in itertools.pairwise(stamped)]
    assert max(gaps) <= COPILOT_CHAT_FIRST_RESPONSE_SECONDS, stamped
    assert max(gaps) <= KEEPALIVE_SECONDS + 0.5, stamped


async def test_an_approval_whose_follow_up_takes_fifty_seconds_streams_at_once_and_closes_once(teams: Teams):
    """After Approve the write runs and the model answers: the stream opens at the decision,
    stays alive through a 50-second model call and is closed by the answer."""
    time = VirtualTime()
    model = SlowModel(
        steps=[calls(call("log_activity", type="call", subject="Pricing call", account_id="acc-acme"))],
        final="Logged the call.",
        slow_call=1,
    )
    model._time = time
    assert teams.runtime is not None
    teams.runtime.service.model = model
    teams.runtime.bot.progress_clock = time.now
    teams.runtime.bot.progress_sleep = time.sleep
    teams.connector.clock = time.now
    await teams.say("log a call with Acme about pricing")
    card = teams.connector.cards()[-1]
    before = len(teams.connector.calls)

    [approve] = find_actions(card_of(card), "Approve")
    await teams.submit(card.activity_id or "", approve["data"])

    posted = [c for c in teams.connector.calls[before:] if c.method == "POST"]
    informative = [c for c in posted if (_streaminfo(c) or {}).get("streamType") == "informative"]
    assert informative, "the decision opened no stream"
    assert informative[0].body.get("text") == "Working on it…"
    finals = [i for i, c in enumerate(posted) if (_streaminfo(c) or {}).get("streamType") == "final"]
    assert len(finals) == 1
    closing = posted[finals[0]]
    assert (_streaminfo(closing) or {}).get("streamId") == informative[0].activity_id
    assert not any(_streaminfo(c) for c in posted[finals[0] + 1 :])
    stamped = [float(c.at) for c in [*informative, closing] if c.at is not None]
    assert stamped[-1] - stamped[0] >= model.thinking
    assert max(b - a for a, b in itertools.pairwise(stamped)) <= KEEPALIVE_SECONDS + 0.5, stamped
