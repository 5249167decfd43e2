"""``data delete --rep`` outside the database: the token service, the turn queues, what it cannot reach.

The bot as deployed against the sandbox's identity provider and Bot Framework token service (the
module's own sandbox process: signing a user out there must not touch other tests), Azurite as
the Function App's storage, and a migrated PostgreSQL with two reps seeded in every table.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from azure.core.exceptions import ResourceExistsError
from azure.storage.queue import TextBase64DecodePolicy, TextBase64EncodePolicy
from azure.storage.queue.aio import QueueClient
from psycopg import sql
from pydantic import SecretStr

from bot.settings import BotSettings
from copilot.cli_data import data_delete
from copilot.persistence.outside_data import NOT_REACHED
from copilot.persistence.pool import CONNECTION_KWARGS
from copilot.settings import DEFAULT_AUDIT_RETENTION_DAYS, Settings
from functions.rep_data import outside_erasers
from functions.turns import poison_queue_name
from sandbox.directory import find_user
from tests.support.azurite import Azurite, run_azurite
from tests.support.rep_data_seed import TENANT, seed_rep
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

QUEUE = "copilot-turns-outside-test"


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    """A sandbox of this module's own: the token service's sign-ins are its process state."""
    return pinned_sandbox


@pytest.fixture(scope="module")
def azurite() -> Iterator[Azurite]:
    with run_azurite() as running:
        yield running


def _aad(handle: str) -> str:
    user = find_user(handle)
    assert user is not None
    return user.aad_object_id


def _bot_settings(sandbox: SandboxProcess, azurite: Azurite, *, secret: str | None = None) -> BotSettings:
    settings = sandbox.settings
    return BotSettings(
        MicrosoftAppId=settings.bot_app_id,
        MicrosoftAppPassword=SecretStr(secret or settings.bot_client_secret),
        BOT_CONNECTOR_AUTHORITY=settings.idp_base_url,
        BOT_CONNECTOR_CA_BUNDLE=str(settings.ca_cert_path),
        COPILOT_SSO_CONNECTION=settings.sso_connection_name,
        OAUTH_URL=settings.http_base_url,
        AzureWebJobsStorage=azurite.connection_string,
        COPILOT_TURN_QUEUE=QUEUE,
    )


def _envelope(aad: str, text: str) -> str:
    """A turn queue message as the HTTP trigger enqueues it (functions/envelope.py)."""
    activity = {
        "type": "message",
        "id": f"act-{text}",
        "channelId": "msteams",
        "serviceUrl": "https://smba.trafficmanager.net/teams/",
        "from": {"id": f"29:{aad}", "aadObjectId": aad},
        "conversation": {"id": f"conv-{aad}", "conversationType": "personal", "tenantId": TENANT},
        "recipient": {"id": "28:bot"},
        "text": text,
    }
    return json.dumps({"activity": activity, "claims": {}, "is_authenticated": True, "received_at": ""})


def _queue(azurite: Azurite, name: str) -> QueueClient:
    return QueueClient.from_connection_string(
        azurite.connection_string,
        name,
        message_encode_policy=TextBase64EncodePolicy(),
        message_decode_policy=TextBase64DecodePolicy(),
    )


async def _enqueue(azurite: Azurite, name: str, *messages: str) -> None:
    async with _queue(azurite, name) as queue:
        with contextlib.suppress(ResourceExistsError):
            await queue.create_queue()
        for message in messages:
            await queue.send_message(message)


async def _texts(azurite: Azurite, name: str) -> list[str]:
    """The texts of the visible messages (a peek: changes nothing)."""
    async with _queue(azurite, name) as queue:
        return [
            json.loads(str(m.content))["activity"]["text"] for m in await queue.peek_messages(max_messages=32)
        ]


async def _seed(settings: Settings, handle: str) -> None:
    """The rep in every table, their stored conversation references naming their Teams user id."""
    aad = _aad(handle)
    assert settings.database_url is not None
    url = settings.database_url.get_secret_value()
    async with await psycopg.AsyncConnection.connect(url, **CONNECTION_KWARGS) as conn:
        await seed_rep(conn, aad)
        reference = json.dumps(
            {
                "user": {"id": f"29:{aad}", "aadObjectId": aad},
                "channelId": "msteams",
                "conversation": {"id": "c"},
            }
        )
        for table in ("conversations", "brief_settings"):
            await conn.execute(
                sql.SQL("UPDATE {} SET reference = %s WHERE aad_object_id = %s").format(
                    sql.Identifier(table)
                ),
                (reference, aad),
            )


def _signed_in(sandbox: SandboxProcess) -> set[str]:
    return set(sandbox.admin("GET", "/admin/token-service")["signed_in"])


async def _delete(
    settings: Settings, bot: BotSettings, rep: str, capsys: pytest.CaptureFixture[str], *, dry_run: bool
) -> tuple[int, dict[str, Any]]:
    code = await data_delete(
        settings,
        rep=rep,
        tenant=TENANT,
        dry_run=dry_run,
        yes=True,
        as_json=True,
        erasers=outside_erasers(bot),
    )
    return code, json.loads(capsys.readouterr().out)


async def test_delete_signs_the_rep_out_purges_their_queued_turns_and_lists_what_it_cannot_reach(
    copilot_settings: Settings, sandbox: SandboxProcess, azurite: Azurite, capsys: pytest.CaptureFixture[str]
):
    await _seed(copilot_settings, "diego")
    await _seed(copilot_settings, "lidia")
    diego, lidia = _aad("diego"), _aad("lidia")
    await _enqueue(azurite, QUEUE, _envelope(diego, "diego-waiting"), _envelope(lidia, "lidia-waiting"))
    await _enqueue(azurite, poison_queue_name(QUEUE), _envelope(diego, "diego-failed"))
    assert {"diego", "lidia"} <= _signed_in(sandbox)
    bot = _bot_settings(sandbox, azurite)

    code, planned = await _delete(copilot_settings, bot, diego, capsys, dry_run=True)
    assert code == 0
    steps = {s["place"].split(" (")[0]: s for s in planned["outside"]}
    assert steps["Bot Framework token service"]["status"] == "would"
    assert steps["Bot Framework token service"]["count"] == 1
    assert steps["turn queues"]["status"] == "would"
    assert steps["turn queues"]["count"] == 2
    assert "diego" in _signed_in(sandbox), "a dry run signs nobody out"
    assert sorted(await _texts(azurite, QUEUE)) == ["diego-waiting", "lidia-waiting"]

    code, report = await _delete(copilot_settings, bot, diego, capsys, dry_run=False)

    assert code == 0, report
    steps = {s["place"].split(" (")[0]: s for s in report["outside"]}
    assert steps["Bot Framework token service"]["status"] == "done"
    assert steps["turn queues"] == {**steps["turn queues"], "status": "done", "count": 2}
    assert "diego" not in _signed_in(sandbox), "signed out at the token service"
    assert "lidia" in _signed_in(sandbox), "another rep keeps their sign-in"
    assert await _texts(azurite, QUEUE) == ["lidia-waiting"], "the other rep's turn is visible again at once"
    assert await _texts(azurite, poison_queue_name(QUEUE)) == []
    assert report["total"] > 0
    # What it cannot reach, with where to act; the audit rows' retention.
    assert [n["place"] for n in report["not_reached"]] == [n.place for n in NOT_REACHED]
    assert all(n["act"] for n in report["not_reached"])
    assert any("Application Insights" in n["place"] for n in report["not_reached"])
    assert any("LangSmith" in n["place"] for n in report["not_reached"])
    assert report["audit_rows_kept"] == 1
    assert report["audit_retention_days"] == DEFAULT_AUDIT_RETENTION_DAYS
    assert report["audit_kept_until"] is not None


async def test_a_token_service_that_refuses_the_bot_fails_the_command_naming_the_place(
    copilot_settings: Settings, sandbox: SandboxProcess, azurite: Azurite, capsys: pytest.CaptureFixture[str]
):
    await _seed(copilot_settings, "adele")
    bot = _bot_settings(sandbox, azurite, secret="not-the-secret")

    code, report = await _delete(copilot_settings, bot, _aad("adele"), capsys, dry_run=False)

    assert code == 1, "a place that could not be cleared is an error: run it again"
    step = next(s for s in report["outside"] if s["place"].startswith("Bot Framework token service"))
    assert step["status"] == "failed"
    assert step["detail"]
    assert "adele" in _signed_in(sandbox)
    assert report["total"] > 0, "the database part is done all the same"


async def test_without_app_credentials_or_storage_settings_nothing_outside_is_tried_and_it_says_so(
    copilot_settings: Settings, capsys: pytest.CaptureFixture[str]
):
    await _seed(copilot_settings, "nestor")
    local = BotSettings(MicrosoftAppId="")

    code, report = await _delete(copilot_settings, local, _aad("nestor"), capsys, dry_run=False)

    assert code == 0
    assert [s["status"] for s in report["outside"]] == ["not_configured", "not_configured"]
    assert "AzureWebJobsStorage" in report["outside"][1]["detail"]

    # The text report says the same in lines an admin reads.
    await data_delete(
        copilot_settings,
        rep=_aad("nestor"),
        tenant=TENANT,
        dry_run=False,
        yes=True,
        as_json=False,
        erasers=outside_erasers(local),
    )
    text = capsys.readouterr().out
    assert f"audit retention: {DEFAULT_AUDIT_RETENTION_DAYS} days (COPILOT_AUDIT_RETENTION_DAYS)" in text
    assert "outside: turn queues" in text
    assert "not reached: Application Insights" in text
    assert "not reached: LangSmith" in text
