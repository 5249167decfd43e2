"""The Teams bot on the aiohttp dev server, talking to a Bot-Connector-shaped endpoint.

The activities are shaped like the Agents Playground's (Teams channel, personal chat,
"Alex Wilber"); the bot runs against real PostgreSQL, the sandbox CRM over MCP and the
sandbox identity provider (local development mode: no app credentials). The HTTP edge is
also tested deployed (app credentials, channel tokens signed by the test's own published
key): authentication first, malformed bodies 400, never 500, nothing contacted.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx
import pytest
from cryptography.fernet import Fernet

from bot.settings import BotSettings
from copilot.settings import Settings
from copilot.writes import write_tools
from sandbox.directory import find_user
from tests.support.adaptive_cards import walk
from tests.support.channel_tokens import ChannelTokens
from tests.support.fake_connector import card_of, find_actions
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import Teams, running_bot
from tests.unit.test_activity_input import malformed_params

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
    # Paced to one streaming update a second (bot/progress.py): a fast turn may show only
    # the acknowledgement; any further update names this question's own lookups.
    assert typing[0].body.get("text") == "Working on it…"
    assert all("Acme" in (c.body.get("text") or "") for c in typing[1:])
    answer = teams.last_text()
    assert "acc-acme" in answer
    assert "Acme Corporation" in answer


async def test_log_a_call_edit_and_approve_updates_the_card_and_writes_once(
    teams: Teams, sandbox: SandboxProcess
):
    await teams.say("log a call with Acme — discussed pricing, next step send proposal")
    card_activity = teams.connector.cards()[-1]
    card = card_of(card_activity)
    editing = await teams.open_panel(card_activity, "Edit…")
    data = _decision(editing, "Edit and approve", **{"edit.subject": "Pricing call (edited)"})
    thread_id = data["thread_id"]

    await teams.submit(card_activity.activity_id or "", data)
    # Approve clicked again on the same (now stale) card: refused, no second write.
    await teams.submit(card_activity.activity_id or "", _decision(card, "Approve"))

    updates = teams.connector.updates()
    assert [u.activity_id for u in updates] == [card_activity.activity_id] * 2, "the panel, then the outcome"
    assert "✓ Approved" in repr(card_of(updates[-1]))
    rows = _activities_with(sandbox, f"{thread_id}:")
    assert len(rows) == 1
    assert rows[0]["subject"] == "Pricing call (edited)"
    assert "already decided" in teams.last_text()


async def test_a_field_only_the_edit_added_is_shown_on_the_approved_card(teams: Teams):
    await teams.say("push the Acme expansion to Dec 20 and move it to proposal")
    card_activity = teams.connector.cards()[-1]
    card = card_of(card_activity)
    assert "Next step" not in repr(card["body"][:2]), "the proposal itself sets no next step"
    editing = await teams.open_panel(card_activity, "Edit…")
    data = _decision(editing, "Edit and approve", **{"edit.next_step": "Send the revised quote"})

    await teams.submit(card_activity.activity_id or "", data)

    approved = repr(card_of(teams.connector.updates()[-1]))
    assert "Approved" in approved
    assert "Send the revised quote" in approved
    answer = teams.last_text()
    assert "next step → Send the revised quote" in answer, answer


async def test_a_rejection_with_a_reason_writes_nothing_and_updates_the_card(
    teams: Teams, sandbox: SandboxProcess
):
    await teams.say("log a meeting with Acme about onboarding")
    card_activity = teams.connector.cards()[-1]
    rejecting = await teams.open_panel(card_activity, "Reject…")
    data = _decision(rejecting, "Reject", **{"reject.reason": "wrong account"})
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


async def test_another_rep_clicking_a_decided_card_learns_nothing_about_it(
    teams: Teams, sandbox: SandboxProcess
):
    await teams.say("log a task for Acme: send the contract")
    card_activity = teams.connector.cards()[-1]
    approve = _decision(card_of(card_activity), "Approve")
    await teams.submit(card_activity.activity_id or "", approve)
    megan = find_user("megan")
    assert megan is not None

    await teams.submit(card_activity.activity_id or "", approve, aad=megan.aad_object_id)

    # Not "already decided": whether and how it was decided is the owner's business.
    assert "belongs to another conversation or another person" in teams.last_text()
    assert len(_activities_with(sandbox, f"{approve['thread_id']}:")) == 1


async def test_an_answer_without_citations_arrives_once_as_text(teams: Teams):
    await teams.say("my preferences")
    replies = [m for m in teams.connector.messages() if m.body.get("type") == "message"]
    assert len(replies) == 1, [r.body for r in replies]
    assert replies[0].body.get("text")
    assert not replies[0].body.get("attachments")


async def test_a_message_of_only_spaces_gets_told_what_to_ask(teams: Teams):
    await teams.say("   ")
    assert "my pipeline" in teams.last_text()


async def test_help_lists_every_change_the_copilot_can_propose(teams: Teams):
    await teams.say("help")
    shown = repr(card_of(teams.connector.cards()[-1]))
    for tool in write_tools():
        assert tool.title in shown
    assert "never send" in shown


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


# --- the HTTP edge -----------------------------------------------------------------------------------------


@dataclass
class OutboundWatch:
    """Every DNS lookup and socket connect this process makes while the watch is on.

    Audit hooks see all of them (asyncio, aiohttp's resolver threads, ``requests``), so
    "nothing was contacted" is an observation, not an assumption about code paths.
    """

    events: list[tuple[str, str, int | None]] = field(default_factory=list)
    _watching: ClassVar[list[OutboundWatch]] = []
    _installed: ClassVar[bool] = False

    @classmethod
    def _hook(cls, event: str, args: tuple[Any, ...]) -> None:
        if not cls._watching or event not in ("socket.getaddrinfo", "socket.connect"):
            return
        if event == "socket.getaddrinfo":
            host, port = args[0], args[1]
        elif isinstance(args[1], tuple):
            host, port = args[1][0], args[1][1]
        else:
            return  # a Unix socket
        host = host.decode() if isinstance(host, bytes) else str(host)
        port = int(port) if isinstance(port, int) or (isinstance(port, str) and port.isdigit()) else None
        for watch in cls._watching:
            watch.events.append((event, host, port))

    def __enter__(self) -> OutboundWatch:
        if not OutboundWatch._installed:
            sys.addaudithook(OutboundWatch._hook)  # audit hooks cannot be removed: one, for good
            OutboundWatch._installed = True
        OutboundWatch._watching.append(self)
        return self

    def __exit__(self, *_: object) -> None:
        OutboundWatch._watching.remove(self)

    def beyond_loopback(self) -> list[tuple[str, str, int | None]]:
        """Lookups or connections to anything but this machine (a public host, a typo'd name)."""
        return [event for event in self.events if not _loopback(event[1])]

    def to_port(self, port: int) -> list[tuple[str, str, int | None]]:
        return [event for event in self.events if event[2] == port]


def _loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def deployed_bot_settings(sandbox: SandboxProcess, channel: ChannelTokens) -> BotSettings:
    """The dev server with app credentials, trusting the test's channel signing key."""
    return BotSettings.model_validate(
        {
            "MicrosoftAppId": sandbox.settings.bot_app_id,
            "MicrosoftAppPassword": sandbox.settings.bot_client_secret,
            "BOT_CONNECTOR_AUTHORITY": sandbox.settings.idp_base_url,
            "BOT_CONNECTOR_CA_BUNDLE": str(sandbox.settings.ca_cert_path),
            "COPILOT_TOKEN_ENCRYPTION_KEY": Fernet.generate_key().decode(),
            "TO_BOT_FROM_CHANNEL_OPENID_METADATA_URL": channel.metadata_url,
        }
    )


@dataclass
class Posted:
    status: int
    body: bytes
    headers: dict[str, str]
    """Lower-case names."""
    seconds: float

    def json(self) -> Any:
        return json.loads(self.body)


async def raw_post(url: str, body: bytes, headers: list[tuple[str, str]]) -> Posted:
    """One HTTP/1.1 POST written by hand: any header, repeated or malformed, as given.

    (HTTP clients refuse e.g. ``Authorization: Bearer `` with its trailing space, which is
    exactly what an attacker sends.)
    """
    split = urlsplit(url)
    assert split.hostname is not None
    assert split.port is not None
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(split.hostname, split.port)
    try:
        head = [f"POST {split.path} HTTP/1.1", f"Host: {split.netloc}", f"Content-Length: {len(body)}"]
        head += [f"{name}: {value}" for name, value in headers] + ["Connection: close", "", ""]
        writer.write("\r\n".join(head).encode("latin-1") + body)
        await writer.drain()
        response = await asyncio.wait_for(reader.read(), timeout=60)
    finally:
        writer.close()
    status_line, _, rest = response.partition(b"\r\n")
    header_block, _, content = rest.partition(b"\r\n\r\n")
    parsed: dict[str, str] = {}
    for line in header_block.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    return Posted(int(status_line.split()[1]), content, parsed, time.monotonic() - started)


@dataclass
class DevServerHost:
    """The dev server as an HTTP host under test: raw bodies in, status and effects out."""

    teams: Teams
    channel: ChannelTokens | None
    turns: list[Any] = field(default_factory=list)
    name: str = "dev-server"

    @property
    def tokens(self) -> ChannelTokens:
        assert self.channel is not None, "a deployed host"
        return self.channel

    def sign(self, raw: bytes, **claims: Any) -> str:
        """A valid channel token for this body (its serviceUrl claim as botbuilder compares it)."""
        return self.tokens.header(service_url_of(raw, self.teams.connector.url), **claims)

    async def post(self, raw: bytes, authorization: list[str] | None = None) -> Posted:
        headers = [("Content-Type", "application/json")]
        headers += [("Authorization", value) for value in authorization or []]
        return await raw_post(self.teams.bot_url, raw, headers)

    def record_turns(self, *, run: bool = True) -> None:
        """Count the turns botbuilder starts (and run them, unless ``run`` is False)."""
        runtime = self.teams.runtime
        assert runtime is not None
        real = runtime.bot.on_turn

        async def on_turn(turn_context: Any) -> None:
            self.turns.append(turn_context.activity)
            if run:
                await real(turn_context)

        runtime.bot.on_turn = on_turn

    def effects(self) -> list[str]:
        """What the requests so far changed or contacted: turns run, activities sent."""
        return [f"turn {a.type}" for a in self.turns] + [
            f"{c.method} {c.conversation_id}" for c in self.teams.connector.calls
        ]


def service_url_of(raw: bytes, default: str) -> str:
    """The body's serviceUrl if it is a JSON object with a string one, else ``default``."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return default
    value = body.get("serviceUrl") if isinstance(body, dict) else None
    return value if isinstance(value, str) else default


@asynccontextmanager
async def dev_server(
    copilot_settings: Settings, bot_settings: BotSettings | None = None, channel: ChannelTokens | None = None
) -> AsyncIterator[DevServerHost]:
    """The dev server (local development mode, or deployed with ``bot_settings``) on a free port."""
    async with running_bot(copilot_settings, bot_settings) as teams:
        host = DevServerHost(teams, channel)
        host.record_turns()
        yield host


@pytest.fixture
async def deployed(
    copilot_settings: Settings, sandbox: SandboxProcess, channel: ChannelTokens
) -> AsyncIterator[DevServerHost]:
    async with dev_server(copilot_settings, deployed_bot_settings(sandbox, channel), channel) as host:
        yield host


@pytest.fixture
async def local(copilot_settings: Settings) -> AsyncIterator[DevServerHost]:
    async with dev_server(copilot_settings) as host:
        yield host


async def test_deployed_a_signed_activity_runs_its_turn(deployed: DevServerHost):
    raw = json.dumps(deployed.teams.activity(text="help")).encode()
    posted = await deployed.post(raw, [deployed.sign(raw)])
    assert posted.status == 200
    assert [a.type for a in deployed.turns] == ["message"]
    assert deployed.teams.connector.cards(), "the welcome card was sent to the signed serviceUrl"


@pytest.mark.parametrize(("make", "reason"), malformed_params())
async def test_deployed_each_malformed_body_is_400_after_authentication_and_contacts_nothing(
    deployed: DevServerHost, make: Callable[[dict[str, Any]], bytes], reason: str
):
    raw = make(deployed.teams.activity())
    with OutboundWatch() as watch:
        signed = await deployed.post(raw, [deployed.sign(raw)])
        unsigned = await deployed.post(raw)
        forged = await deployed.post(raw, ["Bearer not-a-jwt"])

    assert signed.status == 400, signed.body
    assert signed.json()["error"] == "bad_request"
    assert reason in signed.json()["message"]
    assert signed.seconds < 5
    # Authentication comes first: without a valid token the body is never judged.
    assert (unsigned.status, forged.status) == (401, 401)
    assert deployed.effects() == []
    assert watch.beyond_loopback() == []
    assert watch.to_port(int(deployed.teams.connector.url.rsplit(":", 1)[1].strip("/"))) == []


@pytest.mark.parametrize("header", ["Bearer ", "Bearer", "Bearer  ", "bearer", "Basic ", "Bearer ."])
async def test_deployed_an_authorization_header_without_a_token_is_401(deployed: DevServerHost, header: str):
    raw = json.dumps(deployed.teams.activity(text="summarise Acme")).encode()
    posted = await deployed.post(raw, [header])
    assert posted.status == 401
    assert posted.json()["error"] == "unauthorized"
    assert "invalid_token" in posted.headers.get("www-authenticate", "")
    assert deployed.effects() == []


async def test_deployed_garbage_with_no_or_a_bad_token_is_401_not_400(deployed: DevServerHost):
    for raw in (b"\x00\xff garbage", b"[1, 2]", b"null", b'{"type": "message"}'):
        for authorization in ([], ["Bearer not-a-jwt"], [deployed.tokens.expired("https://x/")]):
            posted = await deployed.post(raw, authorization)
            assert posted.status == 401, (raw, authorization, posted.body)
    assert deployed.effects() == []


async def test_deployed_two_authorization_headers_are_401_even_if_one_is_valid(deployed: DevServerHost):
    raw = json.dumps(deployed.teams.activity(text="summarise Acme")).encode()
    posted = await deployed.post(raw, [deployed.sign(raw), "Bearer not-a-jwt"])
    assert posted.status == 401
    posted = await deployed.post(raw, [deployed.sign(raw), deployed.sign(raw)])
    assert posted.status == 401
    assert deployed.effects() == []


async def test_deployed_the_activity_must_carry_the_serviceurl_its_token_was_issued_for(
    deployed: DevServerHost,
):
    raw = json.dumps(deployed.teams.activity(text="summarise Acme")).encode()
    elsewhere = await deployed.post(raw, [deployed.tokens.header("https://smba.evil.example/")])
    unclaimed = await deployed.post(raw, [deployed.tokens.header(None)])  # type: ignore[arg-type]
    assert (elsewhere.status, unclaimed.status) == (401, 401)
    assert deployed.effects() == []


async def test_a_body_over_the_limit_is_413_on_the_dev_server(local: DevServerHost):
    activity = local.teams.activity(text="x" * (300 * 1024))
    posted = await local.post(json.dumps(activity).encode())
    assert posted.status == 413
    assert posted.json()["error"] == "too_large"
    assert local.effects() == []


async def test_an_adaptive_card_action_botbuilder_refuses_is_its_400_not_a_500(local: DevServerHost):
    # botbuilder answers these with an error body it cannot serialise (an Exception inside).
    handled: list[tuple[dict[str, Any], str]] = [
        ({"action": {"type": "Action.Submit"}}, "NotSupported"),
        ({"action": {}}, "NotSupported"),
        ({"action": {"type": 5}}, "NotSupported"),
        ({}, "BadRequest"),
    ]
    for value, code in handled:
        activity = local.teams.activity(type="invoke", name="adaptiveCard/action", value=value)
        posted = await local.post(json.dumps(activity).encode())
        assert posted.status == 400, posted.body
        body = posted.json()
        assert body["statusCode"] == 400
        assert body["type"] == "application/vnd.microsoft.error"
        assert body["value"]["code"] == code
    # These botbuilder would not even get that far with: refused at the edge.
    refused: list[Any] = [{"action": "x"}, {"action": [1]}, "x", None]
    for value in refused:
        activity = local.teams.activity(type="invoke", name="adaptiveCard/action", value=value)
        posted = await local.post(json.dumps(activity).encode())
        assert posted.status == 400, posted.body
        assert posted.json()["error"] == "bad_request"
    assert local.effects() == ["turn invoke"] * len(handled), "only what botbuilder answered ran a turn"


@pytest.mark.parametrize(
    "service_url",
    [
        pytest.param(None, id="missing"),
        pytest.param("not a url", id="not-a-url"),
        pytest.param(42, id="a-number"),
        pytest.param("ftp://{connector}", id="ftp"),
        pytest.param(" {connector_url}", id="leading-space"),
        pytest.param("{connector_url}\n", id="trailing-newline"),
        pytest.param("{connector_url}?x=1", id="query"),
        pytest.param("http://user:pw@{connector}/", id="credentials"),
        pytest.param("javascript:alert(1)", id="javascript"),
        pytest.param("http://", id="no-host"),
    ],
)
async def test_local_mode_never_contacts_a_missing_or_invalid_service_url(
    local: DevServerHost, service_url: Any
):
    connector_url = local.teams.connector.url
    activity = local.teams.activity(text="help")
    activity.pop("serviceUrl")
    if service_url is not None:
        activity["serviceUrl"] = (
            service_url.format(
                connector_url=connector_url, connector=connector_url.split("//", 1)[1].rstrip("/")
            )
            if isinstance(service_url, str)
            else service_url
        )
    with OutboundWatch() as watch:
        posted = await local.post(json.dumps(activity).encode())
    assert posted.status == 400, posted.body
    assert "serviceUrl" in posted.json()["message"]
    assert posted.seconds < 5, "no public host was tried first"
    assert local.effects() == []
    assert watch.beyond_loopback() == []
    bot_port = int(local.teams.bot_url.split(":")[2].split("/")[0])
    assert {port for _, _, port in watch.events} <= {bot_port}, watch.events


async def test_local_mode_takes_no_tokens(local: DevServerHost, channel: ChannelTokens):
    raw = json.dumps(local.teams.activity(text="help")).encode()
    with OutboundWatch() as watch:
        posted = await local.post(raw, [channel.header(local.teams.connector.url)])
    assert posted.status == 401
    assert watch.beyond_loopback() == [], "no public signing keys fetched for a token we cannot accept"
    assert local.effects() == []


# --- questions while proposals wait, "my approvals", superseded cards -----------------------------


async def test_a_question_while_a_proposal_waits_is_answered_without_reposting_its_card(
    teams: Teams, sandbox: SandboxProcess
):
    await teams.say("log a call with Acme about the renewal")
    card_activity = teams.connector.cards()[-1]
    approve = _decision(card_of(card_activity), "Approve")
    cards_before = len(teams.connector.cards())

    await teams.say("summarise Acme")

    answer = teams.last_text()
    assert "Acme Corporation" in answer
    assert "1 proposal still waits for your decision on its card." in answer
    assert len(teams.connector.cards()) == cards_before + ("Sources" in answer), "no approval card re-posted"
    assert all(find_actions(card_of(c), "Approve") == [] for c in teams.connector.cards()[cards_before:])
    assert teams.connector.updates() == [], "the waiting card is left as it is, live"

    await teams.submit(card_activity.activity_id or "", approve)
    assert "✓ Approved" in repr(card_of(teams.connector.updates()[-1]))
    assert len(_activities_with(sandbox, f"{approve['thread_id']}:")) == 1


async def test_a_change_asked_for_while_a_proposal_waits_gets_its_own_card_and_each_decides_once(
    teams: Teams, sandbox: SandboxProcess
):
    """No proposal blocks another (the digest's "Move the close date" is such a request): the
    second card is posted beside the first, each resumes its own thread, decided in the
    other order, each writes once; a second click on either changes nothing."""
    await teams.say("log a call with Acme about the renewal")
    first = teams.connector.cards()[-1]
    await teams.say("push the Acme renewal to Dec 15")
    second = teams.connector.cards()[-1]
    assert second.activity_id != first.activity_id, teams.last_text()
    assert "can't" not in teams.last_text()
    approve_first = _decision(card_of(first), "Approve")
    approve_second = _decision(card_of(second), "Approve")
    assert approve_second["thread_id"] != approve_first["thread_id"], "each card resumes its own thread"
    assert teams.connector.updates() == [], "the waiting card is left as it is, live"

    await teams.submit(second.activity_id or "", approve_second)
    assert "✓ Approved" in repr(teams.connector.latest_content(second.activity_id or ""))
    await teams.submit(first.activity_id or "", approve_first)
    assert "✓ Approved" in repr(teams.connector.latest_content(first.activity_id or ""))
    for card_activity, data in ((second, approve_second), (first, approve_first)):
        await teams.submit(card_activity.activity_id or "", data)  # a second click
    assert len(_activities_with(sandbox, f"{approve_first['thread_id']}:")) == 1
    async with teams.runtime.service.pool.connection() as conn:  # type: ignore[union-attr]
        keys = await (
            await conn.execute(
                "SELECT key FROM idempotency_keys WHERE key LIKE %s", (f"{approve_second['thread_id']}:%",)
            )
        ).fetchall()
    assert len(keys) == 1, keys


async def test_my_approvals_lists_pending_proposals_newest_first_and_opens_one_into_its_card(
    teams: Teams, sandbox: SandboxProcess
):
    await teams.say("log a call with Acme about pricing")
    older = teams.connector.cards()[-1]
    await teams.say("start over")
    await teams.say("log a task for Acme: send the contract")
    newer = teams.connector.cards()[-1]

    await teams.say("my approvals")
    listing = card_of(teams.connector.cards()[-1])
    opens = find_actions(listing, "Open")
    older_data, newer_data = _decision(card_of(older), "Approve"), _decision(card_of(newer), "Approve")
    assert [(o["data"]["thread_id"], o["data"]["tool_call_id"]) for o in opens] == [
        (newer_data["thread_id"], newer_data["tool_call_id"]),
        (older_data["thread_id"], older_data["tool_call_id"]),
    ]
    shown = repr(listing)
    assert "send the contract" in shown
    assert "Acme Corporation" in shown
    assert "ago" in shown
    assert find_actions(listing, "Approve") == [], "decisions are made on the proposal's own card only"

    await teams.submit(teams.connector.cards()[-1].activity_id or "", opens[1]["data"])
    reopened = teams.connector.cards()[-1]
    assert _decision(card_of(reopened), "Approve") == older_data
    moved = teams.connector.updates()[-1]
    assert moved.activity_id == older.activity_id
    assert find_actions(card_of(moved), "Approve") == []
    assert "shown again below" in repr(card_of(moved))

    await teams.submit(reopened.activity_id or "", older_data)
    assert "✓ Approved" in repr(card_of(teams.connector.updates()[-1]))
    assert teams.connector.updates()[-1].activity_id == reopened.activity_id
    assert len(_activities_with(sandbox, f"{older_data['thread_id']}:")) == 1

    await teams.say("my approvals")
    left = find_actions(card_of(teams.connector.cards()[-1]), "Open")
    assert [o["data"]["tool_call_id"] for o in left] == [newer_data["tool_call_id"]]


async def test_my_approvals_shows_and_opens_only_the_reps_own_proposals(teams: Teams):
    await teams.say("log a task for Acme: call back")
    alex_card = teams.connector.cards()[-1]
    await teams.say("my approvals")
    open_alex = find_actions(card_of(teams.connector.cards()[-1]), "Open")[0]["data"]
    megan = find_user("megan")
    assert megan is not None

    await teams.say("my approvals", aad=megan.aad_object_id)
    assert "Nothing waits for your decision" in teams.last_text()
    await teams.submit(alex_card.activity_id or "", open_alex, aad=megan.aad_object_id)
    assert "belongs to another conversation or another person" in teams.last_text()
    assert teams.connector.updates() == []


async def test_dates_on_cards_follow_the_reps_teams_locale(teams: Teams):
    activity = teams.activity(text="push the Acme expansion to Dec 19", locale="de-DE")
    assert await teams.send(activity) in (200, 201, 202)
    card = card_of(teams.connector.cards()[-1])
    facts = [f["value"] for node, _ in walk(card) if node["type"] == "FactSet" for f in node["facts"]]
    assert any(value.startswith("19.12.") for value in facts), facts
    assert not any("-12-19" in value for value in facts), facts


async def test_edit_opens_its_panel_on_the_card_itself_and_back_closes_it(teams: Teams):
    await teams.say("log a task for Acme: send the panel test")
    card_activity = teams.connector.cards()[-1]

    editing = await teams.open_panel(card_activity, "Edit…")
    assert find_actions(editing, "Edit and approve")
    inputs = [node["id"] for node, _ in walk(editing) if node["type"].startswith("Input.")]
    assert "edit.subject" in inputs
    back = await teams.open_panel(card_activity, "Back")
    assert find_actions(back, "Approve")
    assert find_actions(back, "Edit and approve") == []
    megan = find_user("megan")
    assert megan is not None
    [open_edit] = find_actions(back, "Edit…")
    updates = len(teams.connector.updates())
    await teams.submit(card_activity.activity_id or "", open_edit["data"], aad=megan.aad_object_id)
    assert "belongs to another conversation or another person" in teams.last_text()
    assert len(teams.connector.updates()) == updates
