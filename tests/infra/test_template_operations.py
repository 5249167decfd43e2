"""What an admin operating the deployment relies on: a vault name that can be redeployed after a
delete, a secrets-officer assignment for the principal type at hand, diagnostic logs of every
data store and the Function App in Log Analytics, and the alerts the guide promises, each wired
to the names the code really uses (function names, the SKU's connection limit, the secret's date).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.infra.bicep import ROOT, Scope, bicep_files, body, main_scope, parse

DIAGNOSED = {
    # main.bicep module → the resources in it whose diagnostics must reach Log Analytics
    "functionApp": {"site"},
    "vault": {"vault"},
    "postgres": {"server"},
    "storage": {"account", "blobService", "queueService"},
}

FUNCTION_NAMES = {
    match
    for path in (ROOT / "functions").glob("*.py")
    for match in re.findall(r'function_name\("([a-z_]+)"\)', path.read_text())
}


def _diagnostics(scope: Scope) -> dict[str, dict[str, Any]]:
    """The module's diagnostic settings by the resource they are scoped to."""
    found: dict[str, dict[str, Any]] = {}
    for config in scope.resources("Microsoft.Insights/diagnosticSettings").values():
        found[config["scope"]] = config
    return found


def test_the_vault_name_is_unique_per_generation_and_fits_key_vaults_limit():
    scope = main_scope()
    text = scope.doc["variables"]["vaultName"]["value"]["function"]["parameters"]["original_value"]
    assert text.startswith("kv-${environmentName}-${uniqueString(")
    assert "vaultGeneration" in text
    assert "resourceGroup().id" in text
    passed = body(scope.doc["modules"]["vault"]["config"])["params"]["name"]
    assert passed == "vaultName"
    # The longest environment name with uniqueString's 13 characters, cut to Key Vault's 24.
    longest = "kv-" + "e" * 12 + "-" + "u" * 13
    assert len(longest[:24]) == 24
    assert not longest[:24].endswith("-")


@pytest.mark.parametrize("principal_type", ["User", "Group", "ServicePrincipal"])
def test_the_secrets_officer_is_assigned_as_the_principal_type_the_admin_gives(principal_type):
    vault = main_scope(secretsOfficerPrincipalType=principal_type).module("vault")
    (officer,) = [
        config
        for name, config in vault.resources("Microsoft.Authorization/roleAssignments").items()
        if name == "officer"
    ]
    assert vault.eval(officer["properties"]["principalType"]) == principal_type


@pytest.mark.parametrize("module", sorted(DIAGNOSED))
def test_the_function_app_and_every_data_store_send_their_diagnostics_to_log_analytics(module):
    scope = main_scope()
    passed = body(scope.doc["modules"][module]["config"])["params"]["workspaceId"]
    assert "monitoring" in str(passed)
    assert "workspaceId" in str(passed)
    inner = scope.module(module)
    settings = _diagnostics(inner)
    assert set(settings) >= DIAGNOSED[module], f"{module}: diagnostics only for {sorted(settings)}"
    for target in DIAGNOSED[module]:
        properties = settings[target]["properties"]
        assert properties["workspaceId"] == "workspaceId"
        sent = [entry.get("categoryGroup") or entry.get("category") for entry in properties.get("logs", [])]
        sent += [entry["category"] for entry in properties.get("metrics", [])]
        assert sent, f"{module}.{target} sends nothing"
        if target != "account":  # a storage account itself has metrics only; its services log
            assert "allLogs" in sent, f"{module}.{target} does not send its logs"


def _alerts() -> Scope:
    return main_scope().module("alerts")


def test_the_log_alerts_query_the_functions_the_app_really_registers():
    alerts = _alerts()
    queries = alerts.eval(alerts.doc["variables"]["logAlerts"]["value"])
    assert 'operation_Name == "audit_seal" and success == false' in queries["auditSeal"]["query"]
    assert 'operation_Name == "turns_poison"' in queries["poisonQueue"]["query"]
    assert {"audit_seal", "turns_poison"} <= FUNCTION_NAMES
    assert ">= 500" in queries["serverErrors"]["query"]
    assert "> 5" in queries["serverErrors"]["query"]


