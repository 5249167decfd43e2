"""The brief timer in-process: the bot runtime against the sandbox, embedded PostgreSQL and the fake
Bot Connector. A rep who said "brief on" gets exactly one brief card per meeting however often
(and however concurrently) the timer runs; a rep with briefs off, and a group chat, get none."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from bot.brief_delivery import deliver_briefs
from bot.cards import brief_card
from bot.handler import PRIVATE_ONLY
from bot.settings import BotSettings
from copilot.briefs.service import briefs_at
from copilot.persistence.database import connect
from copilot.posting import NO_CHAT
from copilot.settings import Settings
from copilot.writes import title
from sandbox.directory import find_user
from tests.support.fake_connector import Recorded, card_of, find_actions
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import Teams, running_bot
from tests.support.working_hours import working_hours

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    """This module's sandbox is seeded from a named day (``tests/support/moments.py``)."""
    return pinned_sandbox


WINDOW = 5 * 24 * 60
"""Lead minutes covering every seeded meeting of the coming days."""


@pytest.fixture
async def teams(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[Teams]:
    # alex works around the clock here, so these tests hold whatever weekday the sandbox was
    # seeded on; quiet hours and days off have their own tests (test_brief_preferences.py).
    with working_hours(sandbox, "alex"):
        async with running_bot(copilot_settings) as running:
            yield running


def _aad(handle: str) -> str:
    user = find_user(handle)
    assert user is not None
    return user.aad_object_id


async def _as(teams: Teams, handle: str, text: str, *, conversation_type: str = "personal") -> str:
    """``handle`` says ``text`` (in their 1:1 chat unless told); returns the bot's reply."""
    teams.conversation = f"conv-{handle}-{conversation_type}"
    activity = teams.activity(aad=_aad(handle), text=text)
    activity["conversation"]["conversationType"] = conversation_type
    assert await teams.send(activity) in (200, 201, 202)
    return teams.last_text()


async def _set(teams: Teams, handle: str, text: str) -> str:
    """``handle`` asks for a brief/digest setting in their 1:1 chat and approves its card; the
    card's outcome (what the setting now is) as text."""
    await _as(teams, handle, text)
    return await teams.approve_last(_aad(handle))


BRIEFS_ON = "Meeting prep briefs are on"
BRIEFS_OFF = "Meeting prep briefs are off"


def _seeded_day(sandbox: SandboxProcess) -> datetime:
    """Midnight (UTC) of the day the sandbox seeded its calendar from (meetings follow it)."""
    state: dict[str, list[dict[str, Any]]] = sandbox.admin("GET", "/admin/export")
    first = min(datetime.fromisoformat(e["start_at"].replace("Z", "+00:00")) for e in state["events"])
    return first.replace(hour=0, minute=0, second=0, microsecond=0)


def _briefs_posted(teams: Teams) -> list[tuple[str, Recorded]]:
    """(meeting id, message) of every brief card the fake connector received."""
    posted = []
    for message in teams.connector.messages():
        try:
            card = card_of(message)
        except AssertionError:
            continue
        header_id = str(card["body"][0].get("id", ""))
        if header_id.startswith("brief-"):
            posted.append((header_id.removeprefix("brief-"), message))
    return posted


async def test_a_rep_with_briefs_on_gets_exactly_one_card_per_meeting_across_repeated_and_concurrent_runs(
    teams: Teams, sandbox: SandboxProcess
) -> None:
    assert BRIEFS_ON in await _set(teams, "alex", "brief on")
    at = _seeded_day(sandbox)
    assert teams.runtime is not None

    first = await deliver_briefs(teams.runtime, at=at, lead_minutes=WINDOW)
    second = await deliver_briefs(teams.runtime, at=at, lead_minutes=WINDOW)
    concurrent = await asyncio.gather(
        deliver_briefs(teams.runtime, at=at, lead_minutes=WINDOW),
        deliver_briefs(teams.runtime, at=at, lead_minutes=WINDOW),
    )

    posted = _briefs_posted(teams)
    meetings = [meeting for meeting, _ in posted]
    # alex's seeded meetings with a CRM contact alex may see (not the internal ones, not the
    # hidden account's "Introduction call").
    assert len(meetings) >= 3, meetings
    assert len(meetings) == len(set(meetings)), f"a meeting was briefed twice: {meetings}"
    assert sorted(meetings) == sorted(m for _, m in first.posted)
    assert second.posted == []
    assert second.already_posted == len(meetings)
    assert [r.posted for r in concurrent] == [[], []]
    # Posted to alex's 1:1 chat, where "brief on" was said.
    assert {message.conversation_id for _, message in posted} == {"conv-alex-personal"}
    # Each card offers the button that goes the normal proposal path; "Log this meeting" is
    # not offered, since a brief is posted before its meeting starts.
    for _, message in posted:
        titles = [a["title"] for a in card_of(message).get("actions", [])]
        assert titles == ["Draft follow-up"]
    tried = 4
    failures = sum(1 for m in set(meetings) if meetings.count(m) != 1)
    print(f"briefs: tried {tried}, failures {failures}")


async def test_a_rep_who_turned_briefs_off_or_never_on_gets_none(
    teams: Teams, sandbox: SandboxProcess
) -> None:
    assert BRIEFS_ON in await _set(teams, "alex", "brief on")
    assert BRIEFS_OFF in await _set(teams, "alex", "brief off")
    assert teams.runtime is not None

    report = await deliver_briefs(teams.runtime, at=_seeded_day(sandbox), lead_minutes=WINDOW)

    assert report.reps == 0
    assert report.posted == []
    assert _briefs_posted(teams) == []


async def test_a_group_chat_never_gets_a_brief(
    teams: Teams, sandbox: SandboxProcess, copilot_settings: Settings
) -> None:
    # Said in a group chat, "brief on" is refused (the group never hears CRM facts anyway).
    reply = await _as(teams, "alex", "brief on", conversation_type="groupChat")
    assert PRIVATE_ONLY in reply
    # And a stored group reference (as if left by an older version) is never posted to.
    assert BRIEFS_ON in await _set(teams, "alex", "brief on")
    async with connect(copilot_settings) as conn:
        cur = await conn.execute("SELECT reference FROM brief_settings")
        [row] = await cur.fetchall()
        reference = dict(row["reference"])
        reference["conversation"] = {**reference["conversation"], "conversationType": "groupChat"}
        await conn.execute("UPDATE brief_settings SET reference = %s", (Jsonb(reference),))
    assert teams.runtime is not None

    report = await deliver_briefs(teams.runtime, at=_seeded_day(sandbox), lead_minutes=WINDOW)

    assert report.group_chats == 1
    assert report.posted == []
    assert _briefs_posted(teams) == []


class _NoStoredTokens:
    """The token store of a rep who never signed in (``SsoRepTokens`` without a row)."""

    async def rep_for(self, tenant_id: str, aad_object_id: str) -> None:
        return None


async def test_a_rep_without_a_stored_token_gets_nothing_and_nothing_is_read(
    teams: Teams, sandbox: SandboxProcess
) -> None:
    assert BRIEFS_ON in await _set(teams, "alex", "brief on")
    assert teams.runtime is not None
    signed_out = dataclasses.replace(teams.runtime, reps=_NoStoredTokens())

    report = await deliver_briefs(signed_out, at=_seeded_day(sandbox), lead_minutes=WINDOW)

    assert report.not_signed_in == 1
    assert report.posted == []
    assert _briefs_posted(teams) == []


async def test_a_brief_whose_post_failed_is_posted_by_the_next_run(
    teams: Teams, sandbox: SandboxProcess, copilot_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert BRIEFS_ON in await _set(teams, "alex", "brief on")
    assert teams.runtime is not None
    runtime = teams.runtime

    async def connector_down(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Bot Connector unreachable")

    with monkeypatch.context() as patch:
        patch.setattr(runtime.adapter, "continue_conversation", connector_down)
        with pytest.raises(ConnectionError):
            await deliver_briefs(runtime, at=_seeded_day(sandbox), lead_minutes=WINDOW)
    assert _briefs_posted(teams) == []
    async with connect(copilot_settings) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM brief_claims")
        assert (await cur.fetchone() or {})["n"] == 0, "the failed post's claim was given back"

    retry = await deliver_briefs(runtime, at=_seeded_day(sandbox), lead_minutes=WINDOW)

    meetings = [meeting for meeting, _ in _briefs_posted(teams)]
    assert len(meetings) >= 3
    assert sorted(meetings) == sorted(set(meetings)) == sorted(m for _, m in retry.posted)


async def test_a_brief_the_connector_refused_is_not_lost_and_the_next_run_posts_it(
    teams: Teams, sandbox: SandboxProcess, copilot_settings: Settings
) -> None:
    # The connector refuses the brief's send (403: not retried, unlike a 429 or 5xx the
    # connector client retries itself); the adapter gives that error to the turn-error handler
    # and returns normally, so the post must not count as done.
    assert BRIEFS_ON in await _set(teams, "alex", "brief on")
    assert teams.runtime is not None
    runtime = teams.runtime
    teams.connector.fail_next.extend([(403, {})] * 2)

    refused = await deliver_briefs(runtime, at=_seeded_day(sandbox), lead_minutes=WINDOW)

    assert [status for _, status, _ in teams.connector.failed] == [403, 403]
    assert refused.failed == 2
    async with connect(copilot_settings) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM brief_claims WHERE activity_id = ''")
        assert (await cur.fetchone() or {})["n"] == 0, "no refused brief was recorded as posted"
    retry = await deliver_briefs(runtime, at=_seeded_day(sandbox), lead_minutes=WINDOW)

    meetings = [meeting for meeting, _ in _briefs_posted(teams)]
    assert retry.failed == 0
    assert len(retry.posted) == 2, "exactly the two refused briefs are posted by the next run"
    assert len(meetings) == len(set(meetings)) == len(refused.posted) + 2


async def test_log_this_meeting_on_a_started_meetings_brief_proposes_the_activity_through_the_approval_card(
    teams: Teams, sandbox: SandboxProcess
) -> None:
    assert BRIEFS_ON in await _set(teams, "alex", "brief on")
    assert teams.runtime is not None
    await deliver_briefs(teams.runtime, at=_seeded_day(sandbox), lead_minutes=WINDOW)
    acme = next(
        message
        for _, message in _briefs_posted(teams)
        if "Acme renewal pricing review" in repr(card_of(message))
    )
    assert find_actions(card_of(acme), "Log this meeting") == [], "posted before the meeting started"
    # The same brief's card once the meeting has started offers it.
    async with teams.runtime.service.pool.connection() as conn:
        rep = await teams.runtime.reps.rep_for("", _aad("alex"))
        assert rep is not None
        run = await briefs_at(
            teams.runtime.settings,
            rep.identity,
            rep.broker,
            conn,
            at=_seeded_day(sandbox),
            lead_minutes=WINDOW,
        )
    brief = next(b for b in run.briefs if b.subject == "Acme renewal pricing review")
    [button] = find_actions(brief_card(brief, now=brief.start), "Log this meeting")
    before = len(teams.connector.messages())

    teams.conversation = "conv-alex-personal"
    await teams.submit(acme.activity_id or "", button["data"], aad=_aad("alex"))

    approvals = [
        card_of(m)
        for m in teams.connector.messages()[before:]
        if m.body.get("attachments") and find_actions(card_of(m), "Approve")
    ]
    assert len(approvals) == 1, teams.last_text()
    assert title("log_activity") in repr(approvals[0])
    assert "Acme renewal pricing review" in repr(approvals[0])


async def test_where_group_answers_are_on_brief_on_in_a_group_chat_is_not_set_up_there(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    async with running_bot(
        copilot_settings, BotSettings(MicrosoftAppId="", COPILOT_GROUP_ANSWERS=True)
    ) as teams:  # (no working hours needed: nothing is posted)
        # No 1:1 chat with alex is known: nothing is proposed, he is told where to say it.
        reply = await _as(teams, "alex", "brief on", conversation_type="groupChat")
        assert NO_CHAT in reply
        assert teams.runtime is not None
        report = await deliver_briefs(teams.runtime, at=_seeded_day(sandbox), lead_minutes=WINDOW)
    assert report.reps == 0
    assert _briefs_posted(teams) == []
