"""The bot's Bot Connector credentials never fetch a token on the event loop."""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

import pytest
from azure.core.credentials import AccessToken

from bot.credentials import AzureIdentityAppCredentials, AzureIdentityCredentialsFactory
from bot.settings import BotSettings

APP_ID = "0f1e2d3c-4b5a-4697-8877-665544332211"
SCOPE = "https://api.botframework.com"


class RecordingCredential:
    """Stands in for azure-identity's ClientSecretCredential (the identity provider is Entra ID)."""

    fetched_on: ClassVar[list[str]] = []

    def __init__(self, **_: Any) -> None:
        pass

    def get_token(self, *scopes: str) -> AccessToken:
        RecordingCredential.fetched_on.append(threading.current_thread().name)
        return AccessToken(f"token-{len(RecordingCredential.fetched_on)}", int(time.time()) + 3600)


@pytest.fixture
def factory(monkeypatch: pytest.MonkeyPatch) -> AzureIdentityCredentialsFactory:
    import azure.identity

    monkeypatch.setattr(azure.identity, "ClientSecretCredential", RecordingCredential)
    RecordingCredential.fetched_on = []
    settings = BotSettings.model_validate({"MicrosoftAppId": APP_ID, "MicrosoftAppPassword": "secret"})
    return AzureIdentityCredentialsFactory(settings)


async def test_tokens_are_fetched_off_the_loop_once_and_reused_across_turns(
    factory: AzureIdentityCredentialsFactory,
):
    loop_thread = threading.current_thread().name
    tokens = []
    for _ in range(5):  # five turns, each asking botbuilder for credentials and signing requests
        credentials = await factory.create_credentials(APP_ID, SCOPE, "", True)
        assert isinstance(credentials, AzureIdentityAppCredentials)
        tokens += [credentials.get_access_token() for _ in range(3)]

    assert RecordingCredential.fetched_on, "a token was fetched"
    assert loop_thread not in RecordingCredential.fetched_on, "no fetch may block the event loop"
    assert len(RecordingCredential.fetched_on) == 1, "one token for five turns"
    assert set(tokens) == {"token-1"}


async def test_a_token_near_its_expiry_is_fetched_again_off_the_loop(
    factory: AzureIdentityCredentialsFactory,
):
    credentials = await factory.create_credentials(APP_ID, SCOPE, "", True)
    assert isinstance(credentials, AzureIdentityAppCredentials)
    credentials._token = ("old", int(time.time()) + 60)  # inside the refresh margin
    again = await factory.create_credentials(APP_ID, SCOPE, "", True)
    assert again is credentials
    assert again.get_access_token() == "token-2"
    assert threading.current_thread().name not in RecordingCredential.fetched_on
