"""Thread rotation on the real runner: what a Teams conversation keeps when it moves on (issue 21).

Real PostgreSQL, the sandbox CRM over MCP, the offline model, a simulated clock
(``CopilotService.clock``), the limits as shipped. The month-long drive through the bot is
``tests/adversarial/test_long_conversation.py``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest

from copilot.runner import CopilotService
from copilot.settings import Settings
from tests.support.copilot_env import Rep, service, sign_in

pytestmark = pytest.mark.integration

MORNING = dt.datetime(2026, 3, 2, 8, 0, tzinfo=dt.UTC)
NIGHT = dt.timedelta(hours=14)


class Clock:
    def __init__(self) -> None:
        self.now = MORNING

    def __call__(self) -> dt.datetime:
        return self.now


@pytest.fixture
async def svc(copilot_settings: Settings) -> AsyncIterator[CopilotService]:
    async with service(copilot_settings) as running:
        yield running


async def _rows(svc: CopilotService, thread_id: str) -> int:
    async with svc.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = %(t)s)"
            " + (SELECT count(*) FROM checkpoint_blobs WHERE thread_id = %(t)s)"
            " + (SELECT count(*) FROM checkpoint_writes WHERE thread_id = %(t)s) AS n",
            {"t": thread_id},
        )
        row: Any = await cur.fetchone()
    return int(row["n"])


async def test_after_a_night_the_next_question_opens_a_new_thread_that_still_knows_the_record(
    svc: CopilotService, copilot_settings: Settings
):
    clock = svc.clock = Clock()
    rep = await sign_in(copilot_settings, "alex")
    first = await svc.run_turn(rep.identity, rep.broker, None, "summarise Acme", rotate=True)
    clock.now += dt.timedelta(minutes=5)
    same = await svc.run_turn(rep.identity, rep.broker, first.thread_id, "summarise Globex", rotate=True)
    assert same.thread_id == first.thread_id  # five minutes is no gap
    again = await svc.run_turn(rep.identity, rep.broker, first.thread_id, "summarise Acme", rotate=True)
    clock.now += NIGHT
    next_day = await svc.run_turn(
        rep.identity, rep.broker, again.thread_id, "who are their contacts?", rotate=True
    )
    assert next_day.thread_id != first.thread_id
    # "their" is Acme, yesterday's last record: the hand-off carried it, and the answer
    # is read again and cited from this run's own tool results.
    assert next_day.notice is None, next_day
    assert next_day.citations, next_day
    assert "Acme" in (next_day.answer or ""), next_day.answer
    values = (await svc._state_graph().aget_state(svc._config(next_day.thread_id))).values
    questions = [m.content for m in values["messages"] if m.type == "human"]
    assert questions == ["summarise Acme", "who are their contacts?"]


async def test_preferences_in_the_store_survive_a_rotation(svc: CopilotService, copilot_settings: Settings):
    clock = svc.clock = Clock()
    rep = await sign_in(copilot_settings, "alex")
    asked = await svc.run_turn(rep.identity, rep.broker, None, "set my email tone to formal", rotate=True)
    [proposal] = asked.proposals
    await svc.decide(
        rep.identity,
        rep.broker,
        asked.thread_id,
        [{"tool_call_id": proposal.tool_call_id, "type": "approve"}],
    )
    clock.now += NIGHT
    shown = await svc.run_turn(rep.identity, rep.broker, asked.thread_id, "my preferences", rotate=True)
    assert shown.thread_id != asked.thread_id
    assert "formal" in (shown.answer or "").lower(), shown.answer


async def test_a_proposal_left_pending_across_rotations_stays_decidable_and_old_threads_are_compacted(
    svc: CopilotService, copilot_settings: Settings
):
    clock = svc.clock = Clock()
    rep: Rep = await sign_in(copilot_settings, "alex")
    asked = await svc.run_turn(
        rep.identity, rep.broker, None, "log a call with Acme — discussed pricing", rotate=True
    )
    old = asked.thread_id
    [proposal] = asked.proposals
    clock.now += NIGHT
    moved = await svc.run_turn(rep.identity, rep.broker, old, "summarise Globex", rotate=True)
    assert moved.thread_id != old
    assert moved.proposals == []  # the new thread is free; the old card still waits
    # The old thread kept only its latest checkpoint, the one holding the interrupt.
    async with svc.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s", (old,))
        kept: Any = await cur.fetchone()
    assert kept["n"] == 1
    assert [p.tool_call_id for p in (await svc.pending(rep.identity, old)).proposals] == [
        proposal.tool_call_id
    ]
    # A turn that names the old thread (a conversation row not yet updated) follows its successor.
    follow = await svc.run_turn(rep.identity, rep.broker, old, "my pipeline", rotate=True)
    assert follow.thread_id == moved.thread_id
    clock.now += NIGHT
    decided = await svc.decide(
        rep.identity, rep.broker, old, [{"tool_call_id": proposal.tool_call_id, "type": "approve"}]
    )
    assert decided.writes[proposal.tool_call_id].status == "done", decided
    # The next rotation clears the decided thread's checkpoints; its row stays.
    third = await svc.run_turn(rep.identity, rep.broker, moved.thread_id, "summarise Acme", rotate=True)
    assert third.thread_id not in (old, moved.thread_id)
    assert await _rows(svc, old) == 0
    assert await _rows(svc, moved.thread_id) == 0


async def test_a_conversation_whose_thread_retention_deleted_goes_on_in_a_new_thread(
    svc: CopilotService, copilot_settings: Settings
):
    from bot import conversations

    rep = await sign_in(copilot_settings, "alex")
    first = await svc.run_turn(rep.identity, rep.broker, None, "summarise Acme", rotate=True)
    await conversations.remember(svc.pool, "conv-1", rep.identity, first.thread_id, {})
    assert await conversations.thread_for(svc.pool, "conv-1", rep.identity) == first.thread_id
    async with svc.pool.connection() as conn:  # what retention does to an expired thread's row
        await conn.execute("DELETE FROM threads WHERE thread_id = %s", (first.thread_id,))
    # The bot's next question then opens a new thread instead of "start a new conversation".
    assert await conversations.thread_for(svc.pool, "conv-1", rep.identity) is None


async def test_two_questions_at_once_after_a_night_rotate_the_conversation_once(
    svc: CopilotService, copilot_settings: Settings
):
    import asyncio

    clock = svc.clock = Clock()
    rep = await sign_in(copilot_settings, "alex")
    first = await svc.run_turn(rep.identity, rep.broker, None, "summarise Acme", rotate=True)
    clock.now += NIGHT
    both = await asyncio.gather(
        svc.run_turn(rep.identity, rep.broker, first.thread_id, "summarise Globex", rotate=True),
        svc.run_turn(rep.identity, rep.broker, first.thread_id, "my pipeline", rotate=True),
    )
    assert both[0].thread_id == both[1].thread_id != first.thread_id
    async with svc.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM threads")
        row: Any = await cur.fetchone()
    assert row["n"] == 2
