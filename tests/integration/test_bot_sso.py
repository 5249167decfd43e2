"""Teams SSO: OAuthCard, ``signin/tokenExchange`` (412 on failure), encrypted token cache, OBO."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from cryptography.fernet import Fernet

from bot.rep_tokens import SsoRepTokens
from copilot.auth.tokens import dev_sign_in
from copilot.settings import Settings
from sandbox.directory import PLAYGROUND_AAD_OBJECT_ID, find_user
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import Teams, running_bot

pytestmark = pytest.mark.integration


@pytest.fixture
async def sso_teams(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[Teams]:
    async with running_bot(copilot_settings) as teams:
        assert teams.runtime is not None
        # The bot exactly as deployed with SSO; only the channel auth stays in local mode.
        teams.runtime.bot.reps = SsoRepTokens(
            copilot_settings, teams.runtime.service.pool, Fernet.generate_key().decode()
        )
        yield teams


def _exchange(teams: Teams, token: str, aad: str = PLAYGROUND_AAD_OBJECT_ID) -> dict[str, Any]:
    return teams.activity(
        aad,
        type="invoke",
        name="signin/tokenExchange",
        value={"id": "exchange-1", "connectionName": "copilot-sso", "token": token},
    )


async def _invoke(teams: Teams, activity: dict[str, Any]) -> int:
    return await teams.send(activity)


async def test_an_unknown_rep_gets_an_oauth_card_with_a_token_exchange_resource(sso_teams: Teams):
    await sso_teams.say("summarise Acme")
    attachments = sso_teams.connector.messages()[-1].body["attachments"]
    assert attachments[0]["contentType"] == "application/vnd.microsoft.card.oauth"
    resource = attachments[0]["content"]["tokenExchangeResource"]
    assert resource["uri"].startswith("api://")


async def test_token_exchange_stores_the_token_encrypted_and_the_rep_can_ask(
    sso_teams: Teams, copilot_settings: Settings
):
    token = await dev_sign_in(copilot_settings, "alex")

    assert await _invoke(sso_teams, _exchange(sso_teams, token)) == 200
    await sso_teams.say("summarise Acme")

    assert "acc-acme" in sso_teams.last_text()
    assert copilot_settings.database_url is not None
    async with await psycopg.AsyncConnection.connect(
        copilot_settings.database_url.get_secret_value()
    ) as conn:
        cur = await conn.execute("SELECT ciphertext FROM user_tokens")
        rows = await cur.fetchall()
    assert len(rows) == 1
    assert token.encode() not in bytes(rows[0][0])
    assert token.split(".")[1].encode() not in bytes(rows[0][0])


async def test_a_message_sent_before_sign_in_is_answered_once_the_rep_has_signed_in(
    sso_teams: Teams, copilot_settings: Settings
):
    # Before: the message was dropped after the sign-in card; the rep had to ask again.
    await sso_teams.say("summarise Acme")
    assert "oauth" in sso_teams.connector.messages()[-1].body["attachments"][0]["contentType"]
    token = await dev_sign_in(copilot_settings, "alex")

    assert await _invoke(sso_teams, _exchange(sso_teams, token)) == 200

    assert "acc-acme" in sso_teams.last_text(), "the waiting question is answered"
    # Answered once: another exchange (Teams may repeat it) answers nothing more.
    answers = len(sso_teams.connector.messages())
    assert await _invoke(sso_teams, _exchange(sso_teams, token)) == 200
    assert len(sso_teams.connector.messages()) == answers


async def test_a_bad_or_foreign_token_is_answered_412_and_not_stored(
    sso_teams: Teams, copilot_settings: Settings
):
    megans = await dev_sign_in(copilot_settings, "megan")
    assert await _invoke(sso_teams, _exchange(sso_teams, "not-a-token")) == 412
    # Megan's token sent by Alex's Teams account: refused, not stored under anyone.
    assert await _invoke(sso_teams, _exchange(sso_teams, megans)) == 412
    forged = megans.rsplit(".", 1)[0] + ".c2lnbmF0dXJl"
    megan = find_user("megan")
    assert megan is not None
    # A forged signature fails the on-behalf-of exchange at the identity provider.
    assert await _invoke(sso_teams, _exchange(sso_teams, forged, aad=megan.aad_object_id)) == 412
    assert copilot_settings.database_url is not None
    async with await psycopg.AsyncConnection.connect(
        copilot_settings.database_url.get_secret_value()
    ) as conn:
        cur = await conn.execute("SELECT count(*) FROM user_tokens")
        row = await cur.fetchone()
    assert row == (0,)


async def test_a_rep_without_crm_access_is_told_so_at_sign_in(sso_teams: Teams, copilot_settings: Settings):
    adele = find_user("adele")
    assert adele is not None
    token = await dev_sign_in(copilot_settings, "adele")
    assert await _invoke(sso_teams, _exchange(sso_teams, token, aad=adele.aad_object_id)) == 200
    assert "don't have access to the CRM" in sso_teams.last_text()


async def test_a_signed_in_rep_keeps_one_broker_until_their_stored_token_changes_or_goes(
    sso_teams: Teams, copilot_settings: Settings
):
    assert sso_teams.runtime is not None
    reps = sso_teams.runtime.bot.reps
    assert isinstance(reps, SsoRepTokens)
    first = await dev_sign_in(copilot_settings, "alex")
    identity = await reps.save(first)

    one = await reps.rep_for(identity.tenant_id, identity.aad_object_id)
    two = await reps.rep_for(identity.tenant_id, identity.aad_object_id)
    assert one is not None
    assert two is not None
    # The same broker: the tokens it exchanged are not exchanged again next turn.
    assert two.broker is one.broker
    assert one.broker.user_assertion == first

    second = await dev_sign_in(copilot_settings, "alex")
    await reps.save(second)
    again = await reps.rep_for(identity.tenant_id, identity.aad_object_id)
    assert again is not None
    assert again.broker is not one.broker
    assert again.broker.user_assertion == second

    assert copilot_settings.database_url is not None
    async with await psycopg.AsyncConnection.connect(
        copilot_settings.database_url.get_secret_value()
    ) as conn:
        await conn.execute("DELETE FROM user_tokens")
    assert await reps.rep_for(identity.tenant_id, identity.aad_object_id) is None
