"""The template and the code agree: what start-up requires is set, what is set is read, the
queues are the ones the functions bind to, and the outputs are what ``python -m bot package``
takes.

The required settings are not listed here: the template's app settings (evaluated with the
example parameters file, Key Vault references replaced by values of the kind the vault holds)
are handed to the code's own start-up checks (its pydantic settings, the audit keyring and
anchor store, the token store's key, the trace pseudonym key), which raise on anything missing.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import azure.identity
import langchain_openai.chat_models.azure
import pytest

from bot.package import PUBLISHER_SETTINGS, PackageSettings, render_manifest
from bot.rep_tokens import SsoRepTokens
from bot.runtime import sso_token_key
from bot.settings import BotSettings
from copilot.errors import ConfigurationError
from copilot.persistence.audit import audit_config
from copilot.settings import Settings
from copilot.tracing.pseudonym import load_pseudonym_key
from tests.infra.bicep import ROOT, UNKNOWN, app_settings, every_setting_name, main_scope

KEY_VAULT_REFERENCE = re.compile(r"^@Microsoft\.KeyVault\(SecretUri=\S*secrets/([A-Za-z0-9-]+)\)$")


def load_vault_secrets() -> ModuleType:
    """``infra/vault_secrets.py`` (a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("vault_secrets", ROOT / "infra" / "vault_secrets.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Secrets someone other than make infra-secrets writes, with a stand-in of the same kind.
OTHER_SECRETS = {
    "microsoft-app-password": "the-entra-app-client-secret",  # the template, from its parameter
    "azure-openai-api-key": "0123456789abcdef0123456789abcdef",  # the template (openai.bicep)
    "database-url": "host=psql.example dbname=copilot user=copilot_app_login sslmode=require",  # the admin
    "langsmith-api-key": "lsv2_pt_example",  # the admin, when tracing is on
}

# Settings that the Functions host, or a library the code hands its configuration to, reads
# (not the project's own settings classes), each with where it is read.
HOST_SETTINGS = {
    "APPLICATIONINSIGHTS_CONNECTION_STRING": "the Functions host (telemetry destination)",
    "APPLICATIONINSIGHTS_AUTHENTICATION_STRING": "the Functions host (Entra auth to App Insights)",
}
LIBRARY_SETTINGS: dict[str, ModuleType] = {
    "AZURE_CLIENT_ID": azure.identity,  # which user-assigned identity azure-identity picks
    "AZURE_OPENAI_ENDPOINT": langchain_openai.chat_models.azure,
    "OPENAI_API_VERSION": langchain_openai.chat_models.azure,
    "AZURE_OPENAI_API_KEY": langchain_openai.chat_models.azure,
}


def _library_reads(module: ModuleType, name: str) -> bool:
    if f'"{name}"' in inspect.getsource(module) or f"'{name}'" in inspect.getsource(module):
        return True
    return any(
        f'"{name}"' in path.read_text(errors="ignore")
        for path in Path(module.__file__ or "").parent.rglob("*.py")
    )


def code_setting_names() -> set[str]:
    """Every environment variable the Function App's code reads itself."""
    names = {
        field.alias or name for cls in (Settings, BotSettings) for name, field in cls.model_fields.items()
    }
    for path in (ROOT / "functions").glob("*.py"):
        names |= set(re.findall(r"os\.environ(?:\.get\(|\[)\s*\"([^\"]+)\"", path.read_text()))
    return names


def binding_connection() -> str:
    """The storage connection the queue triggers name (``functions.turns.CONNECTION``)."""
    return {trigger["connection"] for trigger in queue_triggers()}.pop()


def queue_triggers() -> list[dict[str, Any]]:
    import function_app

    # get_functions() refuses to return a name twice per process (tests/unit/test_function_app.py).
    function_app.app.functions_bindings = None
    triggers = []
    for function in function_app.app.get_functions():
        for binding in function.get_bindings():
            data = binding.get_dict_repr()
            if data["type"] == "queueTrigger":
                triggers.append(data)
    assert triggers, "function_app registers no queue trigger"
    return triggers


def deployed_environment(settings: dict[str, Any]) -> dict[str, str]:
    """The app settings as the Function App's process sees them once Key Vault resolved them."""
    generated = {name: make(None) for name, make in load_vault_secrets().GENERATED.items()}
    secrets = {**OTHER_SECRETS, **generated}
    env = {}
    for name, value in settings.items():
        if isinstance(value, str) and (match := KEY_VAULT_REFERENCE.match(value)):
            secret = match.group(1)
            assert secret in secrets, (
                f"{name} references Key Vault secret {secret!r}, which neither the template nor "
                f"make infra-secrets creates (known: {sorted(secrets)})"
            )
            env[name] = secrets[secret]
        elif value is UNKNOWN or (isinstance(value, str) and "${" in value):
            # A deployment-time value: an endpoint for URL-named settings, else an id.
            url = name.upper().endswith(("_URL", "_URI", "SERVICEURI", "ENDPOINT"))
            env[name] = "https://deployment-time.example/" if url else "00000000-0000-4000-8000-000000000001"
        else:
            env[name] = str(value)
    return env


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No setting of this machine leaks into a start-up check."""
    for name in code_setting_names() | every_setting_name():
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def start_up(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """What the Function App checks before serving, with ``env`` as its settings (raises on a fault)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings, bot_settings = Settings(), BotSettings()
    if bot_settings.dev_mode:  # functions.host refuses to open the edge without bot credentials
        raise ConfigurationError("MicrosoftAppId is not set")
    SsoRepTokens(settings, pool=None, encryption_key=sso_token_key(bot_settings))  # type: ignore[arg-type]
    audit_config(settings)
    load_pseudonym_key(settings)


@pytest.mark.parametrize("switches", [{}, {"deployOpenAi": True, "langsmithTracing": True}])
def test_the_templates_settings_pass_every_start_up_check_of_a_deployment(clean_environment, switches):
    env = deployed_environment(app_settings(main_scope(**switches)))
    assert env["COPILOT_ENVIRONMENT"] == "deployed"
    start_up(clean_environment, env)


def test_the_start_up_checks_refuse_a_deployment_missing_a_required_setting(clean_environment):
    # The check above can fail: without one of the settings the code requires, start-up raises.
    env = deployed_environment(app_settings())
    # CRM_URL: the Dataverse connector's endpoints (MCP, OAuth resource) all derive from it.
    for name in ("CRM_URL", "COPILOT_TOKEN_ENCRYPTION_KEY", "COPILOT_AUDIT_HMAC_KEYS", "MicrosoftAppId"):
        partial = {key: value for key, value in env.items() if key != name}
        with pytest.MonkeyPatch.context() as patch:
            for other in env:
                patch.delenv(other, raising=False)
            with pytest.raises((ConfigurationError, ValueError)):
                start_up(patch, partial)


def test_every_app_setting_the_template_sets_is_one_something_reads():
    code = code_setting_names()
    prefix = f"{binding_connection()}__"
    unread = []
    for name in sorted(every_setting_name()):
        if name in code or name in HOST_SETTINGS or name.startswith(prefix):
            continue
        if name in LIBRARY_SETTINGS and _library_reads(LIBRARY_SETTINGS[name], name):
            continue
        unread.append(name)
    assert not unread, f"app settings nothing reads (a typo?): {unread}"


def test_the_template_creates_exactly_the_queues_the_functions_bind_to():
    scope = main_scope()
    storage = scope.module("storage")
    queues = {
        storage.eval(queue["name"])
        for queue in storage.resources("Microsoft.Storage/storageAccounts/queueServices/queues").values()
    }
    # Bindings are named when the app is indexed, from COPILOT_TURN_QUEUE: the template's value.
    assert app_settings(scope)["COPILOT_TURN_QUEUE"] == storage.params["turnQueueName"]
    bound = {trigger["queueName"] for trigger in queue_triggers()}
    assert queues == bound, f"template queues {sorted(queues)} != function bindings {sorted(bound)}"


def test_the_queue_triggers_storage_connection_is_configured_identity_based():
    connection = binding_connection()
    settings = app_settings()
    assert connection not in settings, f"{connection} as a connection string needs shared keys"
    assert settings[f"{connection}__credential"] == "managedidentity"
    for service in ("blob", "queue", "table"):
        assert f"{connection}__{service}ServiceUri" in settings


PUBLISHER = {
    "publisherName": "Tailspin Sales IT",
    "websiteUrl": "https://tailspin-toys.com/crm-copilot",
    "privacyUrl": "https://tailspin-toys.com/privacy",
    "termsUrl": "https://tailspin-toys.com/terms",
}
"""An organisation's own publisher parameters (the example file's are Contoso's samples)."""


def _package_values(scope) -> dict[str, str]:
    outputs = scope.doc["outputs"]
    package_names = {field.alias or name for name, field in PackageSettings.model_fields.items()}
    shared = (package_names & set(app_settings(scope))) | set(PUBLISHER_SETTINGS)
    assert shared <= set(outputs), f"outputs lack {sorted(shared - set(outputs))} for python -m bot package"
    values = {name: scope.eval(outputs[name]["value"]) for name in shared}
    return {name: re.sub(r"\$\{[^}]*\}", "abc123", str(value)) for name, value in values.items()}


def test_the_outputs_are_what_the_app_package_reads():
    values = _package_values(main_scope(**PUBLISHER))
    assert {"MicrosoftAppId", "BOT_DOMAIN", *PUBLISHER_SETTINGS} <= set(values)
    manifest = render_manifest(PackageSettings(**values))
    assert manifest["bots"][0]["botId"] == values["MicrosoftAppId"]
    assert manifest["developer"]["name"] == PUBLISHER["publisherName"]
    # make infra-package hands every one of them to python -m bot package.
    recipe = (ROOT / "Makefile").read_text().split("infra-package:", 1)[1].split("\n\n", 1)[0]
    for name in values:
        assert f"_output,{name})" in recipe, name


def test_the_publisher_parameters_are_required_and_the_example_files_samples_are_refused():
    parameters = main_scope().doc["parameters"]
    for name in PUBLISHER:
        assert "default" not in parameters[name] or parameters[name]["default"] is None, name
    with pytest.raises(ValueError, match="is a sample value"):
        render_manifest(PackageSettings(**_package_values(main_scope())))
