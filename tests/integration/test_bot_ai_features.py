"""Teams AI message features and group chats, through the bot's dev server and a fake connector.

The answers carry the AI label, citations as Teams citation entities (where the client shows
them) and feedback buttons, each answer activity checked against the Teams schema for AI
entities (``tests/support/teams_ai_message.schema.json``); feedback comes back as Teams'
``message/submitAction`` invoke and is stored per answer. In group chats and channels the
copilot answers no CRM question by default: it nudges the rep to ask privately, and the
sandbox's request log proves no CRM tool was called.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.feedback import feedback_for
from bot.handler import PRIVATE_ONLY
from bot.settings import BotSettings
from copilot.settings import Settings
from sandbox.directory import PLAYGROUND_AAD_OBJECT_ID
from tests.support.copilot_env import copilot_settings as make_settings
from tests.support.fake_connector import Recorded, card_of, find_actions
from tests.support.fake_langsmith import running_fake_langsmith
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_ai_schema import assert_valid_ai_message
from tests.support.teams_client import TENANT, Teams, running_bot

pytestmark = pytest.mark.integration

RECORD_URLS = "https://crm.example.com/records/{id}"
DESKTOP = [{"type": "clientInfo", "locale": "en-US", "platform": "Windows"}]


def _answers(teams: Teams) -> list[Recorded]:
    """Every answer the bot sent (messages with the AI label), each valid against the schema;
    the bot's last message must be one of them."""
    sent = teams.connector.messages()
    answers = [m for m in sent if "https://schema.org/Message" in json.dumps(m.body)]
    for answer in answers:
        assert_valid_ai_message(answer.body)
    assert answers, "no answer"
    assert answers[-1] is sent[-1], f"the last message is not a labelled answer: {sent[-1].body}"
    return answers


def _thumbs_down(comment: str) -> dict[str, Any]:
    """The value Teams' default feedback form sends for 👎 with a comment."""
    return {
        "actionName": "feedback",
        "actionValue": {"reaction": "dislike", "feedback": json.dumps({"feedbackText": comment})},
    }


async def _thread_of(teams: Teams) -> str:
    assert teams.runtime is not None
    async with teams.runtime.service.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT thread_id FROM conversations WHERE conversation_id = %s", (teams.conversation,)
        )
        row = await cur.fetchone()
    assert row is not None
    return str(row["thread_id"])


