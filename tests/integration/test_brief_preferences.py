"""The rep's brief preferences and quiet hours, in-process: the bot runtime against the sandbox
(Graph calendar and mailboxSettings, CRM over MCP), embedded PostgreSQL and the fake Bot
Connector. Per-rep lead times, the Teams time zone, working hours in another zone, days off,
stale claims taken over after their lease, and ``brief me``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from bot import brief_store
from bot.brief_delivery import deliver_briefs
from bot.handler import BRIEFS_PRIVATE_ONLY, PRIVATE_ONLY
from bot.settings import BotSettings
from copilot.briefs.mailbox_settings import MAILBOX_SETTINGS_SCOPE, rep_schedule
from copilot.identity import RepIdentity
from copilot.persistence.database import connect
from copilot.posting import NO_CHAT
from copilot.settings import Settings
from tests.integration.test_brief_timer import BRIEFS_ON, _aad, _as, _briefs_posted, _seeded_day, _set
from tests.support.fake_connector import card_of
from tests.support.moments import SEED_MORNING, SteppingClock
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import TENANT, Teams, running_bot
from tests.support.working_hours import EVERY_DAY, working_hours

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    """This module's sandbox is seeded from a named day (``tests/support/moments.py``)."""
    return pinned_sandbox


WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


@pytest.fixture
async def teams(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[Teams]:
    async with running_bot(copilot_settings) as running:
        # "brief me" and "digest me" are about now: now is a named moment of the seeded day.
        running.set_clock(SteppingClock(SEED_MORNING))
        yield running


def _event(sandbox: SandboxProcess, subject: str) -> dict[str, Any]:
    state = sandbox.admin("GET", "/admin/export")
    return next(e for e in state["events"] if e["subject"] == subject)


def _start(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["start_at"].replace("Z", "+00:00"))


def _identity(handle: str) -> RepIdentity:
    return RepIdentity(tenant_id=TENANT, aad_object_id=_aad(handle), username=f"{handle}@contoso.example")


async def _settings_row(copilot_settings: Settings, handle: str) -> dict[str, Any]:
    async with connect(copilot_settings) as conn:
        cur = await conn.execute("SELECT * FROM brief_settings WHERE aad_object_id = %s", (_aad(handle),))
        row = await cur.fetchone()
    assert row is not None
    return dict(row)


async def test_a_reps_own_lead_time_and_teams_time_zone_are_stored_and_the_timer_uses_the_lead_time(
    teams: Teams, sandbox: SandboxProcess, copilot_settings: Settings
) -> None:
    teams.conversation = "conv-alex-personal"
    said = teams.activity(
        aad=_aad("alex"),
        text="brief 45 minutes before",
        entities=[{"type": "clientInfo", "locale": "en-US", "timezone": "America/Los_Angeles"}],
    )
    assert await teams.send(said) in (200, 201, 202)
    assert "Meeting prep briefs are on, 45 minutes before each meeting" in await teams.approve_last(
        _aad("alex")
    )
    row = await _settings_row(copilot_settings, "alex")
    assert (row["enabled"], row["lead_minutes"], row["time_zone"]) == (True, 45, "America/Los_Angeles")
    # A later turn from another zone updates it (the rep travelled), whatever it asks.
    moved = teams.activity(aad=_aad("alex"), text="my pipeline", localTimezone="Europe/Berlin")
    assert await teams.send(moved) in (200, 201, 202)
    assert (await _settings_row(copilot_settings, "alex"))["time_zone"] == "Europe/Berlin"
    assert teams.runtime is not None
    meeting = _start(_event(sandbox, "Acme renewal pricing review"))

    with working_hours(sandbox, "alex"):
        early = await deliver_briefs(teams.runtime, at=meeting - timedelta(minutes=50))
        in_time = await deliver_briefs(teams.runtime, at=meeting - timedelta(minutes=40))

    assert early.posted == []  # 50 minutes before: outside alex's 45 (the admin's is 60)
    assert [m for _, m in in_time.posted] == [_event(sandbox, "Acme renewal pricing review")["id"]]


async def test_a_rep_in_another_zone_gets_no_brief_in_quiet_hours_and_the_held_one_when_work_starts(
    teams: Teams, sandbox: SandboxProcess
) -> None:
    # megan works 08:00-17:00 in Dubai (UTC+4); alex around the clock. megan's "Account check-in"
    # with her customer starts 11:00 UTC (15:00 in Dubai).
    meeting = _event(sandbox, "Account check-in")
    start = _start(meeting)
    await _set(teams, "megan", "brief 480 minutes before")
    await _set(teams, "alex", "brief 1440 minutes before")
    assert teams.runtime is not None
    before_work = start.replace(hour=3, minute=30)  # 07:30 in Dubai
    work_starts = start.replace(hour=4, minute=0)  # 08:00 in Dubai

    with (
        working_hours(sandbox, "megan", zone="Arabian Standard Time", start="08:00:00", end="17:00:00"),
        working_hours(sandbox, "alex"),
    ):
        quiet = await deliver_briefs(teams.runtime, at=before_work)
        held = await deliver_briefs(teams.runtime, at=work_starts)

    assert quiet.quiet_hours == 1  # megan held; alex (working) got his
    assert quiet.posted
    assert {aad for aad, _ in quiet.posted} == {_aad("alex")}
    assert held.posted == [(_aad("megan"), meeting["id"])]
    megan_cards = [
        m for m, message in _briefs_posted(teams) if message.conversation_id == "conv-megan-personal"
    ]
    assert megan_cards == [meeting["id"]]


async def test_a_brief_held_by_quiet_hours_whose_meeting_started_before_work_is_not_posted(
    teams: Teams, sandbox: SandboxProcess
) -> None:
    start = _start(_event(sandbox, "Account check-in"))  # 11:00 UTC = 15:00 in Dubai
    await _set(teams, "megan", "brief 480 minutes before")
    assert teams.runtime is not None

    with working_hours(sandbox, "megan", zone="Asia/Dubai", start="16:00:00", end="17:00:00"):
        quiet = await deliver_briefs(teams.runtime, at=start.replace(hour=10))  # 14:00 in Dubai
        at_work = await deliver_briefs(teams.runtime, at=start.replace(hour=12))  # 16:00 in Dubai

    assert quiet.quiet_hours == 1
    assert at_work.posted == []
    assert _briefs_posted(teams) == []


async def test_nothing_is_posted_on_the_reps_day_off_and_weeks_follow_the_seeded_locales(
    teams: Teams, sandbox: SandboxProcess
) -> None:
    start = _start(_event(sandbox, "Account check-in"))
    await _set(teams, "megan", "brief 480 minutes before")
    await _set(teams, "alex", "brief 1440 minutes before")
    assert teams.runtime is not None
    # Her meeting's day (in Dubai) is not one of her working days this time.
    day = WEEKDAYS[(start + timedelta(hours=4)).weekday()]
    other_days = [d for d in EVERY_DAY if d != day]
    with working_hours(sandbox, "megan", zone="Asia/Dubai", days=other_days), working_hours(sandbox, "alex"):
        off = await deliver_briefs(teams.runtime, at=start - timedelta(hours=2))
    assert off.day_off == 1
    assert all(aad != _aad("megan") for aad, _ in off.posted)

    # The seeded settings: megan Sunday-Thursday in Dubai ("Arabian Standard Time", a Windows
    # name), alex Monday-Friday 08:00-17:00 in Los Angeles ("Pacific Standard Time").
    seeded = _seeded_day(sandbox)
    friday = seeded + timedelta(days=(4 - seeded.weekday()) % 7, hours=6)  # 10:00 Dubai, Thu 22:00 LA
    sunday = seeded + timedelta(days=(6 - seeded.weekday()) % 7, hours=6)  # 10:00 Dubai, Sat 22:00 LA
    on_friday = await deliver_briefs(teams.runtime, at=friday)
    on_sunday = await deliver_briefs(teams.runtime, at=sunday)
    assert (on_friday.day_off, on_friday.quiet_hours) == (1, 1)  # megan's weekend, alex's evening
    assert (on_sunday.day_off, on_sunday.quiet_hours) == (1, 0)  # alex's weekend, megan at work


class _NoMailboxConsent:
    """A rep's broker whose mailbox-settings token lacks ``MailboxSettings.Read`` (as without consent)."""

    def __init__(self, broker: Any, calendar_scope: str) -> None:
        self.broker = broker
        self.calendar_scope = calendar_scope

    async def token_for(self, scopes: list[str]) -> str:
        if any(s.endswith(MAILBOX_SETTINGS_SCOPE) for s in scopes):
            return str(await self.broker.token_for([self.calendar_scope]))
        return str(await self.broker.token_for(scopes))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.broker, name)


