"""What the model is given on the turns a brief starts: no email address or phone number, and
nothing of an account the rep may not see.

The bot runs against the sandbox, embedded PostgreSQL and the fake Bot Connector, with a real
model client (``COPILOT_MODEL=openai:…``) whose provider is the fake OpenAI server: every
request body it records is exactly what would have left the process for the model, after the
product's PII redaction. The scripted model reads as a competent one would for the brief's
buttons (the account by name, then its contacts, whose CRM rows carry emails and phones),
then proposes the write the button asked for.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from botbuilder.core import TurnContext
from botbuilder.schema import Activity

from bot.brief_delivery import deliver_briefs
from bot.cards import (
    BRIEF_ELEMENT_PREFIX,
    DIGEST_ELEMENT_PREFIX,
    brief_follow_up_request,
    brief_log_request,
    card_element_id,
    command_data,
)
from copilot.identity import RepIdentity
from copilot.redaction import detect_email, detect_phone_numbers
from copilot.settings import Settings
from sandbox.directory import find_user
from tests.integration.test_brief_timer import WINDOW, _aad, _as, _briefs_posted, _seeded_day
from tests.integration.test_briefs import _event, _export, _hidden_account, _traces_of
from tests.support.copilot_env import copilot_settings as make_settings
from tests.support.fake_connector import Recorded, card_of, find_actions
from tests.support.fake_openai import (
    ChatRequest,
    FakeOpenAI,
    Reply,
    answer,
    call,
    tool_calls,
    use_openai_at,
)
from tests.support.model_behaviours import facts_check
from tests.support.moments import SEED_MORNING, SteppingClock
from tests.support.posting import keep_settings
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import TENANT, Teams, running_bot
from tests.support.working_hours import working_hours

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    """This module's sandbox is seeded from a named day (``tests/support/moments.py``)."""
    return pinned_sandbox


MODEL = "openai:gpt-test"
BUTTONS = ("Log this meeting", "Draft follow-up")
IDS = re.compile(r'"id"\s*:\s*"([A-Za-z0-9][A-Za-z0-9_.:\-]+)"')
RECORD_IDS = re.compile(r'"record_ids"\s*:\s*\["([A-Za-z0-9][A-Za-z0-9_.:\-]+)"')
DESK_TOOLS = {"brief me": "brief_me", "digest me": "todays_digest"}
"""What the rep says for their desk, and the tool a competent model calls for it."""


# --- a competent model for the brief's buttons, over the wire --------------------------------


def _request_pattern(compose: Callable[[str, str], str]) -> re.Pattern[str]:
    """What a brief button sends (``compose(account, subject)``), its two parts as groups."""
    template = re.escape(compose("ACCOUNT", "SUBJECT"))
    groups = template.replace("ACCOUNT", "(?P<account>.+?)").replace("SUBJECT", "(?P<subject>.+)")
    return re.compile(f"^{groups}$")


LOG_REQUEST = _request_pattern(brief_log_request)
FOLLOW_UP_REQUEST = _request_pattern(brief_follow_up_request)


def _turn_calls(request: ChatRequest) -> list[str]:
    """The functions the model called since the rep's last message."""
    names: list[str] = []
    for message in request.messages:
        if message.get("role") == "user":
            names = []
        for tool_call in message.get("tool_calls") or []:
            names.append(str(tool_call["function"]["name"]))
    return names


def _result_ids(request: ChatRequest, index: int) -> list[str]:
    """The record ids in this turn's ``index``-th tool result."""
    results = request.turn_tool_results()
    return IDS.findall(str(results[index].get("content"))) if index < len(results) else []


def brief_button_model(request: ChatRequest) -> Reply:
    """Finds the account by name, lists its contacts, then proposes what the button asked
    (a meeting logged, or a follow-up drafted to the first contact); anything else is
    answered from the turn's reads."""
    check = facts_check(request)
    if check is not None:
        return check
    text = request.latest_user_text()
    desk = DESK_TOOLS.get(text.strip().lower())
    if desk is not None:
        # "brief me" / "digest me": the rep's desk tool, then the answer citing what it read.
        if not _turn_calls(request):
            return tool_calls(call(desk))
        cited = RECORD_IDS.findall(str(request.turn_tool_results()[0].get("content")))
        return answer(f"Here it is {' '.join(f'[{i}]' for i in cited[:3])}.")
    asked = LOG_REQUEST.match(text) or FOLLOW_UP_REQUEST.match(text)
    if asked is None:
        return answer("I can only help with the meeting on the brief.")
    made = _turn_calls(request)
    if not made:
        return tool_calls(call("search_accounts", query=asked["account"]))
    accounts = _result_ids(request, 0)
    if not accounts:
        return answer(f"I found no account called {asked['account']}.")
    if made == ["search_accounts"]:
        return tool_calls(call("list_contacts", account_id=accounts[0]))
    if len(made) == 2:
        if asked.re is LOG_REQUEST:
            return tool_calls(
                call("log_activity", type="meeting", subject=asked["subject"], account_id=accounts[0])
            )
        contacts = _result_ids(request, 1)
        if not contacts:
            return answer(f"[{accounts[0]}] has no contact to write to.")
        return tool_calls(
            call(
                "draft_followup_email",
                contact_id=contacts[0],
                subject=f"Follow-up: {asked['subject']}",
                body="Thank you for your time today; the next steps we agreed are below.",
                account_id=accounts[0],
            )
        )
    return answer(f"Proposed for [{accounts[0]}].")