@pytest.fixture
async def teams_desktop(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[Teams]:
    """The bot as a Teams desktop client sees it: citations as entities, record links set."""
    bot = BotSettings(
        MicrosoftAppId="", COPILOT_ANSWER_SOURCES="entities", CRM_RECORD_URL_TEMPLATE=RECORD_URLS
    )
    async with running_bot(copilot_settings, bot) as running:
        yield running


@pytest.fixture
async def teams(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[Teams]:
    """The bot on its defaults (local development mode, as the Agents Playground runs it)."""
    async with running_bot(copilot_settings) as running:
        yield running


async def test_an_answer_carries_the_ai_label_numbered_citations_and_feedback_buttons(teams_desktop: Teams):
    await teams_desktop.send(teams_desktop.activity(text="summarise Acme", entities=DESKTOP))

    answer = _answers(teams_desktop)[-1].body
    entity = assert_valid_ai_message(answer)
    assert answer["channelData"]["feedbackLoopEnabled"] is True
    assert not answer.get("attachments"), "the citations replace the Sources card"
    assert "[acc-acme]" not in answer["text"]
    assert "[1]" in answer["text"]
    claims = {c["position"]: c["appearance"] for c in entity["citation"]}
    acme = next(a for a in claims.values() if a["url"] == "https://crm.example.com/records/acc-acme")
    assert acme["name"] == "Acme Corporation"
    assert acme["abstract"].startswith("Account")
    # The stream that showed progress is closed by the answer, with all of its streaminfo.
    streams = [e for e in answer["entities"] if e.get("type") == "streaminfo"]
    assert all(s.get("streamType") == "final" and s.get("streamId") for s in streams), streams


async def test_an_answer_without_citations_is_labelled_and_has_feedback_buttons(teams_desktop: Teams):
    await teams_desktop.say("my preferences")
    answer = _answers(teams_desktop)[-1].body
    entity = assert_valid_ai_message(answer)
    assert "citation" not in entity
    assert answer["channelData"]["feedbackLoopEnabled"] is True


async def test_the_answer_after_an_approval_is_labelled_and_its_citations_are_entities(teams_desktop: Teams):
    await teams_desktop.say("log a call with Acme: discussed pricing")
    card_activity = teams_desktop.connector.cards()[-1]
    approve = next(a for a in find_actions(card_of(card_activity), "Approve"))
    await teams_desktop.submit(card_activity.activity_id or "", approve["data"])

    answer = _answers(teams_desktop)[-1].body
    assert answer["channelData"]["feedbackLoopEnabled"] is True
    assert "[acc-acme]" not in answer["text"], "record ids are numbered markers, not shown"
    named = {c["appearance"]["name"]: c["appearance"]["abstract"] for c in answer["entities"][0]["citation"]}
    # The activity just written is cited by its subject, as an activity.
    assert named.get("Acme Corporation", "").startswith("Account")
    assert any(
        name.startswith("Call with Acme") and kind.startswith("Activity") for name, kind in named.items()
    )


async def test_in_local_development_an_answer_keeps_its_sources_card_and_is_labelled(teams: Teams):
    await teams.say("summarise Acme")
    answer = _answers(teams)[-1]
    entity = assert_valid_ai_message(answer.body)
    assert "citation" not in entity, "no [n] markers on a card, so no citation entities"
    assert answer.body["channelData"]["feedbackLoopEnabled"] is True
    assert "Sources" in repr(card_of(answer))


async def test_a_thumbs_down_with_a_comment_is_stored_with_its_answer_and_readable(teams_desktop: Teams):
    await teams_desktop.say("summarise Acme")
    answer = _answers(teams_desktop)[-1]

    response = await teams_desktop.invoke(
        "message/submitAction", _thumbs_down("The pipeline total is wrong"), reply_to_id=answer.activity_id
    )

    assert response.status_code == 200
    assert response.json() == {}, "Teams refuses a non-empty message/submitAction response"
    assert teams_desktop.runtime is not None
    stored = await feedback_for(
        teams_desktop.runtime.service.pool, teams_desktop.conversation, answer.activity_id
    )
    assert [(f.rating, f.comment) for f in stored] == [("dislike", "The pipeline total is wrong")]
    assert stored[0].thread_id == await _thread_of(teams_desktop)
    assert (stored[0].tenant_id, stored[0].aad_object_id) == (TENANT, PLAYGROUND_AAD_OBJECT_ID)
    assert stored[0].run_id is None, "tracing is off: no run to attach it to"


async def test_feedback_that_names_no_message_is_about_the_latest_answer(teams: Teams):
    # The Agents Playground's feedback invoke has no replyToId (Teams' always has one).
    await teams.say("my preferences")
    await teams.say("summarise Acme")
    latest = _answers(teams)[-1]

    # As the Playground sends it: no replyToId, no tenant, the comment as plain text.
    invoke = teams.activity(
        type="invoke",
        name="message/submitAction",
        value={"actionName": "feedback", "actionValue": {"reaction": "like", "feedback": "Spot on"}},
    )
    invoke.pop("channelData")
    invoke["conversation"].pop("tenantId")
    assert await teams.send(invoke) == 200
    assert teams.runtime is not None
    stored = await feedback_for(teams.runtime.service.pool, teams.conversation)
    assert [(f.activity_id, f.rating, f.comment) for f in stored] == [(latest.activity_id, "like", "Spot on")]
    assert stored[0].tenant_id == TENANT, "the answer's tenant, as the invoke named none"


PLAYGROUND_TENANT = "00000000-0000-0000-0000-0000000000001"
"""The tenant id the Agents Playground sends (13 digits, not the signed-in identity's tenant)."""


async def test_feedback_is_stored_under_the_signed_in_identitys_tenant_and_counted_in_stats(teams: Teams):
    """The Playground names a tenant of its own; the rep's identity (their token) names theirs.
    Feedback goes with the identity, as answers and decisions do, so ``copilot stats`` counts it."""

    def in_playground(activity: dict[str, Any]) -> dict[str, Any]:
        activity["conversation"]["tenantId"] = PLAYGROUND_TENANT
        activity["channelData"] = {"tenant": {"id": PLAYGROUND_TENANT}}
        return activity

    like = {"actionName": "feedback", "actionValue": {"reaction": "like", "feedback": "Spot on"}}
    await teams.send(in_playground(teams.activity(text="summarise Acme")))
    first = _answers(teams)[-1]
    liked = in_playground(teams.activity(type="invoke", name="message/submitAction", value=like))
    liked["replyToId"] = first.activity_id
    assert await teams.send(liked) == 200
    await teams.send(in_playground(teams.activity(text="my deals closing this quarter")))
    disliked = in_playground(
        teams.activity(type="invoke", name="message/submitAction", value=_thumbs_down("Too long"))
    )
    assert await teams.send(disliked) == 200

    assert teams.runtime is not None
    stored = await feedback_for(teams.runtime.service.pool, teams.conversation)
    assert [(f.rating, f.tenant_id) for f in stored] == [("like", TENANT), ("dislike", TENANT)]
    assert stored[1].thread_id is not None, "the latest answer found, though the invoke's tenant differs"
    await teams.send(in_playground(teams.activity(text="copilot stats")))
    assert "1 👍 · 1 👎" in teams.last_text()


@pytest.mark.parametrize(
    "value",
    [
        None,
        {"actionName": "feedback", "actionValue": {"reaction": "meh"}},
        {"actionName": "feedback"},
        {
            "actionName": "feedback",
            "actionValue": {"reaction": "dislike", "feedback": json.dumps({"feedbackText": 7})},
        },
        {"actionName": "share", "actionValue": {"reaction": "like"}},
    ],
)
async def test_an_invalid_feedback_payload_gets_a_clear_error_and_nothing_is_stored(teams: Teams, value: Any):
    await teams.say("my preferences")
    answer = _answers(teams)[-1]

    response = await teams.invoke("message/submitAction", value, reply_to_id=answer.activity_id)

    assert response.status_code == 400
    body = response.json()
    # A body that is no invoke at all is refused at the edge (bad_request), the rest by the bot.
    assert body["error"] == ("bad_request" if value is None else "invalid_feedback")
    assert body["message"]
    assert teams.runtime is not None
    assert await feedback_for(teams.runtime.service.pool, teams.conversation) == []
    # The answer itself is untouched: a valid feedback on it afterwards is stored.
    again = await teams.invoke("message/submitAction", _thumbs_down("fine"), reply_to_id=answer.activity_id)
    assert again.status_code == 200
    assert len(await feedback_for(teams.runtime.service.pool, teams.conversation)) == 1


# --- group chats and channels -----------------------------------------------------------------


def _in(kind: str, teams: Teams, **fields: Any) -> dict[str, Any]:
    activity = teams.activity(**fields)
    activity["conversation"] = {
        **activity["conversation"],
        "conversationType": kind,
        "id": f"19:{teams.conversation}@thread.v2",
    }
    return activity


@pytest.mark.parametrize("kind", ["groupChat", "channel"])
async def test_a_crm_question_in_a_group_chat_or_channel_gets_the_nudge_and_no_crm_data(
    teams: Teams, sandbox: SandboxProcess, kind: str
):
    calls_before = len(sandbox.admin("GET", "/admin/request-log"))

    await teams.send(_in(kind, teams, text="<at>CRM Copilot</at> summarise Acme"))
    await teams.send(_in(kind, teams, value={"copilot": "command", "text": "my pipeline"}))
    await teams.send(_in(kind, teams, value={"copilot": "decision", "thread_id": "t", "tool_call_id": "c"}))

    replies = teams.connector.messages()
    assert [r.body.get("text") for r in replies] == [PRIVATE_ONLY] * 3
    assert "Acme" not in json.dumps([r.body for r in teams.connector.calls])
    assert len(sandbox.admin("GET", "/admin/request-log")) == calls_before, "no CRM tool may be called"
    assert teams.runtime is not None
    async with teams.runtime.service.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM threads")
        row = await cur.fetchone()
    assert row is not None
    assert row["n"] == 0, "no copilot thread is started for a group"


async def test_help_still_works_in_a_group_chat(teams: Teams):
    await teams.send(_in("groupChat", teams, text="help"))
    assert "What I can do" in repr(card_of(teams.connector.cards()[-1]))


async def test_with_group_answers_allowed_a_group_question_is_answered(
    copilot_settings: Settings, sandbox: SandboxProcess
):
    async with running_bot(
        copilot_settings, BotSettings(MicrosoftAppId="", COPILOT_GROUP_ANSWERS=True)
    ) as teams:
        await teams.send(_in("groupChat", teams, text="summarise Acme"))
        assert "Acme Corporation" in teams.last_text()
        assert PRIVATE_ONLY not in teams.last_text()


async def test_a_thumbs_down_in_teams_becomes_langsmith_feedback_on_the_answers_run(
    copilot_settings: Settings, sandbox: SandboxProcess
):
    with running_fake_langsmith() as fake:
        assert copilot_settings.database_url is not None
        traced = make_settings(
            copilot_settings.database_url.get_secret_value(),
            sandbox,
            LANGSMITH_TRACING=True,
            LANGSMITH_ENDPOINT=fake.url,
            LANGSMITH_PROJECT="bot-feedback",
            COPILOT_TRACE_PSEUDONYM_KEY=base64.b64encode(b"k" * 32).decode(),
        )
        bot = BotSettings(MicrosoftAppId="", COPILOT_ANSWER_SOURCES="entities")
        async with running_bot(traced, bot) as teams:
            await teams.say("summarise Acme")
            answer = _answers(teams)[-1]
            response = await teams.invoke(
                "message/submitAction",
                _thumbs_down("Wrong total, mail me at ann@example.com"),
                reply_to_id=answer.activity_id,
            )
            assert response.status_code == 200
            assert teams.runtime is not None
            (stored,) = await feedback_for(teams.runtime.service.pool, teams.conversation, answer.activity_id)
            teams.runtime.service.tracing.flush()

        assert stored.run_id is not None
        (sent,) = [f for f in fake.feedback if f["key"] == "rep_rating"]
        assert sent["run_id"] == stored.run_id
        assert any(run["id"] == stored.run_id for run in fake.roots()), "the run it rates was traced"
        assert sent["score"] == 0
        assert sent["comment"] == "Wrong total, mail me at [REDACTED_EMAIL]"
