"""The meeting followed through (``copilot/followthrough.py``, ``bot/followthrough_delivery.py``):
after a customer meeting on the rep's calendar ends, one "How did it go?" card in their 1:1 chat,
pre-filled from the calendar and the CRM; each suggestion proposed only through its own approval
card; "Not now" holds a suggestion back; a hidden account's meeting gets nothing.

The sandbox is seeded from a named day (``tests/support/moments.py``): "Acme analytics add-on:
order form" runs 17:00–17:30 UTC that day, with two Acme contacts; "Introduction call" (the next
day but one, 14:00–14:30) has only a contact of an East account alex may not see.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from bot.cards import NOT_NOW
from bot.followthrough_delivery import deliver_follow_throughs
from copilot.briefs import ledger
from copilot.persistence.database import connect
from copilot.settings import Settings
from copilot.writes import title
from sandbox.directory import find_user
from tests.support.fake_connector import Recorded, card_of, find_actions
from tests.support.moments import SEED_MIDNIGHT
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import Teams, running_bot
from tests.support.working_hours import working_hours

pytestmark = pytest.mark.integration

AFTER_ADD_ON = SEED_MIDNIGHT + timedelta(hours=17, minutes=40)
AFTER_HIDDEN = SEED_MIDNIGHT + timedelta(days=2, hours=14, minutes=40)


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    return pinned_sandbox


@pytest.fixture
async def teams(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[Teams]:
    with working_hours(sandbox, "alex"):
        async with running_bot(copilot_settings) as running:
            running.conversation = "conv-alex-personal"
            activity = running.activity(aad=_aad("alex"), text="brief on")
            assert await running.send(activity) in (200, 201, 202)
            assert "Meeting prep briefs are on" in await running.approve_last(_aad("alex"))
            yield running


def _aad(handle: str) -> str:
    user = find_user(handle)
    assert user is not None
    return user.aad_object_id


def _cards(teams: Teams) -> list[Recorded]:
    found = []
    for message in teams.connector.messages():
        try:
            card = card_of(message)
        except AssertionError:
            continue
        if "How did it go?" in repr(card["body"][0]):
            found.append(message)
    return found


async def test_one_card_after_the_meeting_across_repeated_and_concurrent_runs(teams: Teams):
    assert teams.runtime is not None
    first = await deliver_follow_throughs(teams.runtime, at=AFTER_ADD_ON)
    again = await asyncio.gather(*(deliver_follow_throughs(teams.runtime, at=AFTER_ADD_ON) for _ in range(3)))
    assert len(first.posted) == 1
    assert sum(len(r.posted) for r in again) == 0
    [posted] = _cards(teams)
    card = repr(card_of(posted))
    assert "Acme analytics add-on: order form" in card
    assert "opp-acme-analytics" in card  # the deal the meeting was about, cited
    for button in ("Log this meeting", "Set the next step", "Add the task"):
        assert find_actions(card_of(posted), button), button


async def test_a_hidden_accounts_meeting_gets_no_card_and_names_nothing(
    teams: Teams, sandbox: SandboxProcess
):
    assert teams.runtime is not None
    report = await deliver_follow_throughs(teams.runtime, at=AFTER_HIDDEN)
    assert report.posted == []
    assert _cards(teams) == []


async def test_log_this_meeting_is_proposed_on_its_own_approval_card_and_not_now_holds_a_suggestion_back(
    teams: Teams, copilot_settings: Settings
):
    assert teams.runtime is not None
    await deliver_follow_throughs(teams.runtime, at=AFTER_ADD_ON)
    [posted] = _cards(teams)
    [log] = find_actions(card_of(posted), "Log this meeting")
    before = len(teams.connector.messages())
    await teams.submit(posted.activity_id or "", log["data"], aad=_aad("alex"))
    approvals = [
        card_of(m)
        for m in teams.connector.messages()[before:]
        if m.body.get("attachments") and find_actions(card_of(m), "Approve")
    ]
    assert len(approvals) == 1, teams.last_text()
    assert title("log_activity") in repr(approvals[0])

    # "Not now" on the task: it is declined at the deal's version and not offered again.
    not_now = [a for a in find_actions(card_of(posted), NOT_NOW) if a["data"].get("kind") == "follow_up_task"]
    await teams.submit(posted.activity_id or "", not_now[0]["data"], aad=_aad("alex"))
    from copilot.followthrough import follow_throughs_at
    from tests.support.copilot_env import sign_in

    rep = await sign_in(copilot_settings, "alex")
    async with connect(copilot_settings) as conn:
        entries = await ledger.entries(conn, rep.identity, "opp-acme-analytics")
        assert ("follow_up_task", "declined") in {(e.kind, e.state) for e in entries}
        [again] = await follow_throughs_at(copilot_settings, rep.identity, rep.broker, conn, at=AFTER_ADD_ON)
    assert "follow_up_task" not in {s.kind for s in again.suggestions}
    assert {"log_meeting", "set_next_step"} <= {s.kind for s in again.suggestions}


def _graph(sandbox: SandboxProcess, handle: str, path: str, scopes: list[str]) -> Any:
    import httpx

    token = sandbox.token(handle, scopes, audience=sandbox.settings.graph_audience)
    return httpx.get(
        f"{sandbox.settings.http_base_url}/v1.0/me/onlineMeetings/{path}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def test_the_sandbox_serves_a_meetings_transcript_in_graphs_shape_to_who_was_there_and_may_read_it(
    sandbox: SandboxProcess,
):
    events = sandbox.admin("GET", "/admin/export")["events"]
    meeting = next(e for e in events if e["subject"] == "Acme analytics add-on: order form")
    transcripts = _graph(
        sandbox, "alex", f"{meeting['id']}/transcripts", ["OnlineMeetingTranscript.Read.All"]
    )
    assert transcripts.status_code == 200
    [found] = transcripts.json()["value"]
    content = _graph(
        sandbox,
        "alex",
        f"{meeting['id']}/transcripts/{found['id']}/content",
        ["OnlineMeetingTranscript.Read.All"],
    )
    assert content.headers["content-type"].startswith("text/vtt")
    assert content.text.startswith("WEBVTT")
    assert "<v Tom Becker>" in content.text
    # Without the permission: 403; a meeting the caller was not in: 404.
    denied = _graph(sandbox, "alex", f"{meeting['id']}/transcripts", ["Calendars.Read"])
    assert denied.status_code == 403
    assert denied.json()["error"]["code"] == "ErrorAccessDenied"
    assert (
        _graph(
            sandbox, "megan", f"{meeting['id']}/transcripts", ["OnlineMeetingTranscript.Read.All"]
        ).status_code
        == 404
    )


async def test_with_a_real_model_the_next_step_comes_from_the_transcript_citing_its_lines_and_not_another_accounts(
    copilot_settings: Settings, sandbox: SandboxProcess, monkeypatch: pytest.MonkeyPatch
):
    import json

    from copilot.followthrough import follow_throughs_at
    from copilot.models.factory import build_model
    from tests.support.copilot_env import sign_in
    from tests.support.fake_openai import FakeOpenAI, call, tool_calls, use_openai_at

    events = sandbox.admin("GET", "/admin/export")["events"]
    meeting = next(e for e in events if e["subject"] == "Acme analytics add-on: order form")
    with FakeOpenAI() as fake:
        use_openai_at(monkeypatch, fake)
        fake.script(
            tool_calls(
                call(
                    "draft_follow_through",
                    next_step="Procurement sign-off once legal is done",
                    task="Send the revised order form with the multi-year option",
                    lines=[2, 3, 4, 9],
                )
            )
        )
        rep = await sign_in(copilot_settings, "alex")
        async with connect(copilot_settings) as conn:
            [follow] = await follow_throughs_at(
                copilot_settings,
                rep.identity,
                rep.broker,
                conn,
                at=AFTER_ADD_ON,
                model=build_model("openai:gpt-test"),
            )
        (request,) = fake.requests
    sent = json.dumps(request.body)
    assert "Legal needs two more weeks" in sent
    assert "Globex" not in sent  # the line about another account was not used for this one
    step = next(s for s in follow.suggestions if s.kind == "set_next_step")
    assert step.value == "Procurement sign-off once legal is done"
    transcript = f"tr-{meeting['id']}"
    # Lines 2, 3 and 5 of the transcript (the model saw 4 lines; its "9" was none of them).
    assert step.cited == ("opp-acme-analytics", f"{transcript}:L2", f"{transcript}:L3", f"{transcript}:L5")
    assert follow.citation_check.unverified == ()


async def test_a_rep_who_has_not_consented_to_transcripts_gets_the_card_from_the_calendar_and_crm(
    copilot_settings: Settings, sandbox: SandboxProcess, monkeypatch: pytest.MonkeyPatch
):
    from copilot.briefs.types import Meeting
    from copilot.errors import AuthError
    from copilot.followthrough import read_transcript
    from tests.support.copilot_env import sign_in

    rep = await sign_in(copilot_settings, "diego")
    events = sandbox.admin("GET", "/admin/export")["events"]
    row = next(e for e in events if e["subject"] == "Globex co-sell sync")
    meeting = Meeting(
        id=row["id"], subject=row["subject"], start=AFTER_ADD_ON, end=AFTER_ADD_ON, is_online=True
    )
    # The identity provider refuses the scope to diego (no consent), as Entra answers AADSTS65001.
    with pytest.raises(AuthError):
        await rep.broker.token_for([f"{copilot_settings.graph_resource}/OnlineMeetingTranscript.Read.All"])
    assert await read_transcript(copilot_settings, rep.broker, meeting) is None


async def test_the_meeting_is_proposed_with_its_attendees_as_contacts_and_the_task_with_a_real_due_date(
    copilot_settings: Settings, sandbox: SandboxProcess
):
    """What "Log this meeting" and "Add the task" ask for, through the offline model: the meeting
    names its attendees (the matched contacts alex can read) as its contacts, on the deal; the
    task has its due date, two working days after the meeting."""
    from bot.cards import suggestion_request
    from copilot.followthrough import due_after, follow_throughs_at
    from offline_model import OfflineChatModel
    from tests.support.copilot_env import service, sign_in
    from tests.support.moments import SEED_DAY

    rep = await sign_in(copilot_settings, "alex")
    async with connect(copilot_settings) as conn:
        [follow] = await follow_throughs_at(copilot_settings, rep.identity, rep.broker, conn, at=AFTER_ADD_ON)
    kinds = {s.kind: s for s in follow.suggestions}
    log, task = kinds["log_meeting"], kinds["follow_up_task"]
    assert log.contacts == follow.contacts
    assert len(log.contacts) == 2
    assert task.due == due_after(follow.end.date())
    listed = sandbox.call("alex", "list_contacts", account_id="acc-acme")["structuredContent"]["items"]
    attendees = sorted(c["id"] for c in listed if c["name"] in log.contacts)
    async with service(copilot_settings, OfflineChatModel(today=SEED_DAY), clock=lambda: AFTER_ADD_ON) as svc:
        meeting = await svc.run_turn(rep.identity, rep.broker, None, suggestion_request(log))
        follow_up = await svc.run_turn(rep.identity, rep.broker, None, suggestion_request(task))
    [proposed] = meeting.proposals
    assert proposed.args["type"] == "meeting"
    assert proposed.args["opportunity_id"] == "opp-acme-analytics"
    assert sorted(proposed.args["contact_ids"]) == attendees
    [due] = follow_up.proposals
    assert due.args["type"] == "task"
    assert due.args["opportunity_id"] == "opp-acme-analytics"
    assert task.due is not None
    assert due.args["due_date"] == task.due.isoformat()
