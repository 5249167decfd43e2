"""The project's own rules for the template, where checkov has none (PostgreSQL Flexible
Server, Bot Service, Key Vault references) or cannot evaluate a parameter: each is checked on
the parsed template, evaluated with its default parameters (and the example parameters file
for those without a default).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import SecretStr

from bot.settings import BotSettings
from copilot.settings import Settings
from tests.infra.bicep import (
    INFRA,
    UNKNOWN,
    Scope,
    app_settings,
    bicep_files,
    body,
    condition,
    main_scope,
    parse,
)

KEY_VAULT_REFERENCE = re.compile(r"^@Microsoft\.KeyVault\(SecretUri=\$\{keyVaultUri\}secrets/[a-z0-9-]+\)$")
"""A versionless reference into this deployment's vault (``keyVaultUri`` ends with a slash)."""

PROVIDER_SECRETS = {"AZURE_OPENAI_API_KEY"}
"""Secrets read by a library rather than a SecretStr field of the project's settings."""

DATA_STORES = {
    # main.bicep module → (resource type, path of its public-access switch)
    "storage": ("Microsoft.Storage/storageAccounts", ("publicNetworkAccess",)),
    "vault": ("Microsoft.KeyVault/vaults", ("publicNetworkAccess",)),
    "postgres": ("Microsoft.DBforPostgreSQL/flexibleServers", ("network", "publicNetworkAccess")),
    "openai": ("Microsoft.CognitiveServices/accounts", ("publicNetworkAccess",)),
}


def _only(scope: Scope, type_: str) -> dict[str, Any]:
    found = scope.resources(type_)
    assert len(found) == 1, f"{scope.path.name}: expected one {type_}, found {sorted(found)}"
    return next(iter(found.values()))


def _properties(scope: Scope, type_: str) -> dict[str, Any]:
    props: dict[str, Any] = scope.eval(_only(scope, type_)["properties"])
    return props