# --- what the model was given ------------------------------------------------------------------


def _message_text(message: dict[str, Any]) -> str:
    """A chat message's text as the model reads it: its content and any call arguments."""
    content = message.get("content")
    if isinstance(content, list):
        text = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    else:
        text = str(content or "")
    calls = [c["function"]["arguments"] for c in message.get("tool_calls") or []]
    return "\n".join([text, *calls])


def _pii_in(request: ChatRequest, contacts: list[dict[str, Any]]) -> list[str]:
    """Every email address and phone number in what the model was given: by the product's
    own detectors, and the sandbox contacts' actual values."""
    found: list[str] = []
    for message in request.messages:
        text = _message_text(message)
        found += [m["value"] for m in detect_email(text)]
        found += [m["value"] for m in detect_phone_numbers(text)]
        found += [v for c in contacts for v in (c["email"], c["phone"]) if v and v in text]
    return found


def _shown(message: Recorded) -> str:
    """Everything a posted activity shows: its text and its cards."""
    return json.dumps(message.body, ensure_ascii=False)


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """The model provider at the fake server, configured the documented way (OPENAI_BASE_URL)."""
    with FakeOpenAI(brief_button_model) as server:
        yield use_openai_at(monkeypatch, server)


@pytest.fixture
async def teams(
    fake: FakeOpenAI, copilot_settings: Settings, sandbox: SandboxProcess
) -> AsyncIterator[Teams]:
    assert copilot_settings.database_url is not None
    settings = make_settings(copilot_settings.database_url.get_secret_value(), sandbox, COPILOT_MODEL=MODEL)
    # alex works around the clock, so the briefs are posted whatever weekday the sandbox was
    # seeded on (as in test_brief_timer.py).
    with working_hours(sandbox, "alex"):
        async with running_bot(settings) as running:
            # "brief me" and "digest me" are about now: now is a named moment of the seeded day.
            running.set_clock(SteppingClock(SEED_MORNING))
            yield running


async def _click(teams: Teams, brief: Recorded, title: str) -> Recorded:
    """Clicks ``title`` on the brief; returns the approval card the turn posted.

    "Log this meeting" is offered only once the meeting has started, so a brief posted before
    it has none: its click is the request the brief's card then sends.
    """
    data: dict[str, Any]
    if title == BUTTONS[0] and not find_actions(card_of(brief), title):
        [follow_up] = find_actions(card_of(brief), BUTTONS[1])
        asked = FOLLOW_UP_REQUEST.match(follow_up["data"]["text"])
        assert asked is not None
        data = command_data(brief_log_request(asked["account"], asked["subject"]))
    else:
        [button] = find_actions(card_of(brief), title)
        data = button["data"]
    before = len(teams.connector.messages())
    teams.conversation = "conv-alex-personal"
    await teams.submit(brief.activity_id or "", data, aad=_aad("alex"))
    [approval] = [m for m in teams.connector.messages()[before:] if _is_proposal(m)]
    return approval


async def _reject(teams: Teams, approval: Recorded) -> None:
    """Rejects a proposal on its card (one proposal waits at a time)."""
    [reject] = find_actions(await teams.open_panel(approval, "Reject…"), "Reject")
    await teams.submit(approval.activity_id or "", {**reject["data"], "reject.reason": "not now"})


def _is_proposal(message: Recorded) -> bool:
    """Whether the message is a proposal's approval card: a card about a proposal that can
    still be rejected (its approve button is titled per tool, "Reject…" is always there)."""
    if not message.body.get("attachments"):
        return False
    card = card_of(message)
    about_a_proposal = str(card["body"][0].get("id", "")).startswith(card_element_id(""))
    return about_a_proposal and bool(find_actions(card, "Reject…"))


async def _post_briefs(teams: Teams, sandbox: SandboxProcess) -> list[tuple[str, Recorded]]:
    """alex has briefs on (in his 1:1 chat) and the timer runs over the seeded days: the briefs
    posted. (Set up directly: the scripted model here answers only the brief's buttons.)"""
    assert teams.runtime is not None
    teams.conversation = "conv-alex-personal"
    activity = Activity().deserialize(teams.activity(aad=_aad("alex"), text="brief on"))
    reference = TurnContext.get_conversation_reference(activity).serialize()
    await keep_settings(teams.runtime.service.pool, RepIdentity(TENANT, _aad("alex")), reference, briefs=True)
    await deliver_briefs(teams.runtime, at=_seeded_day(sandbox), lead_minutes=WINDOW)
    return _briefs_posted(teams)


