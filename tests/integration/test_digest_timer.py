"""The daily digest in Teams, in-process: the bot runtime against the sandbox, embedded PostgreSQL and
the fake Bot Connector. A rep who said "digest on" gets one digest card per local day at their
digest time (however often and however concurrently the timer runs, and after a failed post);
"Not useful" and "Snooze" are stored, confirmed and counted by approval analytics, and a snoozed
record is left out of the next day's digest; ``digest me`` answers with today's."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from bot.cards import SNOOZE_INPUT_ID
from bot.digest_delivery import deliver_digests
from copilot.analytics.queries import Filters, fetch
from copilot.analytics.report import Proactive, summarise, to_text
from copilot.briefs.schedule import DIGEST_GRACE
from copilot.persistence.database import connect
from copilot.settings import Settings
from tests.integration.test_brief_timer import _aad, _as, _seeded_day, _set
from tests.support.fake_connector import Recorded, card_of, find_actions
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import Teams, running_bot
from tests.support.working_hours import working_hours

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    """This module's sandbox is seeded from a named day (``tests/support/moments.py``)."""
    return pinned_sandbox


LA = ZoneInfo("America/Los_Angeles")


@pytest.fixture
async def teams(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[Teams]:
    # alex works every day in Los Angeles here, so the tests hold whatever weekday it is.
    with working_hours(sandbox, "alex", zone="America/Los_Angeles", start="08:00:00", end="17:00:00"):
        async with running_bot(copilot_settings) as running:
            yield running


def _digests(teams: Teams) -> list[tuple[str, Recorded]]:
    """(local day, message) of every digest card the fake connector received."""
    found = []
    for message in teams.connector.messages():
        try:
            card = card_of(message)
        except AssertionError:
            continue
        header = str(card["body"][0].get("id", ""))
        if header.startswith("digest-"):
            found.append((header.removeprefix("digest-"), message))
    return found


def _day(sandbox: SandboxProcess, offset: int) -> date:
    return (_seeded_day(sandbox) + timedelta(days=offset)).date()


def _at(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=LA)


def _lines(card: dict[str, Any]) -> list[str]:
    """The digest's lines (its "- …" text blocks)."""
    return [
        str(block["text"])
        for section in card["body"]
        for block in section.get("items", [])
        if str(block.get("text", "")).startswith("- ")
    ]


def _snooze_choices(card: dict[str, Any]) -> dict[str, str]:
    [panel] = [a for a in card["actions"] if a["type"] == "Action.ShowCard"]
    [choices] = [i for i in panel["card"]["body"] if i["type"] == "Input.ChoiceSet"]
    return {c["value"]: c["title"] for c in choices["choices"]}


async def test_a_reps_digest_is_posted_once_per_day_across_overlapping_runs_and_retries(
    teams: Teams, sandbox: SandboxProcess, copilot_settings: Settings
) -> None:
    reply = await _set(teams, "alex", "digest at 7:30am")
    assert "the daily digest is on, every working day at 07:30" in reply, reply
    assert teams.runtime is not None
    day = _day(sandbox, 1)

    early = await deliver_digests(teams.runtime, at=_at(day, 7, 29))
    runs = await asyncio.gather(
        deliver_digests(teams.runtime, at=_at(day, 7, 30)),
        deliver_digests(teams.runtime, at=_at(day, 7, 31)),
    )
    retry = await deliver_digests(teams.runtime, at=_at(day, 7, 45))

    assert early.posted == []
    assert early.not_due == 1
    assert sorted(len(r.posted) for r in runs) == [0, 1]
    assert retry.posted == []
    assert retry.already_posted == 1
    posted = _digests(teams)
    assert [d for d, _ in posted] == [day.isoformat()]
    assert {m.conversation_id for _, m in posted} == {"conv-alex-personal"}
    async with connect(copilot_settings) as conn:
        cur = await conn.execute("SELECT day, activity_id FROM digest_claims")
        [claim] = await cur.fetchall()
    assert claim["day"] == day
    assert claim["activity_id"] is not None


async def test_a_digest_whose_post_failed_is_posted_by_the_next_run_late_but_not_after_the_grace(
    teams: Teams, sandbox: SandboxProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "the daily digest is on" in await _set(teams, "alex", "digest on")
    assert teams.runtime is not None
    runtime = teams.runtime
    day, other = _day(sandbox, 1), _day(sandbox, 2)

    async def connector_down(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Bot Connector unreachable")

    with monkeypatch.context() as patch:
        patch.setattr(runtime.adapter, "continue_conversation", connector_down)
        with pytest.raises(ConnectionError):
            await deliver_digests(runtime, at=_at(day, 7, 30))
    late = await deliver_digests(runtime, at=_at(day, 9, 0))
    too_late = await deliver_digests(runtime, at=_at(other, 7, 30) + DIGEST_GRACE)

    assert late.posted == [(_aad("alex"), day)]
    assert too_late.posted == []
    assert too_late.not_due == 1
    assert [d for d, _ in _digests(teams)] == [day.isoformat()]


async def test_a_digest_the_connector_refused_is_not_lost_and_the_next_run_posts_it(
    teams: Teams, sandbox: SandboxProcess
) -> None:
    assert "the daily digest is on" in await _set(teams, "alex", "digest on")
    assert teams.runtime is not None
    runtime = teams.runtime
    day = _day(sandbox, 1)
    teams.connector.fail_next.append((403, {}))

    refused = await deliver_digests(runtime, at=_at(day, 7, 30))
    retry = await deliver_digests(runtime, at=_at(day, 7, 45))

    assert (refused.posted, refused.failed) == ([], 1)
    assert [status for _, status, _ in teams.connector.failed] == [403]
    assert (retry.posted, retry.failed) == ([(_aad("alex"), day)], 0)
    assert [d for d, _ in _digests(teams)] == [day.isoformat()]


async def test_the_digest_follows_the_reps_week_in_their_zone(teams: Teams, sandbox: SandboxProcess) -> None:
    # megan: the seeded Sunday-Thursday week in Dubai; her 07:30 is 03:30 UTC.
    assert "the daily digest is on" in await _set(teams, "megan", "digest on")
    assert teams.runtime is not None
    seeded = _seeded_day(sandbox)
    friday = seeded + timedelta(days=(4 - seeded.weekday()) % 7, hours=3, minutes=30)
    sunday = seeded + timedelta(days=(6 - seeded.weekday()) % 7, hours=3, minutes=30)

    on_friday = await deliver_digests(teams.runtime, at=friday)
    on_sunday = await deliver_digests(teams.runtime, at=sunday)

    assert on_friday.posted == []
    assert on_sunday.posted == [(_aad("megan"), sunday.date())]


async def test_not_useful_and_snooze_are_stored_counted_and_the_snoozed_record_is_absent_the_next_day(
    teams: Teams, sandbox: SandboxProcess, copilot_settings: Settings
) -> None:
    assert "the daily digest is on" in await _set(teams, "alex", "digest on")
    assert teams.runtime is not None
    day = _day(sandbox, 1)
    await deliver_digests(teams.runtime, at=_at(day, 7, 30))
    [(_, message)] = _digests(teams)
    card = card_of(message)
    choices = _snooze_choices(card)
    # An overdue deal stays overdue tomorrow: snoozing it is what leaves it out.
    overdue = [t for t in _lines(card) if "close date" in t and "passed" in t]
    assert overdue, "alex has overdue deals in the seeded CRM"
    snoozed = re.findall(r"\[([^\]]+)\]", overdue[0])[0]
    assert snoozed in choices
    teams.conversation = "conv-alex-personal"

    [not_useful] = find_actions(card, "Not useful")
    await teams.submit(message.activity_id or "", not_useful["data"], aad=_aad("alex"))
    assert "not useful" in teams.last_text()
    [snooze_panel] = find_actions(card, "Snooze…")
    [snooze] = snooze_panel["card"]["actions"]
    await teams.submit(
        message.activity_id or "", {**snooze["data"], SNOOZE_INPUT_ID: snoozed}, aad=_aad("alex")
    )
    assert snoozed in teams.last_text()
    assert (day + timedelta(days=7)).isoformat() in teams.last_text()
    # A second press of "Not useful" is one rating, not two.
    await teams.submit(message.activity_id or "", not_useful["data"], aad=_aad("alex"))

    await deliver_digests(teams.runtime, at=_at(day + timedelta(days=1), 7, 30))

    days = _digests(teams)
    assert [d for d, _ in days] == [day.isoformat(), (day + timedelta(days=1)).isoformat()]
    tomorrow = card_of(days[1][1])
    assert snoozed not in repr(tomorrow)
    # Every line of the snoozed record is left out (an overdue deal may also be at risk).
    lines = sum(1 for t in _lines(card) if re.findall(r"\[([^\]]+)\]", t)[:1] == [snoozed])
    assert f"{lines} snoozed line{'s' if lines != 1 else ''} left out." in repr(tomorrow)
    assert set(choices) - {snoozed} & set(_snooze_choices(tomorrow)), "the other lines are still there"
    async with connect(copilot_settings) as conn:
        report = summarise(await fetch(conn, Filters()), since=None, tenant=None)
    assert report.proactive == Proactive(
        briefs_posted=0, digests_posted=2, not_useful=1, not_useful_rate=0.5, snoozes=1
    )
    assert "2 digests posted, 1 not useful (50.0 %), 1 snoozed" in to_text(report)


async def test_digest_me_answers_with_todays_digest_and_digest_off_stops_the_timer(
    teams: Teams, sandbox: SandboxProcess, copilot_settings: Settings
) -> None:
    await _as(teams, "alex", "digest me")
    card = card_of(teams.connector.messages()[-1])
    today = datetime.now(LA).date()
    assert card["body"][0]["id"] == f"digest-{today.isoformat()}"
    assert "America/Los_Angeles" in repr(card)
    assert card["actions"][0]["title"] == "Not useful"

    assert "the daily digest is on" in await _set(teams, "alex", "digest on")
    assert "the daily digest is off" in await _set(teams, "alex", "digest off")
    assert teams.runtime is not None
    report = await deliver_digests(teams.runtime, at=_at(_day(sandbox, 1), 7, 30))
    assert report.reps == 0
    async with connect(copilot_settings) as conn:
        cur = await conn.execute("SELECT digest_enabled FROM brief_settings")
        assert [r["digest_enabled"] for r in await cur.fetchall()] == [False]