async def test_without_readable_mailbox_settings_the_teams_zone_and_monday_to_friday_eight_to_six_hold(
    teams: Teams, copilot_settings: Settings
) -> None:
    assert teams.runtime is not None
    rep = await teams.runtime.reps.rep_for(TENANT, _aad("alex"))
    assert rep is not None
    readable = await rep_schedule(copilot_settings, rep.broker, "Asia/Tokyo")
    refused = _NoMailboxConsent(rep.broker, f"{copilot_settings.graph_resource}/Calendars.Read")

    fallback = await rep_schedule(copilot_settings, refused, "Asia/Tokyo")

    assert (readable.source, readable.zone) == ("mailbox", "America/Los_Angeles")
    assert (fallback.source, fallback.zone, fallback.start.hour, fallback.end.hour) == (
        "fallback",
        "Asia/Tokyo",
        8,
        18,
    )
    assert fallback.days == ("monday", "tuesday", "wednesday", "thursday", "friday")


async def test_a_live_claim_holds_and_a_stale_one_without_a_post_is_taken_over_once(
    teams: Teams, sandbox: SandboxProcess, copilot_settings: Settings
) -> None:
    await _set(teams, "alex", "brief on")
    assert teams.runtime is not None
    pool = teams.runtime.service.pool
    meeting = _event(sandbox, "Acme renewal pricing review")
    alex = _identity("alex")
    # An instance claimed the brief and was killed before posting (no activity id).
    assert await brief_store.claim_brief(pool, alex, meeting["id"])
    at = _start(meeting) - timedelta(minutes=30)

    with working_hours(sandbox, "alex"):
        live = await deliver_briefs(teams.runtime, at=at)
        async with connect(copilot_settings) as conn:
            await conn.execute(
                "UPDATE brief_claims SET claimed_at = claimed_at - %s WHERE meeting_id = %s",
                (brief_store.CLAIM_LEASE + timedelta(minutes=1), meeting["id"]),
            )
        stale = await deliver_briefs(teams.runtime, at=at)
        again = await deliver_briefs(teams.runtime, at=at)

    assert live.posted == []
    assert live.already_posted == 1
    assert stale.posted == [(_aad("alex"), meeting["id"])]
    assert again.posted == []
    assert [m for m, _ in _briefs_posted(teams)] == [meeting["id"]]
    # A posted claim is final however old it is.
    async with connect(copilot_settings) as conn:
        await conn.execute("UPDATE brief_claims SET claimed_at = claimed_at - interval '1 day'")
    assert not await brief_store.claim_brief(pool, alex, meeting["id"])


