"""The Azure Functions app, invoked the way the Functions host would invoke it.

Azure Functions Core Tools cannot run here, so the tests import ``function_app``, take
the registered functions and call them with ``azure.functions`` request objects. The
rest is real: Azurite for the queue, botbuilder validating channel tokens signed by the
test's own published key (``TO_BOT_FROM_CHANNEL_OPENID_METADATA_URL``), the sandbox
identity provider issuing the bot's app-only Bot Connector token, PostgreSQL, the
sandbox CRM over MCP, and a Bot-Connector-shaped endpoint receiving the replies.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from urllib.parse import urlsplit

import azure.functions as func
import jwt
import psycopg
import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.queue import QueueClient, TextBase64DecodePolicy, TextBase64EncodePolicy
from cryptography.fernet import Fernet
from langchain_core.messages import AIMessage
from psycopg.rows import DictRow

from bot.rep_tokens import SsoRepTokens
from copilot.auth.tokens import dev_sign_in
from copilot.errors import MigrationError
from copilot.persistence import threads
from copilot.persistence.retention import apply_retention
from copilot.settings import Settings
from functions.host import get_host, reset_host
from sandbox.directory import PLAYGROUND_AAD_OBJECT_ID
from tests.integration.test_bot_dev_server import OutboundWatch, Posted, service_url_of
from tests.support.azurite import Azurite, run_azurite
from tests.support.channel_tokens import ChannelTokens
from tests.support.copilot_env import service, sign_in
from tests.support.fake_connector import FakeConnector, card_of
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls
from tests.unit.test_activity_input import malformed_params

pytestmark = pytest.mark.integration

TENANT = "00000000-0000-0000-0000-000000000001"

DbConn = psycopg.AsyncConnection[DictRow]


def registered() -> dict[str, Any]:
    """The app's functions by name (``get_functions`` refuses a second call; see unit tests)."""
    import function_app

    function_app.app.functions_bindings = None
    return {str(f.get_function_name()): f for f in function_app.app.get_functions()}


def user_function(name: str) -> Callable[..., Awaitable[Any]]:
    return cast(Callable[..., Awaitable[Any]], registered()[name].get_user_function())


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def azurite() -> Iterator[Azurite]:
    with run_azurite() as running:
        yield running


@pytest.fixture
async def connector() -> AsyncIterator[FakeConnector]:
    fake = FakeConnector()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@asynccontextmanager
