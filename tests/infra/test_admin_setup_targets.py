"""The scripted steps of docs/ADMIN.md (``make infra-bootstrap``, ``make infra-entra-app``,
``make infra-database``), run with a fake ``az``, ``psql`` and product interpreter on PATH that
record every call and keep the state a real tenant would (a vault once created exists, a secret once
set is there): the calls, their order, that a second run changes nothing, and that no secret is
ever a command-line argument."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.infra.bicep import INFRA, ROOT

CLIENT_SECRET = "s3cr3t~client-value"
TOKEN = "entra-access-token-xyz"
APP_ID = "8f0d2a51-3c1e-4b7a-9d62-5e4f1a2b3c4d"
GRAPH = "00000003-0000-0000-c000-000000000000"
DYNAMICS_CRM = "00000007-0000-0000-c000-000000000000"
WANTED = {
    GRAPH: ["Mail.ReadWrite", "User.ReadBasic.All", "Calendars.Read", "MailboxSettings.Read"],
    DYNAMICS_CRM: ["user_impersonation", "mcp.tools"],
}
GRANT_SQL = (
    "SELECT * FROM pgaadauth_create_principal('id-copilotpilot', false, false); "
    'GRANT copilot_app TO "id-copilotpilot";'
)

FAKE_AZ = r"""
import json, os, sys
argv = sys.argv[1:]
state_path = os.environ["FAKE_STATE"]
state = json.load(open(state_path))
record = {"tool": "az", "argv": argv}
def opt(name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default
def words(n):
    return " ".join(argv[:n])
out, rc = "", 0
if words(2) == "account show":
    out = "admin@contoso.example" if opt("--query") == "user.name" else ""
elif words(2) == "account get-access-token":
    out = state["token"]
elif words(2) in ("provider register", "group create", "keyvault update"):
    pass
elif words(2) == "keyvault show":
    if opt("--name") in state["vaults"]:
        out = state["vaults"][opt("--name")]
    else:
        rc = 3
elif words(2) == "keyvault create":
    vid = "/subscriptions/sub/resourceGroups/%s/providers/Microsoft.KeyVault/vaults/%s" % (opt("--resource-group"), opt("--name"))
    state["vaults"][opt("--name")] = vid
    out = vid
elif words(3) == "ad signed-in-user show":
    out = "officer-object-id"
elif words(3) == "role assignment list":
    key = "%s|%s|%s" % (opt("--assignee"), opt("--role"), opt("--scope"))
    out = "assignment-id" if key in state["roles"] else ""
elif words(3) == "role assignment create":
    state["roles"].append("%s|%s|%s" % (opt("--assignee"), opt("--role"), opt("--scope")))
elif words(3) == "keyvault secret show":
    key = "%s/%s" % (opt("--vault-name"), opt("--name"))
    if key in state["secrets"]:
        out = state["secrets"][key]
    else:
        rc = 3
elif words(3) == "keyvault secret set":
    path = opt("--file")
    record["file"] = open(path).read()
    record["file_mode"] = oct(os.stat(path).st_mode & 0o777)
    state["secrets"]["%s/%s" % (opt("--vault-name"), opt("--name"))] = record["file"]
elif words(3) == "ad app show":
    app = state["app"]
    out = json.dumps({"uris": app["web"]["redirectUris"], "groups": app["groupMembershipClaims"],
                      "access": app["requiredResourceAccess"]})
elif words(3) == "ad sp show":
    import re
    scope = re.search(r"value=='([^']+)'", opt("--query")).group(1)
    out = state["scopes"].get(opt("--id"), {}).get(scope, "")
    rc = 0 if opt("--id") in state["scopes"] else 3
elif words(4) == "ad app permission add":
    api = opt("--api")
    rest = argv[argv.index("--api-permissions") + 1:]
    added = [{"id": p.split("=")[0], "type": p.split("=")[1]} for p in rest if not p.startswith("--")]
    app = state["app"]
    entry = next((r for r in app["requiredResourceAccess"] if r["resourceAppId"] == api), None)
    if entry is None:
        entry = {"resourceAppId": api, "resourceAccess": []}
        app["requiredResourceAccess"].append(entry)
    entry["resourceAccess"].extend(added)
elif words(3) == "ad app update":
    app = state["app"]
    if "--web-redirect-uris" in argv:
        rest = argv[argv.index("--web-redirect-uris") + 1:]
        app["web"]["redirectUris"] = [u for u in rest[: next((i for i, a in enumerate(rest) if a.startswith("--")), len(rest))]]
    if "--set" in argv:
        key, value = opt("--set").split("=", 1)
        app[key] = value
elif words(3) == "deployment group show":
    out = json.dumps(state["deployment"])
else:
    rc = 99
    sys.stderr.write("fake az: unexpected %s\n" % argv)
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(record) + "\n")
json.dump(state, open(state_path, "w"))
if out:
    print(out)
