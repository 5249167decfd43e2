"""Bot Connector clients are reused across turns; the user-token client is built only when used."""

from __future__ import annotations

import time
from typing import Any, ClassVar

import pytest
from azure.core.credentials import AccessToken
from botframework.connector.auth import ClaimsIdentity

from bot.connectors import ReusingBotFrameworkAuthentication
from bot.credentials import AzureIdentityAppCredentials
from bot.runtime import build_authentication
from bot.settings import BotSettings

APP_ID = "0f1e2d3c-4b5a-4697-8877-665544332211"
TEAMS = "https://smba.trafficmanager.net/emea/"


class ExpiringCredential:
    """Stands in for azure-identity's ClientSecretCredential (the identity provider is Entra ID);
    ``lifetime`` seconds per token."""

    lifetime: ClassVar[int] = 3600
    fetched: ClassVar[int] = 0

    def __init__(self, **_: Any) -> None:
        pass

    def get_token(self, *scopes: str) -> AccessToken:
        ExpiringCredential.fetched += 1
        return AccessToken(f"token-{ExpiringCredential.fetched}", int(time.time()) + self.lifetime)


@pytest.fixture
def auth(monkeypatch: pytest.MonkeyPatch) -> ReusingBotFrameworkAuthentication:
    import azure.identity

    monkeypatch.setattr(azure.identity, "ClientSecretCredential", ExpiringCredential)
    ExpiringCredential.fetched, ExpiringCredential.lifetime = 0, 3600
    settings = BotSettings.model_validate({"MicrosoftAppId": APP_ID, "MicrosoftAppPassword": "secret"})
    built = build_authentication(settings)
    assert isinstance(built, ReusingBotFrameworkAuthentication)
    return built


def _channel_identity() -> ClaimsIdentity:
    return ClaimsIdentity({"aud": APP_ID, "serviceurl": TEAMS}, True)


async def test_every_turn_to_one_service_url_replies_through_the_same_connector_client(
    auth: ReusingBotFrameworkAuthentication,
):
    clients = [await auth.create_connector_factory(_channel_identity()).create(TEAMS, None) for _ in range(3)]
    other = await auth.create_connector_factory(_channel_identity()).create(
        "https://smba.trafficmanager.net/amer/", None
    )

    assert clients[0] is clients[1] is clients[2]
    assert other is not clients[0]


async def test_a_reused_connector_client_gets_its_token_refreshed_before_expiry(
    auth: ReusingBotFrameworkAuthentication,
):
    ExpiringCredential.lifetime = 60  # inside the refresh margin: stale as soon as it arrives
    first = await auth.create_connector_factory(_channel_identity()).create(TEAMS, None)
    fetched = ExpiringCredential.fetched
    again = await auth.create_connector_factory(_channel_identity()).create(TEAMS, None)

    assert again is first
    assert isinstance(first.config.credentials, AzureIdentityAppCredentials)
    assert ExpiringCredential.fetched == fetched + 1, "the stale token was fetched again on reuse"


async def test_the_user_token_client_exchanges_nothing_until_a_sign_in_api_is_called(
    auth: ReusingBotFrameworkAuthentication,
):
    client = await auth.create_user_token_client(_channel_identity())

    assert ExpiringCredential.fetched == 0, "no Bot Connector token was fetched for an unused client"
    assert client is not None