async def test_two_instances_taking_over_one_stale_claim_at_once_get_it_once(
    teams: Teams, copilot_settings: Settings
) -> None:
    assert teams.runtime is not None
    pool = teams.runtime.service.pool
    alex = _identity("alex")
    day = date(2026, 12, 3)
    assert await brief_store.claim(pool, "digest_claims", alex, day)
    async with connect(copilot_settings) as conn:
        await conn.execute("UPDATE digest_claims SET claimed_at = claimed_at - interval '1 hour'")

    results = await asyncio.gather(*(brief_store.claim(pool, "digest_claims", alex, day) for _ in range(4)))

    assert sorted(r is not None for r in results) == [False, False, False, True]


async def test_a_claim_taken_over_while_its_post_was_composed_is_not_posted_by_the_first_instance(
    teams: Teams, copilot_settings: Settings
) -> None:
    """Composing a digest reads the CRM and may outlast the lease: the first instance confirms
    its claim before posting, finds it taken over, and leaves the post to the new holder (and
    its failure cannot give the new holder's claim back)."""
    assert teams.runtime is not None
    pool = teams.runtime.service.pool
    alex = _identity("alex")
    day = date(2026, 12, 4)
    first = await brief_store.claim(pool, "digest_claims", alex, day)
    assert first is not None
    async with connect(copilot_settings) as conn:
        await conn.execute("UPDATE digest_claims SET claimed_at = claimed_at - interval '1 hour'")
    second = await brief_store.claim(pool, "digest_claims", alex, day)
    assert second is not None

    assert await brief_store.confirm_claim(pool, "digest_claims", alex, day, first) is None
    await brief_store.release_claim(pool, "digest_claims", alex, day, first)
    assert await brief_store.confirm_claim(pool, "digest_claims", alex, day, second) is not None


