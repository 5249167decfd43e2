"""The copilot's settings: one app id setting for bot and copilot, sandbox defaults only locally."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.settings import BotSettings
from copilot.errors import ConfigurationError
from copilot.settings import LOCAL_APP_ID, Settings

_ENV = (
    "MicrosoftAppId",
    "MicrosoftAppPassword",
    "CRM_MCP_URL",
    "GRAPH_BASE_URL",
    "ENTRA_AUTHORITY",
    "ENTRA_CA_BUNDLE",
    "COPILOT_ENVIRONMENT",
    "COPILOT_DEV_SIGN_IN_PASSWORD",
    "BOT_APP_ID",
    "BOT_APP_PASSWORD",
    "COPILOT_MODEL",
    "COPILOT_FALLBACK_MODELS",
)

DEPLOYED = {
    "COPILOT_ENVIRONMENT": "deployed",
    "MicrosoftAppId": "0f1e2d3c-4b5a-4697-8877-665544332211",
    "MicrosoftAppPassword": "a-real-secret",
    "CRM_MCP_URL": "https://crm.contoso.example/mcp",
    "GRAPH_BASE_URL": "https://graph.microsoft.com/v1.0",
    "ENTRA_AUTHORITY": "https://login.microsoftonline.com",
    "COPILOT_MODEL": "azure_openai:gpt-4.1",
}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)


def _with_sandbox_ca(tmp_path: Path) -> Path:
    ca = tmp_path / "sandbox" / "ca.pem"
    ca.parent.mkdir(parents=True)
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    return ca


def test_local_development_uses_the_sandbox_app_sign_in_and_ca(tmp_path: Path):
    ca = _with_sandbox_ca(tmp_path)
    settings = Settings(COPILOT_DATA_DIR=tmp_path)
    assert settings.obo_client_id == LOCAL_APP_ID
    assert settings.obo_client_secret.get_secret_value()
    assert settings.dev_sign_in_password is not None
    assert settings.ca_bundle == ca


def test_the_bot_and_the_copilot_read_one_app_id_setting(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MicrosoftAppId", "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee")
    monkeypatch.setenv("MicrosoftAppPassword", "shared-secret")
    # The old second name for the same app is not read any more.
    monkeypatch.setenv("BOT_APP_ID", "99999999-9999-4999-8999-999999999999")
    settings, bot = Settings(), BotSettings()
    assert settings.obo_client_id == bot.microsoft_app_id == "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
    assert settings.obo_client_secret.get_secret_value() == "shared-secret"


def test_a_deployment_missing_any_endpoint_or_secret_refuses_to_start_naming_them():
    with pytest.raises(ConfigurationError) as refused:
        Settings(COPILOT_ENVIRONMENT="deployed")
    for name in (
        "MicrosoftAppId",
        "MicrosoftAppPassword",
        "CRM_MCP_URL",
        "GRAPH_BASE_URL",
        "ENTRA_AUTHORITY",
    ):
        assert name in refused.value.message
    partial = {k: v for k, v in DEPLOYED.items() if k != "MicrosoftAppPassword"}
    with pytest.raises(ConfigurationError, match="needs MicrosoftAppPassword set"):
        Settings(**partial)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="MicrosoftAppId"):
        Settings(**{**DEPLOYED, "MicrosoftAppId": " "})  # type: ignore[arg-type]


def test_a_deployment_gets_no_sandbox_default(tmp_path: Path):
    _with_sandbox_ca(tmp_path)
    settings = Settings(**DEPLOYED, COPILOT_DATA_DIR=tmp_path)  # type: ignore[arg-type]
    assert settings.obo_client_id == DEPLOYED["MicrosoftAppId"]
    assert settings.obo_client_secret.get_secret_value() == "a-real-secret"
    assert settings.dev_sign_in_password is None, "no password sign-in in a deployment"
    assert settings.ca_bundle is None, "the sandbox's CA is never trusted in a deployment"


def test_a_deployment_with_the_local_sign_in_password_set_refuses_to_start():
    with pytest.raises(ConfigurationError, match="COPILOT_DEV_SIGN_IN_PASSWORD is for local development"):
        Settings(**DEPLOYED, COPILOT_DEV_SIGN_IN_PASSWORD="x")  # type: ignore[arg-type]


def test_local_development_defaults_to_the_offline_model():
    settings = Settings()
    assert settings.copilot_model == "offline"
    assert Settings(COPILOT_FALLBACK_MODELS="openai:gpt-4.1-mini, offline").fallback_model_names() == [
        "openai:gpt-4.1-mini",
        "offline",
    ]


@pytest.mark.parametrize("model", [None, "offline", " Offline "], ids=["unset", "offline", "spaced"])
def test_a_deployment_with_the_offline_model_refuses_to_start_saying_to_set_a_real_one(model: str | None):
    deployed = {k: v for k, v in DEPLOYED.items() if k != "COPILOT_MODEL"}
    if model is not None:
        deployed["COPILOT_MODEL"] = model
    with pytest.raises(ConfigurationError) as refused:
        Settings(**deployed)  # type: ignore[arg-type]
    assert "refuses COPILOT_MODEL=offline" in refused.value.message
    assert "COPILOT_MODEL=azure_openai:<deployment>" in refused.value.message


def test_a_deployment_with_the_offline_model_as_a_fallback_refuses_to_start():
    with pytest.raises(ConfigurationError, match="refuses 'offline' in COPILOT_FALLBACK_MODELS"):
        Settings(**DEPLOYED, COPILOT_FALLBACK_MODELS="openai:gpt-4.1-mini,offline")  # type: ignore[arg-type]
    settings = Settings(**DEPLOYED, COPILOT_FALLBACK_MODELS="azure_openai:gpt-4.1-mini")  # type: ignore[arg-type]
    assert settings.fallback_model_names() == ["azure_openai:gpt-4.1-mini"]