async def deployed_function_app(
    monkeypatch: pytest.MonkeyPatch,
    copilot_settings: Settings,
    sandbox: SandboxProcess,
    azurite: Azurite,
    channel: ChannelTokens,
) -> AsyncIterator[QueueClient]:
    """The Function App's settings (deployed mode: app id + secret); yields the turn queue."""
    assert copilot_settings.database_url is not None
    queue_name = f"turns-{uuid.uuid4().hex[:12]}"
    env = {
        # the copilot, as in copilot_settings
        "DATABASE_URL": copilot_settings.database_url.get_secret_value(),
        "CRM_MCP_URL": copilot_settings.crm_mcp_url,
        "GRAPH_BASE_URL": copilot_settings.graph_base_url,
        "ENTRA_AUTHORITY": copilot_settings.entra_authority,
        "ENTRA_CA_BUNDLE": str(copilot_settings.entra_ca_bundle),
        "COPILOT_TOOL_RETRY_INITIAL_DELAY": str(copilot_settings.tool_retry_initial_delay),
        "COPILOT_TOOL_RETRY_MAX_DELAY": str(copilot_settings.tool_retry_max_delay),
        "COPILOT_BREAKER_RESET_SECONDS": str(copilot_settings.breaker_reset_seconds),
        # the bot: its Entra app registration, here at the sandbox identity provider
        "MicrosoftAppId": sandbox.settings.bot_app_id,
        "MicrosoftAppPassword": sandbox.settings.bot_client_secret,
        "BOT_CONNECTOR_AUTHORITY": sandbox.settings.idp_base_url,
        "BOT_CONNECTOR_CA_BUNDLE": str(sandbox.settings.ca_cert_path),
        "COPILOT_TOKEN_ENCRYPTION_KEY": Fernet.generate_key().decode(),
        "TO_BOT_FROM_CHANNEL_OPENID_METADATA_URL": channel.metadata_url,
        # the host
        "AzureWebJobsStorage": azurite.connection_string,
        "COPILOT_TURN_QUEUE": queue_name,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    await reset_host()
    queue = QueueClient.from_connection_string(
        azurite.connection_string,
        queue_name,
        message_encode_policy=TextBase64EncodePolicy(),
        message_decode_policy=TextBase64DecodePolicy(),
    )
    try:
        yield queue
    finally:
        await reset_host()
        queue.close()


@pytest.fixture
async def app_env(
    monkeypatch: pytest.MonkeyPatch,
    copilot_settings: Settings,
    sandbox: SandboxProcess,
    azurite: Azurite,
    channel: ChannelTokens,
) -> AsyncIterator[QueueClient]:
    """The Function App's settings (deployed mode: app id + secret); yields the turn queue."""
    async with deployed_function_app(monkeypatch, copilot_settings, sandbox, azurite, channel) as queue:
        yield queue


class Teams:
    """Posts Teams-shaped, channel-signed activities to the ``messages`` function."""

    def __init__(self, connector: FakeConnector, channel: ChannelTokens):
        self.connector = connector
        self.channel = channel
        self.conversation = f"a:conv-{uuid.uuid4().hex[:8]}"

    def activity(self, **fields: Any) -> dict[str, Any]:
        return {
            "type": "message",
            "id": uuid.uuid4().hex,
            "timestamp": "2026-01-05T10:00:00.000Z",
            "channelId": "msteams",
            "serviceUrl": self.connector.url,
            "from": {
                "id": f"29:{PLAYGROUND_AAD_OBJECT_ID}",
                "name": "Alex Wilber",
                "aadObjectId": PLAYGROUND_AAD_OBJECT_ID,
            },
            "conversation": {"id": self.conversation, "conversationType": "personal", "tenantId": TENANT},
            "recipient": {"id": "28:bot", "name": "CRM Copilot"},
            "channelData": {"tenant": {"id": TENANT}},
            "locale": "en-US",
            **fields,
        }

    def sign(self, raw: bytes, **claims: Any) -> str:
        """A valid channel token for this body (its serviceUrl claim as botbuilder compares it)."""
        return self.channel.header(service_url_of(raw, self.connector.url), **claims)

    async def post(
        self, body: dict[str, Any] | bytes, authorization: str | None = "signed"
    ) -> func.HttpResponse:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if authorization == "signed":
            authorization = self.sign(raw)
        if authorization is not None:
            headers["Authorization"] = authorization
        request = func.HttpRequest(method="POST", url="/api/messages", headers=headers, body=raw)
        response: func.HttpResponse = await user_function("messages")(request)
        return response


@pytest.fixture
def teams(connector: FakeConnector, channel: ChannelTokens) -> Teams:
    return Teams(connector, channel)


@dataclass
class FunctionAppHost:
    """The Function App's HTTP trigger as a host under test: raw bodies in, status and effects out."""

    teams: Teams
    queue: QueueClient
    turns: list[Any] = field(default_factory=list)
    name: str = "function-app"

    @property
    def tokens(self) -> ChannelTokens:
        return self.teams.channel

    def sign(self, raw: bytes, **claims: Any) -> str:
        return self.teams.sign(raw, **claims)

    async def post(self, raw: bytes, authorization: list[str] | None = None) -> Posted:
        headers = {"Content-Type": "application/json"}
        if authorization:
            # What the Functions host hands the worker for repeated headers: one, joined.
            headers["Authorization"] = ", ".join(authorization)
        request = func.HttpRequest(method="POST", url="/api/messages", headers=headers, body=raw)
        started = time.monotonic()
        response: func.HttpResponse = await user_function("messages")(request)
        seconds = time.monotonic() - started
        lowered = {name.lower(): value for name, value in response.headers.items()}
        return Posted(response.status_code, response.get_body(), lowered, seconds)

    async def record_turns(self, *, run: bool = True) -> None:
        """Count the turns botbuilder starts inline (invokes), and run them unless ``run`` is False."""
        runtime = (await get_host()).runtime
        real = runtime.bot.on_turn

        async def on_turn(turn_context: Any) -> None:
            self.turns.append(turn_context.activity)
            if run:
                await real(turn_context)

        runtime.bot.on_turn = on_turn

    def effects(self) -> list[str]:
        """What the requests so far changed or contacted: queue messages, inline turns, replies."""
        return (
            [f"queued {len(m)} characters" for m in queued(self.queue)]
            + [f"turn {a.type}" for a in self.turns]
            + [f"{c.method} {c.conversation_id}" for c in self.teams.connector.calls]
        )


def queued(queue: QueueClient) -> list[str]:
    """Every message on the queue (peeked: still there afterwards); none if it was never created."""
    try:
        return [str(m.content) for m in queue.peek_messages(max_messages=32)]
    except ResourceNotFoundError:
        return []


def dequeue(queue: QueueClient) -> func.QueueMessage:
    """Take the one queued message as the queue trigger would receive it."""
    messages = list(queue.receive_messages(max_messages=32))
    assert len(messages) == 1, messages
    message = messages[0]
    queue.delete_message(message)
    return func.QueueMessage(id=message.id, body=str(message.content))


def bot_token_claims(authorization: str | None) -> dict[str, Any]:
    assert authorization is not None
    assert authorization.startswith("Bearer "), authorization
    claims: dict[str, Any] = jwt.decode(authorization.split(" ", 1)[1], options={"verify_signature": False})
    return claims


async def sign_in_with_sso(settings: Settings, handle: str = "alex") -> None:
    """What a successful Teams SSO token exchange leaves behind: the rep's token, stored."""
    host = await get_host()
    reps = host.runtime.reps
    assert isinstance(reps, SsoRepTokens), "the app must run in SSO mode (app id set)"
    await reps.save(await dev_sign_in(settings, handle))


# --- POST /api/messages ------------------------------------------------------------------------------


async def test_a_signed_activity_is_queued_and_answered_202_without_running_the_turn(
    app_env: QueueClient, teams: Teams
):
    activity = teams.activity(text="summarise Acme")
    response = await teams.post(activity)

    assert response.status_code == 202
    messages = queued(app_env)
    assert len(messages) == 1
    envelope = json.loads(messages[0])
    assert envelope["activity"] == activity
    assert envelope["claims"]["aud"] == teams.channel.app_id
    assert envelope["claims"]["serviceurl"] == activity["serviceUrl"]
    assert envelope["is_authenticated"] is True
    assert envelope["audience"] == "https://api.botframework.com"
    assert envelope["received_at"]
    assert "Bearer" not in messages[0], "the channel's token itself is never queued"
    assert teams.connector.calls == [], "the turn must not run inside the HTTP request"


async def test_a_webhook_retry_of_the_same_activity_is_acknowledged_but_queued_once(
    app_env: QueueClient, teams: Teams
):
    activity = teams.activity(text="summarise Acme")
    first = await teams.post(activity)
    retry = await teams.post(activity)
    other = await teams.post(teams.activity(text="summarise Acme"))

    assert (first.status_code, retry.status_code, other.status_code) == (202, 202, 202)
    assert len(queued(app_env)) == 2


@pytest.mark.parametrize(
    "make_header",
    [
        pytest.param(lambda tokens, url: None, id="missing"),
        pytest.param(lambda tokens, url: "Bearer not-a-jwt", id="malformed"),
        pytest.param(lambda tokens, url: "Basic dXNlcjpwYXNz", id="not-bearer"),
        pytest.param(lambda tokens, url: tokens.expired(url), id="expired"),
        pytest.param(lambda tokens, url: tokens.wrong_audience(url), id="wrong-audience"),
        pytest.param(lambda tokens, url: tokens.wrong_issuer(url), id="wrong-issuer"),
        pytest.param(lambda tokens, url: tokens.signed_by_another_key(url), id="bad-signature"),
        pytest.param(lambda tokens, url: tokens.unknown_key(url), id="unknown-key"),
        pytest.param(lambda tokens, url: tokens.service_url_mismatch(url), id="serviceurl-mismatch"),
    ],
)
async def test_bad_tokens_are_refused_401_and_nothing_is_queued(
    app_env: QueueClient, teams: Teams, make_header: Callable[[ChannelTokens, str], str | None]
):
    activity = teams.activity(text="summarise Acme")
    response = await teams.post(activity, authorization=make_header(teams.channel, activity["serviceUrl"]))

    assert response.status_code == 401
    assert json.loads(response.get_body())["error"] == "unauthorized"
    assert "invalid_token" in response.headers.get("WWW-Authenticate", "")
    assert queued(app_env) == []
    assert teams.connector.calls == []


async def test_a_key_not_endorsed_for_the_activitys_channel_is_refused(app_env: QueueClient, teams: Teams):
    # The key is endorsed for msteams only; a token it signed cannot speak for another channel.
    activity = teams.activity(text="hi", channelId="webchat")
    response = await teams.post(activity)
    assert response.status_code == 401
    assert queued(app_env) == []


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "JSON"),
        (b"[1, 2]", "object"),
        (json.dumps({"text": "hi"}).encode(), "type"),
        (json.dumps({"type": "message", "conversation": {"id": "c"}}).encode(), "serviceUrl"),
        (json.dumps({"type": "message", "serviceUrl": "https://x/"}).encode(), "conversation"),
    ],
)
async def test_a_body_that_is_not_an_activity_is_a_400_with_a_clear_error(
    app_env: QueueClient, teams: Teams, body: bytes, reason: str
):
    response = await teams.post(body)  # with a valid channel token: authenticated, then judged
    assert response.status_code == 400
    error = json.loads(response.get_body())
    assert error["error"] == "bad_request"
    assert reason in error["message"]
    assert queued(app_env) == []
    # Without one, the caller learns nothing about its body: authentication comes first.
    assert (await teams.post(body, authorization=None)).status_code == 401


