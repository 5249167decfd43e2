"""The Teams bot on the aiohttp dev server, talking to a Bot-Connector-shaped endpoint.

The activities are shaped like the Agents Playground's (Teams channel, personal chat,
"Alex Wilber"); the bot runs against real PostgreSQL, the sandbox CRM over MCP and the
sandbox identity provider (local development mode: no app credentials).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from copilot.settings import Settings
from sandbox.directory import find_user
from tests.support.fake_connector import card_of, find_actions
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import Teams, running_bot

pytestmark = pytest.mark.integration


@pytest.fixture
async def teams(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[Teams]:
    async with running_bot(copilot_settings) as running:
        yield running


def _decision(card: dict[str, Any], title: str, **inputs: Any) -> dict[str, Any]:
    """What Teams submits for an Action.Submit: the action's data merged with the card's inputs."""
    actions = find_actions(card, title)
    assert actions, f"no {title!r} action in card"
    return {**actions[0]["data"], **inputs}


def _activities_with(sandbox: SandboxProcess, thread_prefix: str) -> list[dict[str, Any]]:
    return [
        a
        for a in sandbox.admin("GET", "/admin/export")["activities"]
        if str(a["external_id"]).startswith(thread_prefix)
    ]


async def test_a_question_gets_progress_then_a_cited_answer(teams: Teams):
    await teams.say("summarise Acme")
    typing = [c for c in teams.connector.calls if c.body.get("type") == "typing"]
    assert typing, "progress must reach the rep before the answer"
    assert any("Acme" in (c.body.get("text") or "") for c in typing)
    answer = teams.last_text()
    assert "acc-acme" in answer
    assert "Acme Corporation" in answer


async def test_log_a_call_edit_and_approve_updates_the_card_and_writes_once(
    teams: Teams, sandbox: SandboxProcess
):
    await teams.say("log a call with Acme — discussed pricing, next step send proposal")
    card_activity = teams.connector.cards()[-1]
    card = card_of(card_activity)
    data = _decision(card, "Edit and approve", **{"edit.subject": "Pricing call (edited)"})
    thread_id = data["thread_id"]

    await teams.submit(card_activity.activity_id or "", data)
    # Approve clicked again on the same (now stale) card: refused, no second write.
    await teams.submit(card_activity.activity_id or "", _decision(card, "Approve"))

    updates = teams.connector.updates()
    assert [u.activity_id for u in updates] == [card_activity.activity_id]
    assert "Approved" in repr(card_of(updates[0])) or "✓" in repr(card_of(updates[0]))
    rows = _activities_with(sandbox, f"{thread_id}:")
    assert len(rows) == 1
    assert rows[0]["subject"] == "Pricing call (edited)"
    assert "already decided" in teams.last_text()


async def test_a_rejection_with_a_reason_writes_nothing_and_updates_the_card(
    teams: Teams, sandbox: SandboxProcess
):
    await teams.say("log a meeting with Acme about onboarding")
    card_activity = teams.connector.cards()[-1]
    data = _decision(card_of(card_activity), "Reject", **{"reject.reason": "wrong account"})
    await teams.submit(card_activity.activity_id or "", data)
    assert "wrong account" in repr(card_of(teams.connector.updates()[-1]))
    assert _activities_with(sandbox, f"{data['thread_id']}:") == []


async def test_submissions_by_another_rep_or_tampered_are_refused_without_writing(
    teams: Teams, sandbox: SandboxProcess
):
    await teams.say("log a task for Acme: send contract")
    card_activity = teams.connector.cards()[-1]
    approve = _decision(card_of(card_activity), "Approve")
    megan = find_user("megan")
    assert megan is not None

    await teams.submit(card_activity.activity_id or "", approve, aad=megan.aad_object_id)
    assert "nothing was changed" in teams.last_text().lower()
    await teams.submit(card_activity.activity_id or "", {**approve, "args_digest": "0" * 64})
    assert "nothing was changed" in teams.last_text().lower()
    await teams.submit(card_activity.activity_id or "", {**approve, "tool_call_id": "call_forged"})
    assert "nothing was changed" in teams.last_text().lower()
    await teams.submit(card_activity.activity_id or "", {**approve, "thread_id": "x" * 32})
    assert "nothing was changed" in teams.last_text().lower()

    assert _activities_with(sandbox, f"{approve['thread_id']}:") == []
    assert teams.connector.updates() == []


async def test_a_rep_whose_crm_access_was_revoked_is_told_plainly(teams: Teams):
    adele = find_user("adele")
    assert adele is not None
    await teams.say("my pipeline", aad=adele.aad_object_id)
    assert "don't have access to the CRM" in teams.last_text()


async def test_installing_the_bot_sends_a_welcome_card(teams: Teams):
    update = teams.activity(
        type="conversationUpdate",
        membersAdded=[{"id": "28:bot"}],
    )
    update.pop("text", None)
    assert await teams.send(update) in (200, 201, 202)
    welcome = repr(card_of(teams.connector.cards()[-1]))
    assert "my pipeline" in welcome
    await asyncio.sleep(0)


async def test_two_simultaneous_approvals_write_once_and_update_the_card_once(
    teams: Teams, sandbox: SandboxProcess
):
    await teams.say("log a task for Acme: send contract")
    card_activity = teams.connector.cards()[-1]
    approve = _decision(card_of(card_activity), "Approve")

    await asyncio.gather(
        teams.submit(card_activity.activity_id or "", approve),
        teams.submit(card_activity.activity_id or "", approve),
    )

    assert len(_activities_with(sandbox, f"{approve['thread_id']}:")) == 1
    assert len(teams.connector.updates()) == 1
    texts = [m.body.get("text") or "" for m in teams.connector.messages()]
    assert sum("already decided" in t for t in texts) == 1


async def test_deciding_one_card_does_not_repost_the_others(teams: Teams, copilot_settings: Settings):
    from tests.support.scripted_model import ScriptedChatModel, call, calls

    assert teams.runtime is not None
    teams.runtime.service.model = ScriptedChatModel(
        steps=[
            calls(
                call("log_activity", type="call", subject="First", account_id="acc-acme"),
                call("log_activity", type="call", subject="Second", account_id="acc-acme"),
            )
        ],
        final="Done.",
    )
    await teams.say("log two calls")
    posted = teams.connector.cards()
    assert len(posted) == 2
    first = next(c for c in posted if "First" in repr(card_of(c)))

    await teams.submit(first.activity_id or "", _decision(card_of(first), "Approve"))

    assert len(teams.connector.cards()) == 2  # no new card for "Second"
    assert [u.activity_id for u in teams.connector.updates()] == [first.activity_id]


async def test_with_app_credentials_the_dev_server_refuses_unsigned_or_garbage_tokens(
    copilot_settings: Settings,
):
    from cryptography.fernet import Fernet

    from bot.settings import BotSettings

    deployed = BotSettings.model_validate(
        {
            "MicrosoftAppId": "11111111-2222-4333-8444-555555555555",
            "MicrosoftAppPassword": "secret",
            "COPILOT_TOKEN_ENCRYPTION_KEY": Fernet.generate_key().decode(),
        }
    )
    async with running_bot(copilot_settings, deployed) as teams:
        activity = teams.activity(text="summarise Acme")
        async with httpx.AsyncClient(timeout=30) as client:
            unsigned = await client.post(teams.bot_url, json=activity)
            garbage = await client.post(
                teams.bot_url, json=activity, headers={"Authorization": "Bearer not-a-jwt"}
            )
    assert (unsigned.status_code, garbage.status_code) == (401, 401)
    assert teams.connector.calls == []
