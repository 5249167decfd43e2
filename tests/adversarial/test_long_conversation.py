"""One Teams conversation for a month: it never dies, and what it keeps stays bounded (issue 21).

One rep's 1:1 chat is driven through the bot in-process (Teams-shaped activities over the
dev server's HTTP endpoint, the fake Bot Connector, the offline model, the real sandbox
CRM over MCP and real embedded PostgreSQL), with the limits as shipped (12 model calls
per run, 200 per thread) and a simulated clock (the service's ``clock``; nothing sleeps).
The first day is a heavy one, so the thread meets the model-call headroom and rotates
within the day; every later morning follows a night's idle gap, so it rotates again.
Every few questions a change is proposed and left pending across rotations, then
approved days later from its card. Checked on every turn: the question is answered (never
a limit's stop, never "start over", never an error), every proposal left pending is
decided in the end, and the checkpoint rows of the conversation (all its threads) stay
bounded. Summary line: ``long-conversation: turns N, answered N, rotations R, pending
decided P/P, max checkpoint rows per conversation K``.

CI runs 110 turns over 3 days (day 1 alone passes the thread's limit); ``make soak``
(``COPILOT_SOAK=1``) runs 500 over 30 days.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

from copilot.middleware.limits import LIMIT_MESSAGE, THREAD_LIMIT_MESSAGE
from copilot.settings import Settings
from tests.adversarial.counts import SUMMARY_FILE, count, soak
from tests.support.fake_connector import Recorded, card_of, find_actions
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import Teams, running_bot

pytestmark = pytest.mark.integration

TURNS = count(110, 500)
DAYS = 30 if soak() else 3
HEAVY_DAY_TURNS = 100
"""Day 1's questions: with about two model calls each, past the 176 calls (200 less two
runs' headroom) at which the thread rotates before its limit."""

QUESTIONS = (
    "summarise Acme",
    "who are their contacts?",
    "my deals closing this quarter",
    "summarise Globex",
    "what did we discuss with them?",
    "my pipeline",
    "my biggest deal",
    "any meetings with Acme?",
)
WRITES = (
    "log a call with Acme — discussed pricing, next step send proposal",
    "log a task for Globex: send the contract",
    "log a meeting with Acme about onboarding",
)
ROWS_BOUND = 300
PROPOSE_EVERY = 9
DECIDE_AFTER_DAYS = 2
REFUSALS = (
    "start a new conversation",
    "start over",
    "something went wrong",
    LIMIT_MESSAGE,
    THREAD_LIMIT_MESSAGE,
)


@dataclass
class Waiting:
    activity_id: str
    card: dict[str, Any]
    day: int


@dataclass
class Tally:
    turns: int = 0
    answered: int = 0
    proposed: int = 0
    decided: int = 0
    max_rows: int = 0
    failures: list[str] = field(default_factory=list)

    def fail(self, what: str) -> None:
        if len(self.failures) < 10:
            self.failures.append(what)