async def test_an_activity_too_large_for_the_queue_is_refused_413(app_env: QueueClient, teams: Teams):
    activity = teams.activity(text="x" * 60_000)
    response = await teams.post(activity)
    assert response.status_code == 413
    assert json.loads(response.get_body())["error"] == "too_large"
    assert queued(app_env) == []


async def test_an_invoke_is_answered_synchronously_and_not_queued(app_env: QueueClient, teams: Teams):
    activity = teams.activity(
        type="invoke", name="adaptiveCard/action", value={"action": {"type": "Action.Execute"}}
    )
    activity.pop("text", None)
    response = await teams.post(activity)

    # Answered in the request (the bot has no Action.Execute handler: botbuilder's 501 or
    # its adaptive-card error body) — either way never queued and never a 202.
    assert response.status_code not in (202, 401, 500)
    assert queued(app_env) == []


@pytest.mark.parametrize(("make", "reason"), malformed_params())
async def test_each_malformed_body_is_400_after_authentication_and_nothing_is_queued_or_contacted(
    app_env: QueueClient, teams: Teams, make: Callable[[dict[str, Any]], bytes], reason: str
):
    raw = make(teams.activity())
    with OutboundWatch() as watch:
        started = time.monotonic()
        signed = await teams.post(raw)
        seconds = time.monotonic() - started
        unsigned = await teams.post(raw, authorization=None)
        forged = await teams.post(raw, authorization="Bearer not-a-jwt")

    assert signed.status_code == 400, signed.get_body()
    error = json.loads(signed.get_body())
    assert error["error"] == "bad_request"
    assert reason in error["message"]
    assert seconds < 5
    # Authentication comes first: without a valid token the body is never judged.
    assert (unsigned.status_code, forged.status_code) == (401, 401)
    assert queued(app_env) == []
    assert teams.connector.calls == []
    assert watch.beyond_loopback() == []
    assert watch.to_port(connector_port(teams.connector)) == []


