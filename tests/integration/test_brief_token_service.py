"""The brief timer as deployed: the rep's token from the Bot Framework token service.

The bot runtime in deployed mode (app id and secret at the sandbox identity provider), the
sandbox's token service stand-in at ``OAUTH_URL``, embedded PostgreSQL and the fake Bot
Connector. The bot keeps no token of the rep itself here (``user_tokens`` stays empty): what
the timer reads with can only have come from the token service.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import jwt
import pytest
from botbuilder.core import TurnContext
from botbuilder.schema import Activity
from cryptography.fernet import Fernet
from pydantic import SecretStr

from bot import cards
from bot.brief_delivery import deliver_briefs
from bot.proactive_reps import proactive_rep
from bot.runtime import BotRuntime, open_runtime
from bot.settings import BotSettings
from copilot.identity import RepIdentity
from copilot.persistence.database import connect
from copilot.settings import Settings
from sandbox.directory import find_user
from tests.support.fake_connector import FakeConnector, Recorded, card_of
from tests.support.posting import keep_settings
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    """This module's sandbox is seeded from a named day (``tests/support/moments.py``)."""
    return pinned_sandbox


TENANT = "00000000-0000-0000-0000-000000000001"
WINDOW = 5 * 24 * 60
"""Lead minutes covering every seeded meeting of the coming days."""


def deployed_bot_settings(sandbox: SandboxProcess) -> BotSettings:
    """The bot as deployed, its Entra app and token service being the sandbox's."""
    settings = sandbox.settings
    return BotSettings(
        MicrosoftAppId=settings.bot_app_id,
        MicrosoftAppPassword=SecretStr(settings.bot_client_secret),
        BOT_CONNECTOR_AUTHORITY=settings.idp_base_url,
        BOT_CONNECTOR_CA_BUNDLE=str(settings.ca_cert_path),
        COPILOT_TOKEN_ENCRYPTION_KEY=SecretStr(Fernet.generate_key().decode()),
        COPILOT_SSO_CONNECTION=settings.sso_connection_name,
        OAUTH_URL=settings.http_base_url,
    )


