"""Progress is paced to Teams' limits: a streaming update a second, two minutes a stream,
streaming in 1:1 chats only, typing sparingly elsewhere."""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace
from typing import Any

import pytest

from bot.progress import STREAM_MAX_SECONDS, TYPING_EVERY_SECONDS, TurnProgress
from copilot.progress import ProgressEvent


class FakeContext:
    """Records what the bot would send to the Bot Connector (Teams cannot run here)."""

    def __init__(self, conversation_type: str) -> None:
        self.activity = SimpleNamespace(conversation=SimpleNamespace(conversation_type=conversation_type))
        self.sent: list[Any] = []

    async def send_activity(self, activity: Any) -> Any:
        self.sent.append(activity)
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
    context, clock = FakeContext("personal"), Clock()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds

    progress = TurnProgress(context, clock=clock, sleep=sleep)
    await progress.start()
    clock.now += 0.3
    await progress.update(_event(1))
    await progress.update(_event(2))  # the latest held one wins
    await asyncio.sleep(0)  # let the held update's task run
    await asyncio.sleep(0)
    assert [a.text for a in context.sent] == ["Working on it…", "step 2"]
    assert slept == [pytest.approx(0.7)]

    clock.now += 0.1
    await progress.update(_event(3))
    progress.final_entities()  # the answer goes out now
    await asyncio.sleep(0)
    assert [a.text for a in context.sent] == ["Working on it…", "step 2"], "nothing after the answer"


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


async def test_outside_one_to_one_chats_only_typing_and_sparingly():
    context, clock = FakeContext("groupChat"), Clock()
    progress = TurnProgress(context, clock=clock)
    for i in range(20):
        await progress.update(_event(i))
        clock.now += 0.5
    assert all(a.type == "typing" and not a.text for a in context.sent)
    assert len(context.sent) <= 20 * 0.5 / TYPING_EVERY_SECONDS + 1
    assert progress.final_entities() == []