def connector_port(connector: FakeConnector) -> int:
    port = urlsplit(connector.url).port
    assert port is not None
    return port


@pytest.mark.parametrize("header", ["Bearer ", "Bearer", "Bearer  ", "bearer ", "Bearer .", "Bearer a.b."])
async def test_an_authorization_header_without_a_token_is_401(
    app_env: QueueClient, teams: Teams, header: str
):
    response = await teams.post(teams.activity(text="summarise Acme"), authorization=header)
    assert response.status_code == 401
    assert json.loads(response.get_body())["error"] == "unauthorized"
    assert "invalid_token" in response.headers.get("WWW-Authenticate", "")
    assert queued(app_env) == []


async def test_garbage_with_no_or_a_bad_token_is_401_not_400(app_env: QueueClient, teams: Teams):
    for raw in (b"\x00\xff garbage", b"[1, 2]", b"null", b'{"type": "message"}'):
        for authorization in (None, "Bearer not-a-jwt", teams.channel.expired("https://x/")):
            response = await teams.post(raw, authorization=authorization)
            assert response.status_code == 401, (raw, authorization, response.get_body())
    assert queued(app_env) == []


async def test_repeated_authorization_headers_joined_by_the_host_are_401(app_env: QueueClient, teams: Teams):
    # The Functions host joins repeated headers with ", " before the worker sees them.
    activity = teams.activity(text="summarise Acme")
    raw = json.dumps(activity).encode()
    response = await teams.post(activity, authorization=f"{teams.sign(raw)}, {teams.sign(raw)}")
    assert response.status_code == 401
    assert queued(app_env) == []