async def test_brief_me_answers_with_the_next_customer_meeting_or_says_there_is_none(
    teams: Teams, sandbox: SandboxProcess
) -> None:
    state = sandbox.admin("GET", "/admin/export")
    now = SEED_MORNING
    customer = ("Acme analytics add-on: order form", "Acme renewal pricing review")
    upcoming = sorted(
        (e for e in state["events"] if e["subject"] in customer and _start(e) > now), key=_start
    )

    await _as(teams, "alex", "brief me")
    card = card_of(teams.connector.messages()[-1])
    assert card["body"][0]["id"] == f"brief-{upcoming[0]['id']}"
    # Its time in alex's zone (his mailbox settings: Pacific), as the digest and the CLI show it.
    local = _start(upcoming[0]).astimezone(ZoneInfo("America/Los_Angeles"))
    header = repr(card["body"][0])
    assert "America/Los_Angeles" in header, header
    assert f"{local:%-I:%M}" in header, header
    assert "UTC" not in header
    assert "Log this meeting" not in repr(card), "the meeting has not started"
    # adele's calendar holds no meeting at all.
    # adele may not use the CRM: she is told so plainly, and gets no card.
    start = len(teams.connector.messages())
    reply = await _as(teams, "adele", "brief me")
    assert "access to the CRM" in reply, reply
    assert not any(m.body.get("attachments") for m in teams.connector.messages()[start:])


async def test_brief_me_and_the_preferences_are_refused_in_a_group_chat(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    async with running_bot(copilot_settings) as teams:
        assert PRIVATE_ONLY in await _as(teams, "alex", "brief me", conversation_type="groupChat")
    async with running_bot(
        copilot_settings, BotSettings(MicrosoftAppId="", COPILOT_GROUP_ANSWERS=True)
    ) as teams:
        # A moment of the seeded days, so there is a next meeting to brief on (whatever today is).
        teams.set_clock(SteppingClock(SEED_MORNING))
        for command in ("brief me", "digest me"):
            assert BRIEFS_PRIVATE_ONLY in await _as(teams, "alex", command, conversation_type="groupChat")
        # A setting said in the group is not set up from there: no 1:1 chat of his is known.
        for command in ("brief 30 minutes before", "digest on"):
            assert NO_CHAT in await _as(teams, "alex", command, conversation_type="groupChat")
        async with connect(copilot_settings) as conn:
            cur = await conn.execute("SELECT count(*) AS n FROM brief_settings")
            assert (await cur.fetchone() or {})["n"] == 0


async def test_a_bad_value_is_refused_in_the_chat_and_nothing_is_stored(
    teams: Teams, copilot_settings: Settings
) -> None:
    assert "hours 0 to 23" in await _as(teams, "alex", "digest at 25:00")
    assert "greater than or equal to 5" in await _as(teams, "alex", "brief 2 minutes before")
    assert BRIEFS_ON in await _set(teams, "alex", "brief on")
    row = await _settings_row(copilot_settings, "alex")
    assert (row["lead_minutes"], row["digest_enabled"], str(row["digest_time"])) == (None, False, "07:30:00")
