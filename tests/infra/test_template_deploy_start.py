"""Every ``for`` array and ``if`` condition of the template is known when the deployment starts.

The Bicep compiler refuses a loop or a condition built from values ARM only learns while it
deploys (BCP177/BCP178/BCP182: a module's outputs, a resource's properties). The compiler cannot
be installed here, so ``tests/infra/deploy_start.py`` applies that rule to pycep's parse of
every file, and the tests below show the rule itself catches what the compiler would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra.bicep import bicep_files
from tests.infra.deploy_start import StartRule


@pytest.mark.parametrize("path", bicep_files(), ids=lambda path: path.name)
def test_every_loop_and_condition_uses_only_values_known_at_deployment_start(path: Path):
    assert StartRule.of(path).violations() == []


def _rule(tmp_path: Path, text: str) -> StartRule:
    path = tmp_path / "probe.bicep"
    path.write_text(text)
    return StartRule.of(path)


HEADER = """
param on bool
param names array
param prefix string
var zones = [for name in names: '${prefix}-${name}']
module net 'net.bicep' = {
  name: 'net'
}
resource vault 'Microsoft.KeyVault/vaults@2023-07-01' = {
  name: '${prefix}-kv'
}
"""


@pytest.mark.parametrize(
    "statement",
    [
        "resource r 'Microsoft.Foo/bars@2020-01-01' = [for id in [net.outputs.id]: {\n  name: id\n}]",
        "var ids = [\n  net.outputs.id\n]\nmodule m 'x.bicep' = [for id in ids: {\n  name: id\n}]",
        "module m 'x.bicep' = if (!empty(net.outputs.id)) {\n  name: 'm'\n}",
        "resource r 'Microsoft.Foo/bars@2020-01-01' = if (vault.properties.enableRbacAuthorization) {\n  name: 'r'\n}",
        "var picked = on ? [net.outputs.id] : []\nresource r 'Microsoft.Foo/bars@2020-01-01' = [for id in picked: {\n  name: id\n}]",
        "resource r 'Microsoft.Foo/bars@2020-01-01' = [for id in [reference(prefix).id]: {\n  name: id\n}]",
    ],
    ids=["module-output", "variable-of-module-output", "condition-on-output", "resource-property",
         "conditional-variable", "reference-function"],
)  # fmt: skip
def test_a_loop_or_condition_over_a_runtime_value_is_refused(tmp_path: Path, statement: str):
    assert _rule(tmp_path, HEADER + statement).violations() != []


@pytest.mark.parametrize(
    "statement",
    [
        "resource r 'Microsoft.Foo/bars@2020-01-01' = [for zone in zones: {\n  name: zone\n}]",
        "module m 'x.bicep' = if (on && !empty(prefix)) {\n  name: 'm'\n}",
        "var ids = [\n  vault.id\n  resourceId('Microsoft.Storage/storageAccounts', prefix)\n]\n"
        "resource r 'Microsoft.Foo/bars@2020-01-01' = [for (id, i) in ids: {\n  name: '${i}'\n}]",
        "resource r 'Microsoft.Foo/bars@2020-01-01' = [for i in range(0, length(names)): {\n  name: names[i]\n}]",
        "module m 'x.bicep' = if (!empty(net.name)) {\n  name: 'm'\n}",
    ],
    ids=["variable-of-parameters", "parameters", "resource-id-and-resourceId", "range", "module-name"],
)  # fmt: skip
def test_a_loop_or_condition_over_parameters_names_and_ids_is_accepted(tmp_path: Path, statement: str):
    assert _rule(tmp_path, HEADER + statement).violations() == []