@pytest.fixture
async def connector() -> AsyncIterator[FakeConnector]:
    fake = FakeConnector()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def runtime(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[BotRuntime]:
    async with open_runtime(copilot_settings, deployed_bot_settings(sandbox)) as running:
        yield running


def _aad(handle: str) -> str:
    user = find_user(handle)
    assert user is not None
    return user.aad_object_id


def _reference(handle: str, connector: FakeConnector) -> dict[str, Any]:
    """The 1:1 chat's conversation reference as ``brief on`` stores it (from a Teams activity)."""
    aad = _aad(handle)
    activity = Activity().deserialize(
        {
            "type": "message",
            "id": uuid.uuid4().hex,
            "channelId": "msteams",
            "serviceUrl": connector.url,
            "from": {"id": f"29:{aad}", "name": handle, "aadObjectId": aad},
            "conversation": {"id": f"conv-{handle}", "conversationType": "personal", "tenantId": TENANT},
            "recipient": {"id": "28:bot", "name": "CRM Copilot"},
            "channelData": {"tenant": {"id": TENANT}},
            "text": "brief on",
        }
    )
    reference: dict[str, Any] = TurnContext.get_conversation_reference(activity).serialize()
    return reference


async def _brief_on(runtime: BotRuntime, connector: FakeConnector, handle: str) -> None:
    await keep_settings(
        runtime.service.pool, RepIdentity(TENANT, _aad(handle)), _reference(handle, connector), briefs=True
    )


def _seeded_day(sandbox: SandboxProcess) -> datetime:
    state: dict[str, list[dict[str, Any]]] = sandbox.admin("GET", "/admin/export")
    first = min(datetime.fromisoformat(e["start_at"].replace("Z", "+00:00")) for e in state["events"])
    return first.replace(hour=0, minute=0, second=0, microsecond=0)


def _briefs(connector: FakeConnector) -> list[Recorded]:
    posted = []
    for message in connector.messages():
        try:
            card = card_of(message)
        except AssertionError:
            continue
        if str(card["body"][0].get("id", "")).startswith("brief-"):
            posted.append(message)
    return posted


def _sign_in_cards(connector: FakeConnector) -> list[Recorded]:
    return [
        m
        for m in connector.messages()
        if [a.get("contentType") for a in m.body.get("attachments") or []] == [cards.OAUTH_CARD_CONTENT_TYPE]
    ]


def _crm_calls_by(sandbox: SandboxProcess, handle: str, since: int = 0) -> list[dict[str, Any]]:
    user = find_user(handle)
    assert user is not None
    log: list[dict[str, Any]] = sandbox.admin("GET", "/admin/request-log")[since:]
    return [entry for entry in log if entry["caller_id"] == user.id]


def _issued(sandbox: SandboxProcess) -> list[dict[str, Any]]:
    issued: list[dict[str, Any]] = sandbox.admin("GET", "/admin/token-service")["issued"]
    return issued


async def _stored_tokens(settings: Settings) -> int:
    async with connect(settings) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM user_tokens")
        row = await cur.fetchone()
    return int((row or {})["n"])


async def test_the_timer_reads_with_the_token_the_token_service_gave(
    runtime: BotRuntime, connector: FakeConnector, sandbox: SandboxProcess, copilot_settings: Settings
) -> None:
    await _brief_on(runtime, connector, "alex")
    issued_before = len(_issued(sandbox))
    log_before = len(sandbox.admin("GET", "/admin/request-log"))

    report = await deliver_briefs(runtime, at=_seeded_day(sandbox), lead_minutes=WINDOW)

    assert report.not_signed_in == 0
    assert len(report.posted) >= 3, report
    assert {m.conversation_id for m in _briefs(connector)} == {"conv-alex"}
    assert _sign_in_cards(connector) == []
    # The token service handed alex's token to the timer, asked for by the Teams user id of the
    # stored reference at the configured connection; the bot stores no token of its own.
    [given] = _issued(sandbox)[issued_before:]
    assert (given["user"], given["via"]) == ("alex", "GetToken")
    assert given["connection_name"] == sandbox.settings.sso_connection_name
    assert given["channel_id"] == "msteams"
    assert await _stored_tokens(copilot_settings) == 0
    # The CRM was read as alex (on-behalf-of that token).
    assert _crm_calls_by(sandbox, "alex", log_before)


async def test_the_rep_proactive_rep_returns_carries_the_token_services_token_for_the_app(
    runtime: BotRuntime, connector: FakeConnector, sandbox: SandboxProcess
) -> None:
    issued_before = len(_issued(sandbox))

    rep = await proactive_rep(runtime, TENANT, _aad("alex"), _reference("alex", connector))

    assert rep is not None
    assert (rep.identity.tenant_id, rep.identity.aad_object_id) == (TENANT, _aad("alex"))
    claims = jwt.decode(rep.broker.user_assertion, options={"verify_signature": False})
    assert claims["aud"] == sandbox.settings.bot_app_id
    assert claims["scp"] == "access_as_user"
    assert [i["uti"] for i in _issued(sandbox)[issued_before:]] == [claims["uti"]]
    # And it takes the on-behalf-of path: a CRM token of alex's.
    crm = jwt.decode(await rep.broker.crm_token(write=False), options={"verify_signature": False})
    assert (crm["oid"], crm["aud"]) == (_aad("alex"), sandbox.settings.crm_audience)


async def test_a_rep_without_a_token_gets_one_sign_in_card_a_day_nothing_is_read_and_briefs_follow_sign_in(
    runtime: BotRuntime, connector: FakeConnector, sandbox: SandboxProcess
) -> None:
    await _brief_on(runtime, connector, "alex")
    at = _seeded_day(sandbox)
    sandbox.admin("PUT", "/admin/knobs", {"token_service_signed_out": ["alex"]})
    log_before = len(sandbox.admin("GET", "/admin/request-log"))

    first = await deliver_briefs(runtime, at=at, lead_minutes=WINDOW)
    second = await deliver_briefs(runtime, at=at, lead_minutes=WINDOW)

    assert (first.not_signed_in, second.not_signed_in) == (1, 1)
    assert first.posted == second.posted == []
    [card] = _sign_in_cards(connector)
    assert card.conversation_id == "conv-alex"
    content = card.body["attachments"][0]["content"]
    assert content["connectionName"] == sandbox.settings.sso_connection_name
    assert content["tokenExchangeResource"]["uri"] == f"api://localhost/{sandbox.settings.bot_app_id}"
    assert _briefs(connector) == []
    assert _crm_calls_by(sandbox, "alex", log_before) == [], "nothing is read for a rep without a token"

    sandbox.admin("PUT", "/admin/knobs", {})  # alex signs in again
    after = await deliver_briefs(runtime, at=at, lead_minutes=WINDOW)

    assert after.not_signed_in == 0
    assert len(after.posted) >= 3
    assert len(_briefs(connector)) == len(after.posted)
    assert len(_sign_in_cards(connector)) == 1
    assert _crm_calls_by(sandbox, "alex", log_before)


async def test_a_rep_who_never_signed_in_at_the_token_service_is_asked_and_others_still_get_briefs(
    runtime: BotRuntime, connector: FakeConnector, sandbox: SandboxProcess, copilot_settings: Settings
) -> None:
    # megan is the seeded rep who never signed in at the token service.
    await _brief_on(runtime, connector, "megan")
    await _brief_on(runtime, connector, "alex")
    log_before = len(sandbox.admin("GET", "/admin/request-log"))

    report = await deliver_briefs(runtime, at=_seeded_day(sandbox), lead_minutes=WINDOW)

    assert report.not_signed_in == 1
    assert {m.conversation_id for m in _sign_in_cards(connector)} == {"conv-megan"}
    assert {m.conversation_id for m in _briefs(connector)} == {"conv-alex"}
    assert _crm_calls_by(sandbox, "megan", log_before) == []
    async with connect(copilot_settings) as conn:
        cur = await conn.execute("SELECT aad_object_id, activity_id FROM sign_in_prompts")
        rows = await cur.fetchall()
    assert [(r["aad_object_id"], r["activity_id"]) for r in rows] == [
        (_aad("megan"), _sign_in_cards(connector)[0].activity_id)
    ]


async def test_a_sign_in_card_whose_post_failed_is_posted_by_the_next_run(
    runtime: BotRuntime, connector: FakeConnector, sandbox: SandboxProcess, copilot_settings: Settings
) -> None:
    await _brief_on(runtime, connector, "megan")
    at = _seeded_day(sandbox)
    connector.fail_next = [(503, {})] * 8  # the first post and all its retries fail

    failed = await deliver_briefs(runtime, at=at, lead_minutes=WINDOW)

    assert failed.not_signed_in == 1
    assert connector.failed, "the post was tried"
    assert _sign_in_cards(connector) == []
    async with connect(copilot_settings) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM sign_in_prompts")
        assert (await cur.fetchone() or {})["n"] == 0, "the failed post's claim was given back"
    connector.fail_next = []

    await deliver_briefs(runtime, at=at, lead_minutes=WINDOW)
    await deliver_briefs(runtime, at=at, lead_minutes=WINDOW)

    assert len(_sign_in_cards(connector)) == 1
