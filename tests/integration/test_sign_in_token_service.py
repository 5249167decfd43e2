"""The sign-in loop of proactive messages, deployed: the timer's sign-in card, the rep's Teams
SSO token exchange, and the next run reading with the token the token service now holds.

The bot is the dev server with app credentials (channel tokens signed by the test's published
key), its OAuth connection at the sandbox's token service stand-in (``OAUTH_URL``), embedded
PostgreSQL and the fake Bot Connector. megan is the seeded rep who never signed in at the
token service; her SSO token comes from the sandbox identity provider's token endpoint.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from bot.brief_delivery import deliver_briefs
from bot.settings import BotSettings
from copilot.auth.tokens import dev_sign_in
from copilot.settings import Settings
from tests.integration.test_brief_token_service import (
    WINDOW,
    _aad,
    _brief_on,
    _briefs,
    _crm_calls_by,
    _issued,
    _seeded_day,
    _sign_in_cards,
    _stored_tokens,
    deployed_bot_settings,
)
from tests.support.channel_tokens import ChannelTokens
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import Teams, running_bot
from tests.support.working_hours import working_hours

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    """This module's sandbox is seeded from a named day (``tests/support/moments.py``)."""
    return pinned_sandbox


@pytest.fixture
async def teams(
    copilot_settings: Settings, sandbox: SandboxProcess, channel: ChannelTokens
) -> AsyncIterator[Teams]:
    """The deployed bot; megan is signed out at the token service again afterwards (the
    sandbox is shared by the session, and she is its rep who never signed in)."""
    settings: BotSettings = deployed_bot_settings(sandbox).model_copy(
        update={"openid_metadata_url": channel.metadata_url}
    )
    async with running_bot(copilot_settings, settings) as running:
        assert running.runtime is not None
        adapter = running.runtime.adapter
        try:
            with working_hours(sandbox, "megan"):  # her briefs are not held for quiet hours
                yield running
        finally:
            client = await adapter.bot_framework_authentication.create_user_token_client(
                adapter.create_claims_identity(settings.microsoft_app_id)
            )
            await client.sign_out_user(f"29:{_aad('megan')}", settings.sso_connection_name, "msteams")


async def _token_exchange(
    teams: Teams, channel: ChannelTokens, handle: str, card: dict[str, Any], token: str
) -> httpx.Response:
    """What the rep's Teams client sends for the sign-in card: ``signin/tokenExchange`` in their
    1:1 chat, signed by the channel, the card's exchange id and connection, the SSO token."""
    activity = teams.activity(
        _aad(handle),
        type="invoke",
        name="signin/tokenExchange",
        value={
            "id": card["tokenExchangeResource"]["id"],
            "connectionName": card["connectionName"],
            "token": token,
        },
    )
    activity["conversation"]["id"] = f"conv-{handle}"
    async with httpx.AsyncClient(timeout=120) as client:
        return await client.post(
            teams.bot_url, json=activity, headers={"Authorization": channel.header(teams.connector.url)}
        )


def _signed_in_at_the_service(sandbox: SandboxProcess) -> list[str]:
    signed_in: list[str] = sandbox.admin("GET", "/admin/token-service")["signed_in"]
    return signed_in


async def test_a_rep_who_signs_in_from_the_timers_card_gets_her_briefs_on_the_next_run(
    teams: Teams, channel: ChannelTokens, sandbox: SandboxProcess, copilot_settings: Settings
) -> None:
    assert teams.runtime is not None
    await _brief_on(teams.runtime, teams.connector, "megan")
    at = _seeded_day(sandbox)
    log_before = len(sandbox.admin("GET", "/admin/request-log"))

    before = await deliver_briefs(teams.runtime, at=at, lead_minutes=WINDOW)

    assert (before.not_signed_in, before.posted) == (1, [])
    [card] = _sign_in_cards(teams.connector)
    assert card.conversation_id == "conv-megan"
    assert _crm_calls_by(sandbox, "megan", log_before) == [], "nothing is read before she signs in"

    sso = await dev_sign_in(copilot_settings, "megan")
    issued_before = len(_issued(sandbox))
    answer = await _token_exchange(teams, channel, "megan", card.body["attachments"][0]["content"], sso)

    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] == card.body["attachments"][0]["content"]["tokenExchangeResource"]["id"]
    # The token service kept her sign-in at the connection (botbuilder's exchange call).
    assert "megan" in _signed_in_at_the_service(sandbox)
    assert [(i["user"], i["via"], i["channel_id"]) for i in _issued(sandbox)[issued_before:]] == [
        ("megan", "exchange", "msteams")
    ]

    after = await deliver_briefs(teams.runtime, at=at, lead_minutes=WINDOW)

    assert after.not_signed_in == 0
    assert after.posted, after
    assert {m.conversation_id for m in _briefs(teams.connector)} == {"conv-megan"}
    assert len(_sign_in_cards(teams.connector)) == 1
    # Read as megan, with the token the timer got from the token service.
    assert _crm_calls_by(sandbox, "megan", log_before)
    assert [(i["user"], i["via"]) for i in _issued(sandbox)][-1] == ("megan", "GetToken")
    assert await _stored_tokens(copilot_settings) == 1, "the chat's own store has it too"


async def test_a_sign_in_the_token_service_refuses_is_answered_412_and_the_next_run_still_reads_nothing(
    teams: Teams,
    channel: ChannelTokens,
    sandbox: SandboxProcess,
    copilot_settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert teams.runtime is not None
    await _brief_on(teams.runtime, teams.connector, "megan")
    at = _seeded_day(sandbox)
    log_before = len(sandbox.admin("GET", "/admin/request-log"))
    await deliver_briefs(teams.runtime, at=at, lead_minutes=WINDOW)
    [card] = _sign_in_cards(teams.connector)
    sent_before = len(teams.connector.messages())
    sandbox.admin("PUT", "/admin/knobs", {"token_service_refuses_exchange": ["megan"]})

    sso = await dev_sign_in(copilot_settings, "megan")
    with caplog.at_level(logging.WARNING, logger="bot.token_service_sign_in"):
        answer = await _token_exchange(teams, channel, "megan", card.body["attachments"][0]["content"], sso)

    # 412: Teams shows its own sign-in prompt; the rep is told nothing else, no stack trace.
    assert answer.status_code == 412, answer.text
    assert answer.json()["failureDetail"]
    assert "Traceback" not in answer.text
    assert len(teams.connector.messages()) == sent_before
    assert any(
        "refused the exchange" in r.getMessage() and "ExchangeFailed" in r.getMessage()
        for r in caplog.records
    )
    # Nothing kept: not at the token service, not in the bot's own store.
    assert "megan" not in _signed_in_at_the_service(sandbox)
    assert await _stored_tokens(copilot_settings) == 0

    sandbox.admin("PUT", "/admin/knobs", {})  # the refusal left nothing behind to sign her in
    later = await deliver_briefs(teams.runtime, at=at, lead_minutes=WINDOW)

    assert (later.not_signed_in, later.posted) == (1, [])
    assert _briefs(teams.connector) == []
    assert len(_sign_in_cards(teams.connector)) == 1, "still one card that day"
    assert _crm_calls_by(sandbox, "megan", log_before) == []