sys.exit(rc)
"""

FAKE_PSQL = r"""
import json, os, sys
state_path = os.environ["FAKE_STATE"]
state = json.load(open(state_path))
sql = sys.stdin.read()
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({"tool": "psql", "argv": sys.argv[1:], "stdin": sql,
                          "password": os.environ.get("PGPASSWORD")}) + "\n")
if "pg_roles" in sql:
    print("1" if "id-copilotpilot" in state["pg_roles"] else "")
elif "pgaadauth_create_principal" in sql:
    if "id-copilotpilot" in state["pg_roles"]:
        sys.stderr.write("role already exists\n")
        sys.exit(3)
    state["pg_roles"].append("id-copilotpilot")
json.dump(state, open(state_path, "w"))
"""

FAKE_PRODUCT_PYTHON = r"""
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({"tool": "python", "argv": sys.argv[1:], "cwd": os.getcwd(),
                          "DATABASE_URL": os.environ.get("DATABASE_URL"),
                          "password": os.environ.get("PGPASSWORD")}) + "\n")
"""


class Tenant:
    """A fake tenant: the tools on PATH, their shared state and the log of their calls."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        for name, source in {"az": FAKE_AZ, "psql": FAKE_PSQL, "product-python": FAKE_PRODUCT_PYTHON}.items():
            tool = self.bin / name
            tool.write_text(f"#!{sys.executable}\n{textwrap.dedent(source)}")
            tool.chmod(0o755)
        self.state = root / "state.json"
        self.log = root / "calls.jsonl"
        self.parameters = root / "main.parameters.json"
        self.state.write_text(
            json.dumps(
                {
                    "token": TOKEN,
                    "vaults": {},
                    "roles": [],
                    "secrets": {},
                    "pg_roles": [],
                    "app": {
                        "web": {"redirectUris": ["https://existing.example/cb"]},
                        "groupMembershipClaims": None,
                        # Calendars.Read already granted: only the others are added
                        "requiredResourceAccess": [
                            {
                                "resourceAppId": GRAPH,
                                "resourceAccess": [{"id": "graph-Calendars.Read", "type": "Scope"}],
                            }
                        ],
                    },
                    "scopes": {
                        api: {scope: f"{'graph' if api == GRAPH else 'crm'}-{scope}" for scope in scopes}
                        for api, scopes in WANTED.items()
                    },
                    "deployment": {
                        "outputs": {
                            "postgresHost": {"value": "psql-copilotpilot.postgres.database.azure.com"},
                            "postgresDatabase": {"value": "copilot"},
                            "appRoleGrantSql": {"value": GRANT_SQL},
                            "managedIdentityName": {"value": "id-copilotpilot"},
                            "keyVaultName": {"value": "kv-copilotpilot-abc123"},
                        },
                        "parameters": {
                            "postgresAdminName": {"value": "crm copilot db-admins"},
                            "postgresPasswordAuth": {"value": False},
                        },
                    },
                }
            )
        )

    def make(
        self, *args: str, env: dict[str, str] | None = None, stdin: str = ""
    ) -> subprocess.CompletedProcess[str]:
        self.log.write_text("")
        return subprocess.run(
            ["make", "--no-print-directory", "-o", "setup", *args, f"PYTHON={sys.executable}"],
            cwd=ROOT, capture_output=True, text=True, check=False, input=stdin, timeout=120,
            env={
                "PATH": f"{self.bin}:{os.environ['PATH']}", "HOME": os.environ.get("HOME", "/tmp"),
                "FAKE_STATE": str(self.state), "FAKE_LOG": str(self.log), "INFRA_RETRY_SECONDS": "0",
                **(env or {}),
            },
        )  # fmt: skip

    def calls(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def commands(self, tool: str = "az") -> list[str]:
        return [" ".join(c["argv"][:3]) for c in self.calls() if c["tool"] == tool]

    def data(self) -> dict[str, Any]:
        return json.loads(self.state.read_text())


@pytest.fixture
def tenant(tmp_path: Path) -> Tenant:
    return Tenant(tmp_path)


def _no_secret_in_argv(tenant: Tenant, *secrets: str) -> None:
    for call in tenant.calls():
        for secret in secrets:
            assert all(secret not in arg for arg in call["argv"]), f"{secret!r} in argv of {call['argv']}"


def _bootstrap(
    tenant: Tenant, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return tenant.make(
        "infra-bootstrap", "RESOURCE_GROUP=rg-crm-copilot", "LOCATION=westeurope",
        "BOOTSTRAP_VAULT=kv-boot-crm", f"PARAMETERS={tenant.parameters}",
        "environmentName=pilot", f"botAppId={APP_ID}", "publisherName=Fabrikam Sales IT",
        "botClientSecretExpiresOn=2027-09-30", "maximumInstanceCount=20", "allowPublicDataAccess=false",
        env=env, stdin=stdin,
    )  # fmt: skip


def test_infra_bootstrap_creates_the_vault_stores_the_secret_from_the_environment_and_fills_the_parameters(
    tenant,
):
    done = _bootstrap(tenant, env={"BOT_CLIENT_SECRET": CLIENT_SECRET})
    assert done.returncode == 0, done.stderr
    commands = tenant.commands()
    providers = commands.count("provider register --namespace")
    assert providers == 12
    assert commands[0] == "account show --output"
    assert commands[1 + providers :] == [
        "group create --name",
        "keyvault show --name",
        "keyvault create --name",
        "ad signed-in-user show",
        "role assignment list",
        "role assignment create",
        "keyvault secret show",
        "keyvault secret set",
    ]
    calls = tenant.calls()
    create = next(c["argv"] for c in calls if c["argv"][:2] == ["keyvault", "create"])
    assert create[create.index("--enabled-for-template-deployment") + 1] == "true"
    assert create[create.index("--enable-rbac-authorization") + 1] == "true"
    (stored,) = [c for c in calls if c["argv"][:3] == ["keyvault", "secret", "set"]]
    assert stored["file"] == CLIENT_SECRET
    assert stored["file_mode"] == "0o600"
    assert stored["argv"][stored["argv"].index("--name") + 1] == "crm-copilot-client-secret"
    assert stored["argv"][stored["argv"].index("--expires") + 1] == "2027-09-30T00:00:00Z"
    _no_secret_in_argv(tenant, CLIENT_SECRET)

    parameters = json.loads(tenant.parameters.read_text())["parameters"]
    example = json.loads((INFRA / "main.parameters.example.json").read_text())["parameters"]
    assert set(parameters) == set(example) | {"maximumInstanceCount", "allowPublicDataAccess"}
    assert parameters["maximumInstanceCount"] == {"value": 20}  # typed as the template declares
    assert parameters["allowPublicDataAccess"] == {"value": False}
    assert parameters["environmentName"] == {"value": "pilot"}
    assert parameters["publisherName"] == {"value": "Fabrikam Sales IT"}
    assert parameters["botClientSecret"]["reference"] == {
        "keyVault": {"id": tenant.data()["vaults"]["kv-boot-crm"]},
        "secretName": "crm-copilot-client-secret",
    }
    assert "still the example's values" in done.stdout
    unfilled = done.stdout.split("still the example's values")[1]
    assert "crmUrl" in unfilled
    assert "environmentName" not in unfilled


def test_infra_bootstrap_run_again_creates_and_writes_nothing_and_keeps_the_parameters(tenant):
    assert _bootstrap(tenant, env={"BOT_CLIENT_SECRET": CLIENT_SECRET}).returncode == 0
    tenant.parameters.write_text(
        tenant.parameters.read_text().replace(
            'https://contoso.crm.dynamics.com"', 'https://fabrikam.crm.dynamics.com"'
        )
    )
    first = tenant.parameters.read_text()
    again = _bootstrap(tenant)  # no BOT_CLIENT_SECRET, no stdin: the stored secret is kept
    assert again.returncode == 0, again.stderr
    commands = tenant.commands()
    assert not {"keyvault create --name", "role assignment create", "keyvault secret set"} & set(commands)
    assert "keyvault update --name" in commands
    assert "kept crm-copilot-client-secret" in again.stdout
    assert tenant.parameters.read_text() == first  # the admin's edit survives
    assert tenant.data()["secrets"] == {"kv-boot-crm/crm-copilot-client-secret": CLIENT_SECRET}


def test_infra_bootstrap_reads_the_secret_from_stdin_and_refuses_an_empty_one(tenant):
    done = _bootstrap(tenant, stdin=CLIENT_SECRET + "\n")
    assert done.returncode == 0, done.stderr
    assert tenant.data()["secrets"]["kv-boot-crm/crm-copilot-client-secret"] == CLIENT_SECRET
    _no_secret_in_argv(tenant, CLIENT_SECRET)

    other = Tenant(tenant.state.parent / "other")
    refused = _bootstrap(other, stdin="")
    assert refused.returncode != 0
    assert "BOT_CLIENT_SECRET" in refused.stderr


def test_infra_bootstrap_needs_its_vault_name(tenant):
    done = tenant.make("infra-bootstrap", "RESOURCE_GROUP=rg", "LOCATION=westeurope")
    assert done.returncode == 2
    assert "BOOTSTRAP_VAULT" in done.stderr
    assert tenant.calls() == []


def test_infra_entra_app_adds_the_redirect_uri_the_groups_claim_and_the_permissions_once(tenant):
    done = tenant.make("infra-entra-app", f"APP_ID={APP_ID}")
    assert done.returncode == 0, done.stderr
    app = tenant.data()["app"]
    assert app["web"]["redirectUris"] == [
        "https://existing.example/cb",
        "https://token.botframework.com/.auth/web/redirect",
    ]
    assert app["groupMembershipClaims"] == "SecurityGroup"
    granted = {
        r["resourceAppId"]: {a["id"] for a in r["resourceAccess"]} for r in app["requiredResourceAccess"]
    }
    assert granted == {
        GRAPH: {f"graph-{scope}" for scope in WANTED[GRAPH]},
        DYNAMICS_CRM: {f"crm-{scope}" for scope in WANTED[DYNAMICS_CRM]},
    }
    assert all(a["type"] == "Scope" for r in app["requiredResourceAccess"] for a in r["resourceAccess"])
    assert len(app["requiredResourceAccess"][0]["resourceAccess"]) == 4  # Calendars.Read not added twice
    commands = tenant.commands()
    assert commands[:3] == ["ad app show", "ad app update", "ad app update"]
    assert commands[3:] == ["ad sp show"] * 4 + ["ad app permission"] + ["ad sp show"] * 2 + [
        "ad app permission"
    ]
    assert "Grant admin consent" in done.stdout

    again = tenant.make("infra-entra-app", f"APP_ID={APP_ID}")
    assert again.returncode == 0, again.stderr
    assert tenant.commands() == ["ad app show"] + ["ad sp show"] * 6
    assert tenant.data()["app"] == app


def test_infra_entra_app_without_dynamics_adds_graph_only_and_names_a_missing_scope(tenant):
    done = tenant.make("infra-entra-app", f"APP_ID={APP_ID}", "CRM_PERMISSIONS=other")
    assert done.returncode == 0, done.stderr
    assert DYNAMICS_CRM not in {r["resourceAppId"] for r in tenant.data()["app"]["requiredResourceAccess"]}

    state = tenant.data()
    del state["scopes"][DYNAMICS_CRM]  # a tenant without Dynamics 365
    tenant.state.write_text(json.dumps(state))
    refused = tenant.make("infra-entra-app", f"APP_ID={APP_ID}")
    assert refused.returncode != 0
    assert "user_impersonation" in refused.stderr


def test_infra_database_migrates_grants_in_postgres_and_stores_the_database_url(tenant):
    product = str(tenant.bin / "product-python")
    done = tenant.make("infra-database", "RESOURCE_GROUP=rg-crm-copilot", f"PY={product}")
    assert done.returncode == 0, done.stderr
    calls = tenant.calls()
    order = [(c["tool"], " ".join(c["argv"][:3])) for c in calls]
    assert [tool for tool, _ in order] == ["az", "az", "python", "psql", "psql", "az", "az"]
    assert order[0] == ("az", "deployment group show")
    assert order[1] == ("az", "account get-access-token --resource-type")
    migrate, exists, grant = calls[2], calls[3], calls[4]
    assert migrate["argv"] == ["-m", "copilot", "db", "migrate"]
    assert Path(migrate["cwd"]) == ROOT
    assert migrate["DATABASE_URL"] == (
        "host=psql-copilotpilot.postgres.database.azure.com dbname=copilot "
        "user='crm copilot db-admins' sslmode=require"
    )
    assert migrate["password"] == TOKEN
    for psql in (exists, grant):
        assert "dbname=postgres" in psql["argv"][0]
        assert "user='crm copilot db-admins'" in psql["argv"][0]
        assert psql["password"] == TOKEN
    assert "pg_roles" in exists["stdin"]
    assert "pgaadauth_create_principal('id-copilotpilot'" in grant["stdin"]
    assert 'GRANT copilot_app TO "id-copilotpilot";' in grant["stdin"]
    assert order[5:] == [("az", "keyvault secret show"), ("az", "keyvault secret set")]
    assert tenant.data()["secrets"]["kv-copilotpilot-abc123/database-url"] == (
        "host=psql-copilotpilot.postgres.database.azure.com dbname=copilot "
        "user='id-copilotpilot' sslmode=require"
    )
    _no_secret_in_argv(tenant, TOKEN)

    again = tenant.make("infra-database", "RESOURCE_GROUP=rg-crm-copilot", f"PY={product}")
    assert again.returncode == 0, again.stderr
    grant_again = [c for c in tenant.calls() if c["tool"] == "psql"][-1]
    assert "pgaadauth_create_principal" not in grant_again["stdin"]
    assert 'GRANT copilot_app TO "id-copilotpilot";' in grant_again["stdin"]
    assert "keyvault secret set" not in tenant.commands()
    assert "kept database-url" in again.stdout
    _no_secret_in_argv(tenant, TOKEN)


def test_infra_database_refuses_password_auth_deployments(tenant):
    state = tenant.data()
    state["deployment"]["parameters"]["postgresPasswordAuth"] = {"value": True}
    tenant.state.write_text(json.dumps(state))
    done = tenant.make("infra-database", "RESOURCE_GROUP=rg", f"PY={tenant.bin / 'product-python'}")
    assert done.returncode != 0
    assert "DEPLOYING.md" in done.stderr
    assert [c["tool"] for c in tenant.calls()] == ["az"]


def test_the_grant_sql_the_database_target_splits_is_the_templates_output():
    """infra-database drops the create_principal statement on a rerun: the output must keep it a
    statement of its own."""
    source = (INFRA / "modules" / "postgres.bicep").read_text()
    (line,) = [line for line in source.splitlines() if line.startswith("output appRoleGrantSql")]
    assert "pgaadauth_create_principal(" in line
    assert line.count(";") == 2
