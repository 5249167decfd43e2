"""Local-development conveniences can never be used in a deployment."""

from __future__ import annotations

import pytest

from copilot.auth.tokens import dev_sign_in
from copilot.errors import AuthError, ConfigurationError
from copilot.settings import Settings


async def test_password_sign_in_is_refused_against_a_real_identity_provider():
    settings = Settings(ENTRA_AUTHORITY="https://login.microsoftonline.com")
    with pytest.raises(AuthError, match="loopback"):
        await dev_sign_in(settings, "alex")


async def test_the_function_app_refuses_to_start_without_bot_credentials(monkeypatch: pytest.MonkeyPatch):
    from functions import host

    monkeypatch.setenv("MicrosoftAppId", "")
    await host.reset_host()
    with pytest.raises(ConfigurationError, match="MicrosoftAppId"):
        await host.get_host()
