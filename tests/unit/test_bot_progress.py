"""Progress is paced to Teams' limits: a streaming update a second, two minutes a stream,
a keep-alive at least every ``KEEPALIVE_SECONDS``, nothing after the stream ended, streaming
in 1:1 chats only, typing sparingly elsewhere."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from bot.progress import (
    KEEPALIVE_SECONDS,
    LONG_TURN,
    STREAM_MAX_SECONDS,
    TYPING_EVERY_SECONDS,
    TurnProgress,
)
from copilot.progress import ProgressEvent
from tests.support.virtual_time import VirtualTime


class FakeContext:
    """Records what the bot would send to the Bot Connector (Teams cannot run here)."""

    def __init__(self, conversation_type: str) -> None:
        self.activity = SimpleNamespace(conversation=SimpleNamespace(conversation_type=conversation_type))
        self.turn_state: dict[str, Any] = {}
        self.sent: list[Any] = []
        self.on_send: Callable[[], None] = lambda: None

    async def send_activity(self, activity: Any) -> Any:
        self.sent.append(activity)
        self.on_send()
        return SimpleNamespace(id="stream-1")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _event(i: int) -> ProgressEvent:
    return ProgressEvent("lookup", f"step {i}")


async def test_streaming_updates_are_at_least_a_second_apart_and_never_delay_the_turn():
    context, clock = FakeContext("personal"), Clock()
    progress = TurnProgress(context, clock=clock)
    sent_at = []
    for i in range(30):  # 30 events over 6 seconds
        before = len(context.sent)
        await progress.update(_event(i))
        if len(context.sent) > before:
            sent_at.append(clock.now)
        clock.now += 0.2
    assert len(sent_at) <= 7
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(sent_at)), sent_at
    assert context.sent[0].text == "step 0", "the first step is shown at once"
    progress.close()


async def test_an_update_held_by_the_pace_is_sent_when_the_second_is_up_unless_the_answer_came():
    context, time = FakeContext("personal"), VirtualTime()
    progress = TurnProgress(context, clock=time.now, sleep=time.sleep)
    await progress.start()
    await time.advance(0.3)
    await progress.update(_event(1))
    await progress.update(_event(2))  # the latest held one wins
    assert [a.text for a in context.sent] == ["Working on it…"], "held until the second is up"
    await time.advance(0.7)
    assert [a.text for a in context.sent] == ["Working on it…", "step 2"]

    await time.advance(0.1)
    await progress.update(_event(3))
    progress.final_entities()  # the answer goes out now
    await time.advance(KEEPALIVE_SECONDS * 3)
    assert [a.text for a in context.sent] == ["Working on it…", "step 2"], "nothing after the answer"


async def test_a_silent_stretch_gets_a_keep_alive_at_least_every_keepalive_seconds():
    """Copilot Chat ends a stream silent for 45 s; a long model call keeps it alive."""
    assert KEEPALIVE_SECONDS <= 15, "Copilot Chat expects a sign of life within 15 s"
    context, time = FakeContext("personal"), VirtualTime()
    sent_at: list[float] = []
    context.on_send = lambda: sent_at.append(time.now())
    progress = TurnProgress(context, clock=time.now, sleep=time.sleep)
    await progress.start()
    await time.advance(12)
    await progress.update(_event(1))
    await time.advance(38)  # 50 s in all
    texts = [a.text for a in context.sent]
    assert texts[0] == "Working on it…"
    assert texts[1] == "Still working on it…", "the acknowledgement is not simply repeated"
    assert "step 1" in texts
    assert texts[-1] == "step 1", "the keep-alive shows the last line again"
    gaps = [b - a for a, b in itertools.pairwise([*sent_at, time.now()])]
    assert max(gaps) <= KEEPALIVE_SECONDS, sent_at
    assert len(sent_at) >= 50 / KEEPALIVE_SECONDS

    await progress.end("Here is the change for your approval:")
    count = len(context.sent)
    await time.advance(60)
    assert len(context.sent) == count, "nothing on the stream after it ended"
    final = context.sent[-1]
    assert final.type == "message"
    assert final.entities[0].serialize() == {
        "type": "streaminfo",
        "streamType": "final",
        "streamId": "stream-1",
    }


async def test_end_without_an_open_stream_posts_plain_text_and_a_turn_has_one_stream():
    context = FakeContext("personal")
    first = TurnProgress.for_turn(context)
    assert TurnProgress.for_turn(context) is first, "one stream per turn"
    assert TurnProgress.of(context) is first
    await first.end("That card belongs to someone else.")
    assert [a.type for a in context.sent] == ["message"]
    assert not context.sent[0].entities
    await first.update(_event(1))
    assert len(context.sent) == 1, "an ended turn streams nothing more"


async def test_no_update_after_the_streams_two_minutes_and_the_answer_then_closes_nothing():
    context, clock = FakeContext("personal"), Clock()
    progress = TurnProgress(context, clock=clock)
    await progress.start()
    assert progress.final_entities(), "an open stream is closed by the answer"
    clock.now += STREAM_MAX_SECONDS
    count = len(context.sent)
    await progress.update(_event(1))
    assert len(context.sent) == count
    assert progress.final_entities() == []


async def test_a_turn_longer_than_a_stream_may_last_closes_its_stream_itself_and_answers_apart():
    """Teams ends a stream at two minutes: the keep-alive closes it at ``STREAM_MAX_SECONDS``
    with a final message of its own; the answer then opens nothing and closes nothing."""
    context, time = FakeContext("personal"), VirtualTime()
    sent_at: list[float] = []
    context.on_send = lambda: sent_at.append(time.now())
    progress = TurnProgress(context, clock=time.now, sleep=time.sleep)
    await progress.start()
    await time.advance(STREAM_MAX_SECONDS + 30)
    final = context.sent[-1]
    assert final.type == "message"
    assert final.text == LONG_TURN
    assert final.entities[0].serialize()["streamType"] == "final"
    assert sent_at[-1] == pytest.approx(sent_at[0] + STREAM_MAX_SECONDS)
    assert all(a.type == "typing" for a in context.sent[:-1])
    assert max(b - a for a, b in itertools.pairwise(sent_at)) <= KEEPALIVE_SECONDS
    assert not progress.open
    assert progress.final_entities() == [], "the answer closes no stream: it was closed"
    await progress.end("the answer")
    assert context.sent[-1].text == "the answer"
    assert not context.sent[-1].entities


async def test_outside_one_to_one_chats_only_typing_and_sparingly():
    context, clock = FakeContext("groupChat"), Clock()
    progress = TurnProgress(context, clock=clock)
    for i in range(20):
        await progress.update(_event(i))
        clock.now += 0.5
    assert all(a.type == "typing" and not a.text for a in context.sent)
    assert len(context.sent) <= 20 * 0.5 / TYPING_EVERY_SECONDS + 1
    assert progress.final_entities() == []