async def test_a_body_over_256_kib_is_413_and_nothing_is_queued(app_env: QueueClient, teams: Teams):
    activity = teams.activity(text="x" * (300 * 1024))
    response = await teams.post(activity)
    assert response.status_code == 413
    assert json.loads(response.get_body())["error"] == "too_large"
    assert queued(app_env) == []


async def test_an_adaptive_card_action_botbuilder_refuses_is_its_400_not_a_500(
    app_env: QueueClient, teams: Teams
):
    # botbuilder answers this with an error body it cannot serialise (an Exception inside).
    activity = teams.activity(
        type="invoke", name="adaptiveCard/action", value={"action": {"type": "Action.Submit"}}
    )
    response = await teams.post(activity)
    assert response.status_code == 400, response.get_body()
    body = json.loads(response.get_body())
    assert body["type"] == "application/vnd.microsoft.error"
    assert body["value"]["code"] == "NotSupported"
    assert queued(app_env) == []


async def test_a_forged_queue_message_whose_service_url_is_not_the_tokens_is_dropped(
    app_env: QueueClient, teams: Teams
):
    assert (await teams.post(teams.activity(text="help"))).status_code == 202
    message = dequeue(app_env)
    envelope = json.loads(message.get_body())
    envelope["activity"]["serviceUrl"] = "https://smba.evil.example/"
    with OutboundWatch() as watch:
        await user_function("turns")(func.QueueMessage(id="forged", body=json.dumps(envelope)))
    assert teams.connector.calls == []
    assert watch.beyond_loopback() == []


# --- the queue trigger -----------------------------------------------------------------------------------


async def test_the_queued_turn_replies_through_the_bot_connector_with_the_bots_own_token(
    app_env: QueueClient, teams: Teams, sandbox: SandboxProcess
):
    assert (await teams.post(teams.activity(text="help"))).status_code == 202
    await user_function("turns")(dequeue(app_env))

    welcome = teams.connector.cards()
    assert len(welcome) == 1
    assert "my pipeline" in repr(card_of(welcome[0]))
    assert welcome[0].conversation_id == teams.conversation
    claims = bot_token_claims(welcome[0].authorization)
    assert claims["aud"] == "https://api.botframework.com"
    assert claims["appid"] == sandbox.settings.bot_app_id
    assert queued(app_env) == []


async def test_a_question_runs_end_to_end_through_the_queue(
    app_env: QueueClient, teams: Teams, copilot_settings: Settings
):
    await sign_in_with_sso(copilot_settings)
    assert (await teams.post(teams.activity(text="summarise Acme"))).status_code == 202
    assert teams.connector.calls == []

    await user_function("turns")(dequeue(app_env))

    typing = [c for c in teams.connector.calls if c.body.get("type") == "typing"]
    assert typing, "progress reaches the rep before the answer"
    answer = teams.connector.messages()[-1]
    # Deployed on Teams desktop: cited records become numbered Teams citations.
    assert "Acme Corporation [1]" in answer.body["text"]
    (message,) = [e for e in answer.body["entities"] if e.get("type") == "https://schema.org/Message"]
    assert message["citation"][0]["appearance"]["name"] == "Acme Corporation"
    for recorded in teams.connector.calls:
        assert bot_token_claims(recorded.authorization)["aud"] == "https://api.botframework.com"