def _dig(value: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def secret_setting_names() -> set[str]:
    """App settings the code types as secrets (``SecretStr`` fields), plus providers' keys."""
    names = set(PROVIDER_SECRETS)
    for cls in (Settings, BotSettings):
        for name, field in cls.model_fields.items():
            if SecretStr in getattr(field.annotation, "__args__", (field.annotation,)):
                names.add(field.alias or name)
    return names


# --- network ------------------------------------------------------------------------------


@pytest.mark.parametrize("module", sorted(DATA_STORES))
def test_no_data_store_is_reachable_from_the_internet_by_default(module):
    type_, switch = DATA_STORES[module]
    store = main_scope().module(module)
    props = _properties(store, type_)
    assert _dig(props, switch) == "Disabled", f"{module}: public network access is {_dig(props, switch)!r}"
    acls = props.get("networkAcls")
    if acls is not None:
        assert acls["defaultAction"] == "Deny"
        assert acls["ipRules"] == []


def test_opening_the_data_stores_takes_an_explicit_parameter():
    # The switch exists and works: the same evaluation with it set opens them.
    opened = main_scope(allowPublicDataAccess=True)
    for module, (type_, switch) in DATA_STORES.items():
        assert _dig(_properties(opened.module(module), type_), switch) == "Enabled", module


def test_postgres_admits_no_azure_wide_firewall_rule_by_default():
    postgres = main_scope().module("postgres")
    for name, spec in postgres.resource_specs().items():
        if spec["type"] != "Microsoft.DBforPostgreSQL/flexibleServers/firewallRules":
            continue
        test = condition(spec["config"])
        assert test is not None, f"firewall rule {name} is unconditional"
        assert postgres.eval(test) is False, f"firewall rule {name} is deployed by default"


def deployed_endpoint_groups(scope: Scope) -> list[str]:
    """The sub-resources (``groupId``) that get a private endpoint under ``scope``'s parameters."""
    endpoint = (INFRA / "modules" / "privateendpoint.bicep").resolve()
    groups: list[str] = []
    for name, path in scope.module_paths().items():
        spec = scope.doc["modules"][name]["config"]
        test = condition(spec)
        if path == endpoint and (test is None or scope.eval(test) is True):
            groups.append(scope.module(name).params["groupId"])
    return sorted(groups)


def test_the_vnet_and_private_endpoints_are_on_by_default():
    scope = main_scope()
    assert scope.params["enableVnet"] is True
    assert deployed_endpoint_groups(scope) == sorted(
        ["blob", "queue", "table", "vault", "postgresqlServer", "account"]
    )


def test_without_the_vnet_or_openai_their_private_endpoints_are_not_deployed():
    assert deployed_endpoint_groups(main_scope(enableVnet=False)) == []
    assert "account" not in deployed_endpoint_groups(main_scope(deployOpenAi=False))


# --- database -------------------------------------------------------------------------------


def test_postgres_authenticates_with_entra_only_by_default():
    postgres = main_scope().module("postgres")
    props = _properties(postgres, "Microsoft.DBforPostgreSQL/flexibleServers")
    assert props["authConfig"]["activeDirectoryAuth"] == "Enabled"
    assert props["authConfig"]["passwordAuth"] == "Disabled"
    assert props["administratorLoginPassword"] is None
    assert props["administratorLogin"] is None


def test_a_postgres_password_when_enabled_comes_from_a_secure_parameter():
    doc = parse(main_scope().module_paths()["postgres"])
    server = body(doc["resources"]["server"]["config"])
    password = server["properties"]["administratorLoginPassword"]["operator"]["operands"]["true_value"]
    decorators = {d["type"] for d in doc["parameters"][password]["decorators"]}
    assert "secure" in decorators


def test_the_postgres_entra_administrator_is_the_admin_group_not_the_apps_identity():
    scope = main_scope()
    passed = body(scope.doc["modules"]["postgres"]["config"])["params"]
    assert passed["entraAdminObjectId"] == "postgresAdminObjectId"
    postgres = scope.module("postgres")
    (admin,) = postgres.resources("Microsoft.DBforPostgreSQL/flexibleServers/administrators").values()
    assert postgres.eval(admin["name"]) == scope.params["postgresAdminObjectId"]
    # The identity gets the unprivileged app role, by SQL the admin runs after db migrate.
    grant = postgres.eval(parse(postgres.path)["outputs"]["appRoleGrantSql"]["value"])
    assert "GRANT copilot_app TO" in grant


def test_postgres_allows_the_vector_extension_and_requires_tls():
    postgres = main_scope().module("postgres")
    configs = {
        postgres.eval(c["name"]): postgres.eval(c["properties"]["value"])
        for c in postgres.resources("Microsoft.DBforPostgreSQL/flexibleServers/configurations").values()
    }
    assert "VECTOR" in configs["azure.extensions"].upper().split(",")
    assert configs["require_secure_transport"] == "ON"


# --- Key Vault and secrets --------------------------------------------------------------------


def test_the_vault_uses_rbac_and_purge_protection():
    props = _properties(main_scope().module("vault"), "Microsoft.KeyVault/vaults")
    assert props["enableRbacAuthorization"] is True
    assert props["enablePurgeProtection"] is True
    assert props["enableSoftDelete"] is True
    assert "accessPolicies" not in props


@pytest.mark.parametrize("switches", [{}, {"deployOpenAi": True, "langsmithTracing": True}])
def test_every_secret_app_setting_is_a_key_vault_reference(switches):
    settings = app_settings(main_scope(**switches))
    secrets = secret_setting_names() & set(settings)
    assert {"DATABASE_URL", "MicrosoftAppPassword", "COPILOT_AUDIT_HMAC_KEYS"} <= secrets
    for name in sorted(secrets):
        assert KEY_VAULT_REFERENCE.match(str(settings[name])), (
            f"{name} = {settings[name]!r} is not a Key Vault reference"
        )


def test_key_vault_references_resolve_with_the_apps_own_identity():
    app = main_scope().module("functionApp")
    site = _only(app, "Microsoft.Web/sites")
    assert site["properties"]["keyVaultReferenceIdentity"] == "identityId"
    assert site["identity"]["type"] == "UserAssigned"
    # The one identity it runs as is that same identity (pycep keeps the quoted key's quotes).
    assert list(site["identity"]["userAssignedIdentities"]) == ["'${identityId}'"]


def test_no_secure_parameter_has_a_value_or_becomes_an_output():
    for path in bicep_files():
        doc = parse(path)
        secure = {
            name
            for name, spec in doc.get("parameters", {}).items()
            if any(d["type"] == "secure" for d in spec["decorators"])
        }
        for name in secure:
            assert doc["parameters"][name]["default"] in (None, ""), f"{path.name}: {name} has a default"
        for output, spec in doc.get("outputs", {}).items():
            assert str(spec["value"]) not in secure, f"{path.name}: output {output} is a secure parameter"


# --- storage, monitoring, the app, the bot --------------------------------------------------------


def test_storage_takes_no_shared_keys_and_tls_1_2_only():
    props = _properties(main_scope().module("storage"), "Microsoft.Storage/storageAccounts")
    assert props["allowSharedKeyAccess"] is False
    assert props["minimumTlsVersion"] == "TLS1_2"
    assert props["supportsHttpsTrafficOnly"] is True
    assert props["allowBlobPublicAccess"] is False


def test_the_anchor_container_keeps_anchors_immutable_but_appendable():
    storage = main_scope().module("storage")
    containers = storage.resources("Microsoft.Storage/storageAccounts/blobServices/containers")
    (policy,) = storage.resources(
        "Microsoft.Storage/storageAccounts/blobServices/containers/immutabilityPolicies"
    ).values()
    parent = policy["parent"]
    assert storage.eval(containers[parent]["name"]) == "audit-anchors"
    props = storage.eval(policy["properties"])
    assert props["allowProtectedAppendWrites"] is True
    assert props["immutabilityPeriodSinceCreationInDays"] >= 1


def test_monitoring_takes_no_local_authentication():
    monitoring = main_scope().module("monitoring")
    assert _properties(monitoring, "Microsoft.Insights/components")["DisableLocalAuth"] is True
    assert (
        _properties(monitoring, "Microsoft.OperationalInsights/workspaces")["features"]["disableLocalAuth"]
        is True
    )


def test_the_function_app_is_linux_python_on_flex_consumption_over_https():
    app = main_scope().module("functionApp")
    plan = _only(app, "Microsoft.Web/serverfarms")
    assert app.eval(plan["sku"]) == {"name": "FC1", "tier": "FlexConsumption"}
    site = _only(app, "Microsoft.Web/sites")
    assert site["kind"] == "functionapp,linux"
    props = app.eval(site["properties"])
    assert props["functionAppConfig"]["runtime"] == {"name": "python", "version": "3.11"}
    assert props["httpsOnly"] is True
    assert props["siteConfig"]["minTlsVersion"] == "1.2"
    assert props["siteConfig"]["ftpsState"] == "Disabled"


def test_the_bot_reaches_the_webhook_with_teams_and_sso_configured():
    scope = main_scope()
    bot = scope.module("bot")
    endpoint = bot.params["messagingEndpoint"]
    assert endpoint is UNKNOWN or str(endpoint).endswith("/api/messages")
    app = scope.module("functionApp")
    assert app.eval(parse(app.path)["outputs"]["messagingEndpoint"]["value"]).endswith("/api/messages")
    channels = bot.resources("Microsoft.BotService/botServices/channels")
    assert {bot.eval(c["properties"]["channelName"]) for c in channels.values()} == {"MsTeamsChannel"}
    (sso,) = bot.resources("Microsoft.BotService/botServices/connections").values()
    assert bot.eval(sso["properties"]["serviceProviderDisplayName"]) == "Azure Active Directory v2"
    # The connection is the one the code asks Teams for (COPILOT_SSO_CONNECTION).
    assert bot.eval(sso["name"]) == app_settings(scope)["COPILOT_SSO_CONNECTION"]
    assert _properties(bot, "Microsoft.BotService/botServices")["msaAppId"] == scope.params["botAppId"]


def test_azure_openai_wires_copilot_model_to_its_deployment():
    scope = main_scope(deployOpenAi=True)
    openai = scope.module("openai")
    (deployment,) = openai.resources("Microsoft.CognitiveServices/accounts/deployments").values()
    assert app_settings(scope)["COPILOT_MODEL"] == f"azure_openai:{openai.eval(deployment['name'])}"
    assert "COPILOT_MODEL" in app_settings(main_scope(deployOpenAi=False, copilotModel="openai:gpt-4.1"))


# --- the evaluator's premise -------------------------------------------------------------------


def _string_literals(node: Any, names: set[str]) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("operands", "parameters"):
                continue  # operands are where identifiers legitimately appear
            found += _string_literals(value, names)
    elif isinstance(node, list):
        for item in node:
            found += _string_literals(item, names)
    elif isinstance(node, str) and node in names:
        found.append(node)
    return found


def test_no_string_literal_is_also_a_name():
    # pycep writes identifiers and string literals alike; a property whose whole value is a
    # bare name is a reference only if no literal of the same spelling exists. Values that
    # are exactly a name must therefore be references: a name used as a literal ('location')
    # would silently evaluate to the parameter.
    for path in bicep_files():
        doc = parse(path)
        names = set(doc.get("parameters", {})) | set(doc.get("variables", {}))
        text = path.read_text()
        for name in names:
            assert f"'{name}'" not in text, (
                f"{path.name}: the literal '{name}' is also a parameter or variable"
            )
