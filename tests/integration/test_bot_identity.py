"""The rep's whole identity in Teams: the sign-in token's groups, roles and territories reach
``RepIdentity`` on the bot's paths exactly as in the CLI, so restricted documents are filtered
the same way there.

Real PostgreSQL with the sandbox library ingested (the West field guide readable by the West
territory only), the sandbox identity provider's tokens, the offline model planning its own
knowledge search. The bot runs on the dev server (local sign-in), with Teams SSO (the token
exchange's stored token), and as the Function App's queue worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from bot.rep_tokens import DevRepTokens, SsoRepTokens
from copilot.auth.tokens import dev_sign_in
from copilot.knowledge.acl import Acl, parse_acl
from copilot.knowledge.ingest import ingest_files
from copilot.knowledge.sources import local_files
from copilot.persistence.database import connect
from copilot.settings import Settings
from sandbox.directory import CONTOSO, PLAYGROUND_AAD_OBJECT_ID, find_user
from tests.integration.test_function_app import Teams as FunctionsTeams
from tests.integration.test_function_app import (
    deployed_function_app,
    dequeue,
    sign_in_with_sso,
    user_function,
)
from tests.support.azurite import Azurite, run_azurite
from tests.support.channel_tokens import ChannelTokens
from tests.support.copilot_env import sign_in
from tests.support.fake_connector import FakeConnector
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import Teams, running_bot

pytestmark = pytest.mark.integration

LIBRARY = Path(__file__).resolve().parents[2] / "sandbox" / "knowledge"
WEST_GUIDE = "west-region-field-guide"
QUESTION = "what does the West region field guide say about the depot pilot?"
WEST_ONLY_PHRASE = "60-day pilot"
"""Only in the West guide: an answer holding it came from the restricted document."""


async def ingest_west_guide(settings: Settings) -> None:
    """The sandbox library for Contoso, the West field guide restricted to the West territory."""
    files = local_files(LIBRARY)
    async with connect(settings) as conn:
        await ingest_files(
            conn, [f for f in files if f.document_id == WEST_GUIDE], parse_acl(CONTOSO.id, ["territory:West"])
        )
        await ingest_files(
            conn, [f for f in files if f.document_id == "objection-handling"], Acl(tenant_id=CONTOSO.id)
        )


@pytest.fixture(scope="module")
def azurite() -> Iterator[Azurite]:
    with run_azurite() as running:
        yield running


@pytest.fixture
async def functions_teams(channel: ChannelTokens) -> AsyncIterator[FunctionsTeams]:
    fake = FakeConnector()
    await fake.start()
    try:
        yield FunctionsTeams(fake, channel)
    finally:
        await fake.stop()


def _aad(handle: str) -> str:
    user = find_user(handle)
    assert user is not None
    return user.aad_object_id


@pytest.fixture
async def teams(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[Teams]:
    await ingest_west_guide(copilot_settings)
    async with running_bot(copilot_settings) as running:
        yield running


async def test_the_bots_sign_ins_give_the_rep_the_same_groups_roles_and_territories_as_the_cli(
    copilot_settings: Settings,
) -> None:
    cli = await sign_in(copilot_settings, "alex")
    assert cli.identity.territories == ("West",)
    assert "sales-west" in cli.identity.groups
    assert cli.identity.roles == ("rep",)
    dev = await DevRepTokens(copilot_settings).rep_for(CONTOSO.id, PLAYGROUND_AAD_OBJECT_ID)
    assert copilot_settings.database_url is not None
    async with running_bot(copilot_settings) as running:
        assert running.runtime is not None
        sso = SsoRepTokens(copilot_settings, running.runtime.service.pool, Fernet.generate_key().decode())
        await sso.save(await dev_sign_in(copilot_settings, "alex"))
        stored = await sso.rep_for(CONTOSO.id, PLAYGROUND_AAD_OBJECT_ID)
    for rep in (dev, stored):
        assert rep is not None
        assert rep.identity == cli.identity
        assert (rep.identity.groups, rep.identity.roles, rep.identity.territories) == (
            cli.identity.groups,
            cli.identity.roles,
            cli.identity.territories,
        )


async def test_a_restricted_document_is_answered_in_teams_to_a_rep_who_may_read_it_and_withheld_from_one_who_may_not(
    teams: Teams,
) -> None:
    await teams.say(QUESTION)
    alex_answer = teams.last_text()
    teams.conversation = "conv-diego"
    await teams.say(QUESTION, aad=_aad("diego"))
    diego_answer = teams.last_text()

    assert WEST_ONLY_PHRASE in alex_answer, alex_answer
    assert "West region field guide" in alex_answer
    assert WEST_ONLY_PHRASE not in diego_answer, diego_answer
    assert "West region field guide" not in diego_answer


async def test_on_the_function_app_a_restricted_document_is_answered_to_a_west_rep_and_withheld_from_an_east_rep(
    monkeypatch: pytest.MonkeyPatch,
    copilot_settings: Settings,
    sandbox: SandboxProcess,
    azurite: Azurite,
    channel: ChannelTokens,
    functions_teams: FunctionsTeams,
) -> None:
    await ingest_west_guide(copilot_settings)
    answers: dict[str, str] = {}
    async with deployed_function_app(monkeypatch, copilot_settings, sandbox, azurite, channel) as queue:
        for handle in ("alex", "diego"):
            # Each rep signed in through Teams SSO (the token exchange stored their token).
            await sign_in_with_sso(copilot_settings, handle)
            activity = functions_teams.activity(text=QUESTION)
            activity["from"] = {"id": f"29:{_aad(handle)}", "name": handle, "aadObjectId": _aad(handle)}
            activity["conversation"] = {**activity["conversation"], "id": f"a:conv-{handle}"}
            assert (await functions_teams.post(activity)).status_code == 202
            await user_function("turns")(dequeue(queue))
            reply = functions_teams.connector.messages()[-1].body
            answers[handle] = (reply.get("text") or "") + repr(reply.get("attachments"))

    assert WEST_ONLY_PHRASE in answers["alex"], answers["alex"]
    assert WEST_ONLY_PHRASE not in answers["diego"], answers["diego"]
    assert "West region field guide" not in answers["diego"]