def test_every_alert_notifies_the_admins_action_group():
    alerts = _alerts()
    rules = alerts.resources("Microsoft.Insights/scheduledQueryRules")
    metric = alerts.resources("Microsoft.Insights/metricAlerts")
    assert len(rules) == 4
    assert len(metric) == 1
    group_id = {
        "operator": {"type": "property_accessor", "operands": {"operand_1": "actionGroup", "operand_2": "id"}}
    }
    for config in rules.values():
        assert config["properties"]["actions"]["actionGroups"] == [group_id]
    for config in metric.values():
        assert config["properties"]["actions"] == [{"actionGroupId": group_id}]
    (group,) = alerts.resources("Microsoft.Insights/actionGroups").values()
    receivers = alerts.eval(group["properties"]["emailReceivers"])
    assert receivers[0]["emailAddress"] == main_scope().params["alertEmail"]


@pytest.mark.parametrize("sku", ["Standard_D2ds_v5", "Standard_B2s"])
def test_the_postgres_alert_fires_above_80_percent_of_the_skus_max_connections(sku):
    scope = main_scope(postgresSkuName=sku)
    alerts = scope.module("alerts")
    (rule,) = alerts.resources("Microsoft.Insights/metricAlerts").values()
    (criterion,) = rule["properties"]["criteria"]["allOf"]
    assert criterion["metricName"] == "active_connections"
    assert alerts.eval(criterion["threshold"]) == scope.var("postgresMaxConnections") * 80 // 100


def test_the_bot_secret_alert_and_the_vault_secret_carry_the_secrets_expiry_date():
    scope = main_scope(botClientSecretExpiresOn="2031-02-03")
    alerts = scope.module("alerts")
    query = alerts.eval(alerts.doc["variables"]["logAlerts"]["value"])["botSecretExpiry"]["query"]
    assert "datetime(2031-02-03)" in query
    assert "now() + 30d" in query
    vault = scope.module("vault")
    secret = vault.resources("Microsoft.KeyVault/vaults/secrets")["appPassword"]
    expiry = secret["properties"]["attributes"]["exp"]["function"]
    assert expiry["type"] == "date_time_to_epoch"
    assert vault.eval(expiry["parameters"]["date_time"]) == "2031-02-03T00:00:00Z"


def test_infra_bootstrap_registers_every_resource_provider_the_template_uses():
    makefile = (ROOT / "Makefile").read_text()
    listed = re.search(r"^INFRA_PROVIDERS := ((?:.*\\\n)*.*)$", makefile, re.M)
    assert listed, "no INFRA_PROVIDERS in the Makefile"
    registered = set(listed.group(1).replace("\\", " ").split())
    used = {
        spec["type"].split("/")[0]
        for path in bicep_files()
        for spec in parse(path).get("resources", {}).values()
    }
    # The Function App's subnet delegation names Microsoft.App/environments, no resource of it.
    assert used | {"Microsoft.App"} == registered


def test_infra_lock_anchors_locks_the_anchor_container_the_template_outputs():
    scope = main_scope()
    outputs = scope.doc["outputs"]
    assert "storageAccountName" in outputs
    assert "auditAnchorContainer" in outputs
    storage = scope.module("storage")
    (policy,) = storage.resources(
        "Microsoft.Storage/storageAccounts/blobServices/containers/immutabilityPolicies"
    ).values()
    assert policy["parent"] == "anchors"
    recipe = (ROOT / "Makefile").read_text().split("infra-lock-anchors:", 1)[1].split("\n\n", 1)[0]
    assert "_output,storageAccountName)" in recipe
    assert "_output,auditAnchorContainer)" in recipe
    assert "immutability-policy lock" in recipe
    assert '--if-match "$$etag"' in recipe