@pytest.fixture
async def teams(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[Teams]:
    async with running_bot(copilot_settings) as running:
        yield running


def _schedule() -> list[int]:
    """The day of each turn: day 1 heavy (if the count allows), the rest spread evenly."""
    first = min(HEAVY_DAY_TURNS, TURNS)
    rest = TURNS - first
    later = DAYS - 1
    days = [0] * first
    for n in range(rest):
        days.append(1 + n * later // max(rest, 1))
    return days


async def _checkpoint_rows(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM checkpoints) + (SELECT count(*) FROM checkpoint_blobs)"
            " + (SELECT count(*) FROM checkpoint_writes)"
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def _rotations(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT count(*) FROM threads WHERE rotated_to IS NOT NULL")
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def _threads_created_before(url: str, when: dt.datetime) -> int:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT count(*) FROM threads WHERE created_at < %s", (when,))
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


def _text(recorded: Recorded) -> str:
    text = str(recorded.body.get("text") or "")
    for attachment in recorded.body.get("attachments") or []:
        text += repr(attachment.get("content"))
    return text


def _approval(recorded: Recorded) -> dict[str, Any] | None:
    try:
        card = card_of(recorded)
    except AssertionError:
        return None
    return card if find_actions(card, "Approve") else None


async def _decide(teams: Teams, waiting: Waiting, tally: Tally) -> None:
    tally.turns += 1
    [approve] = find_actions(waiting.card, "Approve")
    await teams.submit(waiting.activity_id, approve["data"])
    shown = repr(teams.connector.latest_content(waiting.activity_id))
    if "✓ Approved" in shown:
        tally.answered += 1
        tally.decided += 1
    else:
        tally.fail(f"approving the card of day {waiting.day} showed {shown[:300]}")


async def test_one_teams_conversation_lasts_a_month_with_the_shipped_limits(
    teams: Teams, copilot_settings: Settings
):
    assert copilot_settings.model_call_thread_limit == 200
    assert copilot_settings.model_call_run_limit == 12
    assert teams.runtime is not None
    url = copilot_settings.database_url.get_secret_value()  # type: ignore[union-attr]
    start = dt.datetime(2026, 3, 2, 8, 0, tzinfo=dt.UTC)
    now = start
    teams.runtime.service.clock = lambda: now
    tally = Tally()
    waiting: list[Waiting] = []
    today = -1
    for n, day in enumerate(_schedule()):
        if day != today:
            today = day
            now = start + dt.timedelta(days=day)
            for card in [w for w in waiting if day - w.day >= DECIDE_AFTER_DAYS]:
                await _decide(teams, card, tally)
                waiting.remove(card)
        else:
            now += dt.timedelta(minutes=3)
        # A proposal pends on its thread, and questions asked meanwhile run beside it
        # (not counted on the thread): day 1 proposes only once its thread has rotated.
        late_on_day_one = n == min(HEAVY_DAY_TURNS, TURNS) - 5
        due = late_on_day_one if day == 0 else n % PROPOSE_EVERY == PROPOSE_EVERY - 1
        propose = due and not any(w.day == day for w in waiting)
        text = WRITES[tally.proposed % len(WRITES)] if propose else QUESTIONS[n % len(QUESTIONS)]
        sent = len(teams.connector.messages())
        tally.turns += 1
        await teams.say(text)
        replies = teams.connector.messages()[sent:]
        shown = " ".join(_text(r) for r in replies)
        refused = [r for r in REFUSALS if r.lower() in shown.lower()]
        if not replies or refused:
            tally.fail(f"turn {n} (day {day}) {text!r}: {shown[:300] or 'no reply'}")
        else:
            tally.answered += 1
        if propose:
            cards = [(r, c) for r in replies if (c := _approval(r)) is not None]
            if len(cards) == 1:
                tally.proposed += 1
                waiting.append(Waiting(cards[0][0].activity_id or "", cards[0][1], day))
            else:
                tally.fail(f"turn {n} (day {day}) {text!r} posted {len(cards)} approval cards: {shown[:300]}")
        tally.max_rows = max(tally.max_rows, await _checkpoint_rows(url))
    for card in waiting:
        now += dt.timedelta(minutes=3)
        await _decide(teams, card, tally)
    tally.max_rows = max(tally.max_rows, await _checkpoint_rows(url))
    rotations = await _rotations(url)
    day_one = await _threads_created_before(url, start + dt.timedelta(days=1))

    line = (
        f"long-conversation: turns {tally.turns}, answered {tally.answered}, rotations {rotations}, "
        f"pending decided {tally.decided}/{tally.proposed}, max checkpoint rows per conversation {tally.max_rows}"
    )
    print(line)
    SUMMARY_FILE.parent.mkdir(parents=True, exist_ok=True)
    with SUMMARY_FILE.open("a", encoding="utf-8") as out:
        out.write(line + "\n")
    assert not tally.failures, tally.failures
    assert tally.answered == tally.turns
    assert tally.decided == tally.proposed > 0
    # Day 1 rotates at the limit's headroom at least once; each later day after the night.
    assert rotations >= DAYS, line
    assert day_one >= 2, f"day 1 never met the headroom: {day_one} thread(s); {line}"
    # Bounded: the current thread's checkpoints (at most one day's runs, or the runs up to
    # the headroom: about 88 questions of two model calls) plus the latest checkpoint of each
    # thread still waiting on a decision. Measured: 204, the heavy day's thread just before
    # its rotation, in CI and over the month alike (with the compaction of rotated threads
    # removed, the month reached 897 and kept growing).
    assert tally.max_rows <= ROWS_BOUND, line