async def test_a_rep_who_never_signed_in_is_asked_to(app_env: QueueClient, teams: Teams):
    assert (await teams.post(teams.activity(text="summarise Acme"))).status_code == 202
    await user_function("turns")(dequeue(app_env))
    reply = teams.connector.messages()[-1].body
    assert "sign in" in ((reply.get("text") or "") + repr(reply.get("attachments"))).lower()


async def test_an_unreadable_queue_message_is_dropped_without_retrying(app_env: QueueClient, teams: Teams):
    await user_function("turns")(func.QueueMessage(id="m1", body="not json"))
    await user_function("turns")(func.QueueMessage(id="m2", body=json.dumps({"activity": "x"})))
    assert teams.connector.calls == []


async def test_a_poisoned_turn_tells_the_rep_nothing_was_changed(
    app_env: QueueClient, teams: Teams, sandbox: SandboxProcess
):
    assert (await teams.post(teams.activity(text="log a call with Acme"))).status_code == 202
    poisoned = dequeue(app_env)  # as the host moves it to <queue>-poison after maxDequeueCount

    await user_function("turns_poison")(poisoned)

    sent = teams.connector.messages()
    assert len(sent) == 1
    text = sent[0].body.get("text") or ""
    assert "something went wrong" in text
    assert "something went wrong with your last request" in text
    assert "(ref " in text
    assert sent[0].conversation_id == teams.conversation
    claims = bot_token_claims(sent[0].authorization)
    assert claims["aud"] == "https://api.botframework.com"
    assert claims["appid"] == sandbox.settings.bot_app_id


async def test_a_poisoned_conversation_update_is_only_logged(app_env: QueueClient, teams: Teams):
    update = teams.activity(type="conversationUpdate", membersAdded=[{"id": "28:bot"}])
    assert (await teams.post(update)).status_code == 202
    await user_function("turns_poison")(dequeue(app_env))
    assert teams.connector.calls == []


async def test_the_host_refuses_to_start_on_a_schema_behind_the_code(app_env: QueueClient, db_conn: DbConn):
    await reset_host()
    # The Functions app's own migration (functions/sql/) was never applied.
    await db_conn.execute("DELETE FROM schema_migrations WHERE version = 5")

    with pytest.raises(MigrationError, match=r"missing migrations \[5\]"):
        await get_host()


# --- retention ------------------------------------------------------------------------------------------------


def _log_call(subject: str) -> dict[str, Any]:
    return call(
        "log_activity", type="call", subject=subject, notes="Discussed pricing", account_id="acc-acme"
    )


async def _count(conn: DbConn, query: str, *params: Any) -> int:
    cur = await conn.execute(query, params)
    row = await cur.fetchone()
    assert row is not None
    return int(next(iter(row.values())))


async def _state(conn: DbConn, thread_id: str) -> list[tuple[Any, ...]]:
    """What restoring the thread loads: its newest checkpoint per namespace, the blobs its
    channel versions name (joined as langgraph's saver does) and its pending writes."""
    cur = await conn.execute(
        """
        WITH newest AS (
            SELECT DISTINCT ON (checkpoint_ns) checkpoint_ns, checkpoint_id, checkpoint
              FROM checkpoints WHERE thread_id = %(t)s ORDER BY checkpoint_ns, checkpoint_id DESC)
        SELECT n.checkpoint_ns, n.checkpoint_id, 'blob' AS kind, b.channel AS name, b.version AS detail,
               md5(coalesce(b.blob, ''::bytea)) AS digest
          FROM newest n
          CROSS JOIN LATERAL jsonb_each_text(n.checkpoint -> 'channel_versions') AS v
          JOIN checkpoint_blobs b ON b.thread_id = %(t)s AND b.checkpoint_ns = n.checkpoint_ns
                                 AND b.channel = v.key AND b.version = v.value
        UNION ALL
        SELECT n.checkpoint_ns, n.checkpoint_id, 'write', w.task_id, w.idx::text, md5(w.blob)
          FROM newest n
          JOIN checkpoint_writes w ON w.thread_id = %(t)s AND w.checkpoint_ns = n.checkpoint_ns
                                  AND w.checkpoint_id = n.checkpoint_id
         ORDER BY 1, 2, 3, 4, 5
        """,
        {"t": thread_id},
    )
    return [tuple(row.values()) for row in await cur.fetchall()]