# --- the tests ---------------------------------------------------------------------------------


async def test_no_email_or_phone_reaches_the_model_on_a_brief_buttons_turns(
    teams: Teams, fake: FakeOpenAI, sandbox: SandboxProcess
) -> None:
    state = _export(sandbox)
    acme = _event(state, "Acme renewal pricing review")
    attendees = {a["address"] for a in acme["attendees"]}
    acme_contacts = [c for c in state["contacts"] if c["email"] in attendees]
    assert acme_contacts
    assert all(c["email"] and c["phone"] for c in acme_contacts)
    [brief] = [m for meeting, m in await _post_briefs(teams, sandbox) if meeting == acme["id"]]

    for title, tool in zip(BUTTONS, ("log_activity", "draft_followup_email"), strict=True):
        before = len(fake.requests)
        approval = await _click(teams, brief, title)
        await _reject(teams, approval)
        turn = fake.requests[before:]

        assert f'"tool": "{tool}"' in _shown(approval), title
        # The button's turn reached the model, and the model read the attendees' CRM rows.
        assert turn, f"{title}: no model call was made"
        calls = _turn_calls(turn[-1])
        assert calls[:3] == ["search_accounts", "list_contacts", tool], (title, calls)
        read = turn[-1].tool_result_text()
        assert all(c["name"] in read for c in acme_contacts), read
        for request in turn:
            assert _pii_in(request, state["contacts"]) == [], f"{title}: {request.messages}"
        # Those rows carry emails and phones: what the model got instead is the redaction.
        assert "[REDACTED_EMAIL]" in read, read
        assert "[REDACTED_PHONE_NUMBER]" in read, read


async def test_the_hidden_account_meeting_gets_no_brief_and_nothing_of_that_account_reaches_the_model(
    teams: Teams, fake: FakeOpenAI, sandbox: SandboxProcess
) -> None:
    state = _export(sandbox)
    hidden_meeting = _event(state, "Introduction call")
    traces = _traces_of(state, _hidden_account(state))
    assert len(traces) > 2  # its id and name, and its contact's id, name, email and phone
    posted = await _post_briefs(teams, sandbox)
    assert len(posted) >= 3
    assert hidden_meeting["id"] not in [meeting for meeting, _ in posted]

    # Every button of every brief posted, each turn's proposal rejected before the next.
    for _, brief in posted:
        for title in BUTTONS:
            await _reject(teams, await _click(teams, brief, title))
    assert await _as(teams, "alex", "brief me")
    assert await _as(teams, "alex", "digest me")

    assert len(fake.requests) >= 3 * len(posted) * len(BUTTONS)
    seen = [json.dumps(r.messages, ensure_ascii=False) for r in fake.requests]
    assert [t for t in traces for text in seen if t in text] == []
    shown = [_shown(m) for m in teams.connector.messages()]
    assert [t for t in traces for text in shown if t in text] == []
    assert "Introduction call" not in "".join(seen + shown)
    for request in fake.requests:
        assert _pii_in(request, state["contacts"]) == [], request.messages


async def test_brief_me_and_digest_me_are_answered_with_their_card_and_give_the_model_no_email_or_phone(
    teams: Teams, fake: FakeOpenAI, sandbox: SandboxProcess
) -> None:
    # Said to the agent, as everything a rep does: the model chooses the desk tool, and the
    # tool's view is the card. Briefs and digests are still composed without a model
    # (copilot/briefs/compose.py); what the model reads of them holds no email or phone.
    state = _export(sandbox)
    before = len(teams.connector.messages())

    for command, prefix in (("brief me", BRIEF_ELEMENT_PREFIX), ("digest me", DIGEST_ELEMENT_PREFIX)):
        start = len(teams.connector.messages())
        await _as(teams, "alex", command)
        shown = [m for m in teams.connector.messages()[start:] if m.body.get("attachments")]
        assert [str(card_of(m)["body"][0].get("id", "")).startswith(prefix) for m in shown] == [True], [
            _shown(m) for m in teams.connector.messages()[start:]
        ]

    assert fake.requests, "the model chose the desk's tools"
    for request in fake.requests:
        assert _pii_in(request, state["contacts"]) == [], request.messages
    # What the cards show holds no contact's email or phone; the one address is the rep's own
    # (the digest's text names whose it is), which they see and no model is given.
    alex = find_user("alex")
    assert alex is not None
    for message in teams.connector.messages()[before:]:
        text = _shown(message)
        emails = {m["value"] for m in detect_email(text)}
        assert emails <= {alex.email}, text
        assert detect_phone_numbers(text) == [], text
        assert [v for c in state["contacts"] for v in (c["email"], c["phone"]) if v in text] == []
