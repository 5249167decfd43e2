"""PostgreSQL deploys without ServerIsBusy and holds every connection the app may open.

* The server's children (Entra administrator, configurations, database, firewall rules) are
  created one at a time, under every combination of the conditional ones (ARM drops a
  dependency on a resource it does not deploy), and its private endpoint follows the module.
* The template sizes ``COPILOT_DB_POOL_MAX`` from the SKU's ``max_connections`` and
  ``maximumInstanceCount`` so that ``instances × connections per instance + reserve ≤
  max_connections``, for the defaults and for an admin's choice; a SKU too small for the
  instance count is refused by the Function App module's ``@minValue``.
"""

from __future__ import annotations

import ast
import itertools
from typing import Any

import pytest

from copilot.persistence.pool import CONNECTIONS_PER_POOL_MAX
from tests.infra.bicep import ROOT, Scope, app_settings, body, condition, main_scope, parse

AZURE_RESERVED = 15
"""Connections Azure keeps for replication and monitoring on every flexible server."""


def _children(postgres: Scope) -> dict[str, dict[str, Any]]:
    """The server's child resources (``parent: server``) by symbolic name, with their config."""
    return {
        name: spec["config"]
        for name, spec in postgres.resource_specs().items()
        if body(spec["config"]).get("parent") == "server"
    }


def test_the_servers_children_are_created_one_at_a_time_whichever_are_deployed():
    postgres = main_scope().module("postgres")
    children = _children(postgres)
    assert {"entraAdmin", "extensions", "tls", "database", "adminMachine", "azureServices"} <= set(children)
    conditional = [name for name, config in children.items() if condition(config) is not None]
    assert conditional, "the firewall rules are conditional: the combinations below would test nothing"
    for off in itertools.chain.from_iterable(
        itertools.combinations(conditional, n) for n in range(len(conditional) + 1)
    ):
        deployed = {name for name in children if name not in off}
        needs = {name: set(body(children[name]).get("dependsOn", [])) & deployed for name in deployed}
        # One chain: repeatedly exactly one child waits on nothing left, and it is the next.
        order: list[str] = []
        while needs:
            ready = [name for name, deps in needs.items() if not deps]
            assert len(ready) == 1, f"with {off} not deployed, {ready} would be sent to the server at once"
            order.append(ready[0])
            del needs[ready[0]]
            for deps in needs.values():
                deps.discard(ready[0])
        assert len(order) == len(deployed)


def test_the_postgres_private_endpoint_waits_for_the_whole_postgres_module():
    endpoint = body(main_scope().doc["modules"]["postgresEndpoint"]["config"])
    uses_output = "postgres" in str(endpoint["params"]["targetId"])
    assert uses_output or "postgres" in endpoint.get("dependsOn", [])


def connections_per_pool_max() -> int:
    """How many connections one worker may open per unit of ``COPILOT_DB_POOL_MAX``.

    Read from the shipped code: every ``open_pool(...)`` call, counting one for the default size
    and ``N`` for ``max_size=N * settings.db_pool_max_size``.
    """
    total = 0
    for package in ("copilot", "bot", "functions"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "open_pool"):
                    continue
                size = next((kw.value for kw in node.keywords if kw.arg == "max_size"), None)
                if size is None:
                    total += 1
                    continue
                shape = f"{path}: open_pool max_size {ast.unparse(size)} is not N * settings.db_pool_max_size"
                assert isinstance(size, ast.BinOp), shape
                assert isinstance(size.left, ast.Constant), shape
                assert isinstance(size.left.value, int), shape
                assert ast.unparse(size.right) == "settings.db_pool_max_size", shape
                total += size.left.value
    return total


def test_the_templates_connections_per_pool_unit_is_what_the_code_opens():
    template = main_scope().var("connectionsPerPoolMax")
    assert template == connections_per_pool_max() == CONNECTIONS_PER_POOL_MAX


def _budget(scope: Scope) -> tuple[int, int, int, int]:
    """(instances, pool max as deployed, reserve, the SKU's max_connections) under ``scope``."""
    pool_max = int(app_settings(scope)["COPILOT_DB_POOL_MAX"])
    return (
        scope.params["maximumInstanceCount"],
        pool_max,
        scope.params["postgresReservedConnections"],
        scope.var("postgresMaxConnections"),
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        # A pilot on a small burstable server with few instances.
        {"postgresSkuName": "Standard_B2s", "maximumInstanceCount": 10},
        # A large tenant: more instances on a larger server and a bigger reserve.
        {
            "postgresSkuName": "Standard_D4ds_v5",
            "maximumInstanceCount": 100,
            "postgresReservedConnections": 40,
        },
    ],
    ids=["defaults", "pilot-b2s-10-instances", "d4ds-100-instances"],
)
def test_every_instance_at_full_pools_plus_the_reserve_fits_in_max_connections(overrides):
    scope = main_scope(**overrides)
    instances, pool_max, reserve, max_connections = _budget(scope)
    per_instance = connections_per_pool_max() * pool_max
    assert instances * per_instance + reserve <= max_connections, (instances, per_instance, reserve)
    assert reserve >= AZURE_RESERVED
    assert 2 <= pool_max <= 10
    # What the doctor's database.connections check multiplies by.
    assert app_settings(scope)["COPILOT_DB_MAX_INSTANCES"] == str(instances)


def test_the_default_sku_is_not_burstable_and_gives_the_app_at_least_three_pooled_connections():
    scope = main_scope()
    assert scope.var("postgresSku")["tier"] == "GeneralPurpose"  # PgBouncer is offered, no CPU credits
    assert _budget(scope)[1] >= 3


def test_a_sku_too_small_for_the_instance_count_is_refused_by_the_pool_size_minimum():
    scope = main_scope(postgresSkuName="Standard_B1ms")
    computed = scope.var("dbPoolMax")
    app = parse(scope.module_paths()["functionApp"])
    (minimum,) = [
        d["argument"] for d in app["parameters"]["dbPoolMax"]["decorators"] if d["type"] == "min_value"
    ]
    assert computed < minimum


def test_every_sku_the_template_allows_has_its_tier_and_connection_limit():
    scope = main_scope()
    (allowed,) = [d["argument"] for d in scope.doc["parameters"]["postgresSkuName"]["decorators"]
                  if d["type"] == "allowed"]  # fmt: skip
    table = scope.var("postgresSkus")
    assert set(allowed) == set(table)
    for name, sku in table.items():
        expected = "Burstable" if name.startswith("Standard_B") else None
        assert sku["tier"] in ("Burstable", "GeneralPurpose", "MemoryOptimized")
        assert expected is None or sku["tier"] == expected
        assert sku["maxConnections"] >= 50


def test_the_postgres_module_is_given_the_tier_of_the_chosen_sku():
    scope = main_scope(postgresSkuName="Standard_B2ms")
    postgres = scope.module("postgres")
    assert postgres.params["skuName"] == "Standard_B2ms"
    assert postgres.params["skuTier"] == "Burstable"