async def test_retention_expires_idle_threads_and_prunes_old_checkpoints_and_threads_still_resume(
    copilot_settings: Settings, sandbox: SandboxProcess, db_conn: DbConn
):
    rep = await sign_in(copilot_settings, "alex")
    model = ScriptedChatModel(
        # One step per model call: a tool call, then the answer once its result is in.
        steps=[
            calls(call("get_account", account_id="acc-acme")),
            AIMessage(content="Looked up [acc-acme]."),
            calls(_log_call("Idle thread write")),
            AIMessage(content="Logged."),
            calls(_log_call("Rejected one")),
            AIMessage(content="Not logged."),
            calls(call("list_opportunities", account_id="acc-acme")),
            AIMessage(content="Listed [acc-acme]."),
            calls(call("list_contacts", account_id="acc-acme")),
            AIMessage(content="Contacts listed [acc-acme]."),
            calls(_log_call("Pending across retention")),
        ],
        final="Done.",
    )
    async with service(copilot_settings, model) as svc:
        # An idle thread with an executed (audited) write and a rejection, then forgotten.
        idle = await svc.run_turn(rep.identity, rep.broker, None, "look up Acme")
        asked = await svc.run_turn(rep.identity, rep.broker, idle.thread_id, "log a call")
        await svc.decide(
            rep.identity,
            rep.broker,
            idle.thread_id,
            [{"tool_call_id": asked.proposals[0].tool_call_id, "type": "approve"}],
        )
        rejected = await svc.run_turn(rep.identity, rep.broker, idle.thread_id, "log another")
        await svc.decide(
            rep.identity,
            rep.broker,
            idle.thread_id,
            [{"tool_call_id": rejected.proposals[0].tool_call_id, "type": "reject", "reason": "dup"}],
        )
        # An active thread: a read turn, then a write waiting for a decision.
        active = await svc.run_turn(rep.identity, rep.broker, None, "Acme opportunities")
        # One checkpoint per run (durability="exit"): three runs leave old ones to prune.
        await svc.run_turn(rep.identity, rep.broker, active.thread_id, "and its contacts")
        pending = await svc.run_turn(rep.identity, rep.broker, active.thread_id, "log a call")
        assert pending.proposals

        await db_conn.execute(
            "UPDATE threads SET last_active_at = %s WHERE thread_id = %s",
            (
                datetime.now(UTC) - timedelta(days=40),
                idle.thread_id,
            ),
        )
        audit_before = await _count(db_conn, "SELECT count(*) FROM audit_log")
        rejections_before = await _count(db_conn, "SELECT count(*) FROM rejections")
        assert audit_before == 1
        assert rejections_before == 1
        checkpoints_before = await _count(
            db_conn, "SELECT count(*) FROM checkpoints WHERE thread_id = %s", active.thread_id
        )
        assert checkpoints_before > 2
        blobs_before = await _count(
            db_conn, "SELECT count(*) FROM checkpoint_blobs WHERE thread_id = %s", active.thread_id
        )
        state_before = await _state(db_conn, active.thread_id)
        assert any(kind == "write" for _, _, kind, *_ in state_before), "the pending approval is a write"

        async with svc.pool.connection() as conn:  # the application role: its grants suffice
            report = await apply_retention(
                conn, svc.saver, older_than=timedelta(days=30), now=datetime.now(UTC)
            )

        assert report.expired_threads == [idle.thread_id]
        assert report.pruned_threads == [active.thread_id]
        assert report.skipped_threads == []
        checkpoints_after = await _count(
            db_conn, "SELECT count(*) FROM checkpoints WHERE thread_id = %s", active.thread_id
        )
        assert report.checkpoints_deleted == checkpoints_before - checkpoints_after >= checkpoints_before - 1
        assert (
            await _count(
                db_conn, "SELECT count(*) FROM checkpoint_blobs WHERE thread_id = %s", active.thread_id
            )
            < blobs_before
        ), "the blobs only old versions named are gone"
        for table in ("threads", "checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            assert (
                await _count(db_conn, f"SELECT count(*) FROM {table} WHERE thread_id = %s", idle.thread_id)
                == 0
            )
        # One checkpoint per namespace is left, its blobs are all there, its writes too.
        per_ns = await db_conn.execute(
            "SELECT checkpoint_ns, count(*) AS n FROM checkpoints WHERE thread_id = %s GROUP BY 1",
            (active.thread_id,),
        )
        assert all(row["n"] == 1 for row in await per_ns.fetchall())
        assert await _state(db_conn, active.thread_id) == state_before
        assert (
            await _count(
                db_conn,
                """SELECT count(*) FROM checkpoint_writes w WHERE w.thread_id = %s AND NOT EXISTS (
                     SELECT 1 FROM checkpoints c WHERE c.thread_id = w.thread_id
                        AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)""",
                active.thread_id,
            )
            == 0
        )
        assert (
            await _count(
                db_conn,
                """SELECT count(*) FROM checkpoint_blobs b WHERE b.thread_id = %s AND NOT EXISTS (
                     SELECT 1 FROM checkpoints c WHERE c.thread_id = b.thread_id
                        AND c.checkpoint_ns = b.checkpoint_ns
                        AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)""",
                active.thread_id,
            )
            == 0
        )
        assert await _count(db_conn, "SELECT count(*) FROM audit_log") == audit_before
        assert await _count(db_conn, "SELECT count(*) FROM rejections") == rejections_before

        # The pruned thread still has its pending approval and its history, and resumes.
        still = await svc.pending(rep.identity, active.thread_id)
        assert [p.tool_call_id for p in still.proposals] == [pending.proposals[0].tool_call_id]
        done = await svc.decide(
            rep.identity,
            rep.broker,
            active.thread_id,
            [{"tool_call_id": pending.proposals[0].tool_call_id, "type": "approve"}],
        )
        assert done.outcomes[0]["result"]["status"] == "done"
        later = await svc.run_turn(rep.identity, rep.broker, active.thread_id, "anything else?")
        assert later.answer == "Done."
        seen = [str(m.content) for m in model.received[-1]]
        assert "Acme opportunities" in seen, "the conversation history survived pruning"

        # A second run finds nothing more to prune on an idle-free database.
        async with svc.pool.connection() as conn:
            again = await apply_retention(
                conn, svc.saver, older_than=timedelta(days=30), now=datetime.now(UTC)
            )
        assert again.expired_threads == []

        with pytest.raises(ValueError, match="older_than"):
            await apply_retention(db_conn, svc.saver, older_than=timedelta(0), now=datetime.now(UTC))


