"""Bot Connector replies go out over aiohttp on the event loop, signed and retried as msrest's requests sender did.

Each test runs a turn the way the queue worker does (``authenticated_request`` then the
adapter's ``process_activity``) against the fake Bot Connector, over real HTTP.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import requests
from azure.core.credentials import AccessToken
from botbuilder.core import TurnContext
from botbuilder.integration.aiohttp import CloudAdapter
from botbuilder.schema import Activity, ChannelAccount, ConversationAccount
from botframework.connector.auth import ClaimsIdentity
from msrest.exceptions import ClientRequestError

from bot.connectors import ReusingBotFrameworkAuthentication
from bot.runtime import authenticated_request, build_authentication
from bot.settings import BotSettings
from tests.support.fake_connector import FakeConnector

APP_ID = "0f1e2d3c-4b5a-4697-8877-665544332211"


class StaticCredential:
    """Stands in for azure-identity's ClientSecretCredential (the identity provider is Entra ID)."""

    def __init__(self, **_: Any) -> None:
        pass

    def get_token(self, *scopes: str) -> AccessToken:
        return AccessToken("app-token", int(time.time()) + 3600)


@pytest.fixture
async def fake() -> AsyncIterator[FakeConnector]:
    connector = FakeConnector()
    await connector.start()
    yield connector
    await connector.stop()


@pytest.fixture
def through_requests(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every URL anything sends through ``requests`` while the test runs."""
    sent: list[str] = []
    original = requests.Session.request

    def recording(self: requests.Session, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(url)
        return original(self, method, url, *args, **kwargs)

    monkeypatch.setattr(requests.Session, "request", recording)
    return sent


@pytest.fixture
async def app_auth(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ReusingBotFrameworkAuthentication]:
    import azure.identity

    monkeypatch.setattr(azure.identity, "ClientSecretCredential", StaticCredential)
    settings = BotSettings.model_validate({"MicrosoftAppId": APP_ID, "MicrosoftAppPassword": "secret"})
    auth = build_authentication(settings)
    assert isinstance(auth, ReusingBotFrameworkAuthentication)
    yield auth
    await auth.close()


def _message(fake: FakeConnector, text: str = "how is the Contoso deal going?") -> Activity:
    return Activity(
        type="message",
        id="incoming-1",
        text=text,
        channel_id="msteams",
        service_url=fake.url,
        conversation=ConversationAccount(id="conv-1"),
        from_property=ChannelAccount(id="rep-1"),
        recipient=ChannelAccount(id=f"28:{APP_ID}"),
    )


async def _queued_turn(auth: ReusingBotFrameworkAuthentication, fake: FakeConnector) -> None:
    """A queued turn: the "Working on it…" reply, then the answer put in its place."""

    async def logic(turn_context: TurnContext) -> None:
        sent = await turn_context.send_activity("Working on it…")
        assert sent is not None
        answer = Activity(type="message", id=sent.id, text="Contoso is in negotiation.")
        await turn_context.update_activity(answer)

    identity = ClaimsIdentity({"aud": APP_ID, "serviceurl": fake.url}, True)
    result = authenticated_request(auth, identity, None, None)
    await CloudAdapter(auth).process_activity(result, _message(fake), logic)


async def test_a_turns_replies_reach_the_connector_with_the_apps_bearer_token_and_never_through_requests(
    app_auth: ReusingBotFrameworkAuthentication, fake: FakeConnector, through_requests: list[str]
):
    await _queued_turn(app_auth, fake)
    await _queued_turn(app_auth, fake)

    assert [(c.method, c.body.get("text")) for c in fake.calls] == [
        ("POST", "Working on it…"),
        ("PUT", "Contoso is in negotiation."),
    ] * 2
    assert {c.authorization for c in fake.calls} == {"Bearer app-token"}
    assert through_requests == [], "no Bot Connector request may go through requests (a thread per reply)"


async def test_a_reply_throttled_with_429_and_retry_after_is_sent_again_after_that_delay_and_arrives_once(
    app_auth: ReusingBotFrameworkAuthentication, fake: FakeConnector, caplog: pytest.LogCaptureFixture
):
    fake.fail_next = [(429, {"Retry-After": "1"})]
    caplog.set_level(logging.INFO, logger="bot.connector_http")

    await _queued_turn(app_auth, fake)

    assert fake.failed == [("POST", 429, "Bearer app-token")]
    assert [c.body.get("text") for c in fake.messages()] == ["Working on it…"], "sent again, once"
    assert len(fake.updates()) == 1
    assert any("in 1.0 s after 429" in r.getMessage() for r in caplog.records), "Retry-After honoured"


async def test_a_reply_and_an_update_refused_with_503_are_sent_again_and_arrive_once(
    app_auth: ReusingBotFrameworkAuthentication, fake: FakeConnector
):
    fake.fail_next = [(503, {}), (502, {})]
    await _queued_turn(app_auth, fake)

    assert [status for _, status, _ in fake.failed] == [503, 502]
    assert [c.method for c in fake.calls] == ["POST", "PUT"]


async def test_a_connector_that_keeps_failing_gets_three_retries_then_the_turn_sees_the_error(
    app_auth: ReusingBotFrameworkAuthentication, fake: FakeConnector
):
    fake.fail_next = [(503, {})] * 5
    client = await app_auth.create_connector_factory(
        ClaimsIdentity({"aud": APP_ID, "serviceurl": fake.url}, True)
    ).create(fake.url, None)

    with pytest.raises(ClientRequestError):
        await client.conversations.send_to_conversation("conv-1", Activity(type="message", text="hi"))

    assert len(fake.failed) == 4, "the first attempt and msrest's three retries"
    assert fake.calls == []


async def test_a_429_without_retry_after_is_not_sent_again(
    app_auth: ReusingBotFrameworkAuthentication, fake: FakeConnector
):
    from botframework.connector.models import ErrorResponseException

    fake.fail_next = [(429, {})]
    client = await app_auth.create_connector_factory(
        ClaimsIdentity({"aud": APP_ID, "serviceurl": fake.url}, True)
    ).create(fake.url, None)

    with pytest.raises(ErrorResponseException):
        await client.conversations.send_to_conversation("conv-1", Activity(type="message", text="hi"))

    assert len(fake.failed) == 1, "urllib3 retries a 429 only when the server says when"


async def test_in_local_mode_replies_carry_no_authorization_header(
    fake: FakeConnector, through_requests: list[str]
):
    auth = build_authentication(BotSettings.model_validate({}))
    assert isinstance(auth, ReusingBotFrameworkAuthentication)

    async def logic(turn_context: TurnContext) -> None:
        await turn_context.send_activity("Working on it…")

    try:
        # As the HTTP edge: no channel token in local mode (channel_token_header gives None).
        activity = _message(fake)
        result = await auth.authenticate_request(activity, None)  # type: ignore[arg-type]
        await CloudAdapter(auth).process_activity(result, activity, logic)
    finally:
        await auth.close()

    assert [c.body.get("text") for c in fake.messages()] == ["Working on it…"]
    assert [c.authorization for c in fake.calls] == [None]
    assert through_requests == []


async def test_after_the_runtime_closes_its_connectors_a_later_turn_still_replies(
    app_auth: ReusingBotFrameworkAuthentication, fake: FakeConnector
):
    await _queued_turn(app_auth, fake)
    await app_auth.close()
    await _queued_turn(app_auth, fake)

    assert [c.method for c in fake.calls] == ["POST", "PUT", "POST", "PUT"]