async def test_the_retention_timer_applies_the_configured_period(
    app_env: QueueClient, monkeypatch: pytest.MonkeyPatch, db_conn: DbConn
):
    monkeypatch.setenv("COPILOT_RETENTION_DAYS", "7")
    host = await get_host()
    async with host.runtime.service.pool.connection() as conn:
        old = await threads.create_thread(conn, tenant_id=TENANT, owner_aad_id="aad-old")
        recent = await threads.create_thread(conn, tenant_id=TENANT, owner_aad_id="aad-recent")
    await db_conn.execute(
        "UPDATE threads SET last_active_at = %s WHERE thread_id = %s",
        (
            datetime.now(UTC) - timedelta(days=8),
            old,
        ),
    )
    await db_conn.execute(
        "UPDATE threads SET last_active_at = %s WHERE thread_id = %s",
        (
            datetime.now(UTC) - timedelta(days=6),
            recent,
        ),
    )
    # Webhook deliveries are remembered for two days (functions/dedupe.py), whatever the period.
    conversation = f"conv-retention-{uuid.uuid4()}"
    await db_conn.execute(
        """INSERT INTO inbound_activities (channel_id, conversation_id, activity_id, received_at)
           VALUES ('msteams', %(c)s, 'old', now() - interval '3 days'),
                  ('msteams', %(c)s, 'recent', now() - interval '1 day')""",
        {"c": conversation},
    )

    class Timer:
        past_due = False

    await user_function("retention")(Timer())

    remaining = await db_conn.execute(
        "SELECT thread_id FROM threads WHERE thread_id = ANY(%s)", ([old, recent],)
    )
    assert [row["thread_id"] for row in await remaining.fetchall()] == [recent]
    deliveries = await db_conn.execute(
        "SELECT activity_id FROM inbound_activities WHERE conversation_id = %s", (conversation,)
    )
    assert [row["activity_id"] for row in await deliveries.fetchall()] == ["recent"]
