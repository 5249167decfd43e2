"""The scriptable steps of docs/ADMIN.md, each safe to run again (``make infra-bootstrap``,
``make infra-entra-app``, ``make infra-database``).

Standard library only: ``bootstrap`` and ``entra-app`` run before ``make setup``. Every Azure call
goes through the Azure CLI (``az``), and the database calls through ``psql`` and the product's own
``python -m copilot db migrate``. No secret is ever a command-line argument: the bot's client
secret comes from ``BOT_CLIENT_SECRET`` or a hidden prompt (or stdin) and reaches Key Vault
through a 0600 temporary file; the Entra access token for PostgreSQL travels in ``PGPASSWORD``.

* ``bootstrap``: the bootstrap vault (RBAC mode, enabled for template deployment) in the resource
  group, the signed-in admin as its Key Vault Secrets Officer, the client secret in it as
  ``crm-copilot-client-secret`` (only when missing or changed), and ``infra/main.parameters.json``
  from the example (or the existing file), with every parameter named in the environment filled
  in and ``botClientSecret`` pointing at the bootstrap vault. It prints what still holds the
  example's value.
* ``entra-app``: the app registration's web redirect URI for the Bot Framework token service
  (added to the ones it has), the ``groups`` claim (security groups) and the delegated
  permissions the bot asks for (Graph's, and Dynamics CRM's for a Dataverse CRM), each looked up
  by name in the tenant and added when missing. Admin consent stays a portal step.
* ``database``: reads the deployment's outputs and parameters, runs the migration as the database
  admins' group with an Entra token, runs the template's ``appRoleGrantSql`` in the ``postgres``
  database (the principal is created only when the role does not exist yet), and stores the app's
  connection string as the vault's ``database-url`` secret (only when it differs).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "infra" / "main.parameters.example.json"
TEMPLATE = ROOT / "infra" / "main.bicep"
CLIENT_SECRET_NAME = "crm-copilot-client-secret"
SECRETS_OFFICER = "Key Vault Secrets Officer"
TOKEN_SERVICE_REDIRECT = "https://token.botframework.com/.auth/web/redirect"
DATABASE_URL_SECRET = "database-url"
EXPIRY_PARAMETER = "botClientSecretExpiresOn"
GRAPH = "00000003-0000-0000-c000-000000000000"
DYNAMICS_CRM = "00000007-0000-0000-c000-000000000000"
DELEGATED: dict[str, dict[str, tuple[str, ...]]] = {
    # CRM kind → the delegated permissions (by API app id) the bot's app registration needs
    "dataverse": {
        GRAPH: ("Mail.ReadWrite", "User.ReadBasic.All", "Calendars.Read", "MailboxSettings.Read"),
        DYNAMICS_CRM: ("user_impersonation", "mcp.tools"),
    },
    "other": {GRAPH: ("Mail.ReadWrite", "User.ReadBasic.All", "Calendars.Read", "MailboxSettings.Read")},
}


class SetupError(SystemExit):
    def __init__(self, message: str) -> None:
        super().__init__(f"error: {message}")


def az(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["az", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise SetupError(f"az {' '.join(args[:3])}: {done.stderr.strip() or done.stdout.strip()}")
    return done


def az_value(*args: str) -> str | None:
    """The command's tsv output, or None when it fails (e.g. the thing does not exist)."""
    done = az(*args, "--output", "tsv", check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def set_secret(vault: str, name: str, value: str, *, expires: str | None = None, attempts: int = 1) -> None:
    """``az keyvault secret set`` through a 0600 file (never argv); retried while a fresh role
    assignment propagates."""
    fd, path = tempfile.mkstemp(prefix="secret-")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(value)
        extra = ["--expires", f"{expires}T00:00:00Z"] if expires else []
        for attempt in range(attempts):
            done = az(
                "keyvault", "secret", "set", "--vault-name", vault, "--name", name,
                "--file", path, "--encoding", "utf-8", *extra, "--output", "none", check=False,
            )  # fmt: skip
            if done.returncode == 0:
                return
            if attempt + 1 < attempts:
                time.sleep(float(os.environ.get("INFRA_RETRY_SECONDS", "15")))
        raise SetupError(f"az keyvault secret set {name}: {done.stderr.strip()}")
    finally:
        os.unlink(path)


def current_secret(vault: str, name: str) -> str | None:
    return az_value("keyvault", "secret", "show", "--vault-name", vault, "--name", name, "--query", "value")


def signed_in_object_id() -> str:
    if officer := os.environ.get("BOOTSTRAP_OFFICER"):
        return officer
    user = az_value("ad", "signed-in-user", "show", "--query", "id")
    if user:
        return user
    name = az_value("account", "show", "--query", "user.name")
    principal = az_value("ad", "sp", "show", "--id", name or "", "--query", "id") if name else None
    if not principal:
        raise SetupError("cannot tell who is signed in; set BOOTSTRAP_OFFICER=<object id>")
    return principal


def read_client_secret() -> str:
    value = os.environ.get("BOT_CLIENT_SECRET")
    if value is None:
        if sys.stdin.isatty():
            value = getpass.getpass("The app registration's client secret (not shown): ")
        else:
            value = sys.stdin.read()
    value = value.strip()
    if not value:
        raise SetupError("no client secret: set BOT_CLIENT_SECRET or type it at the prompt")
    return value


def template_parameters() -> dict[str, str]:
    """The template's parameters and their types (``param NAME TYPE`` lines of main.bicep)."""
    found = re.findall(r"^param (\w+) (\w+)", TEMPLATE.read_text(), re.M)
    return {name: kind for name, kind in found}


def _typed(kind: str, name: str, text: str) -> Any:
    if kind == "int":
        return int(text)
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            raise SetupError(f"{name}={text}: true or false")
        return text.lower() == "true"
    if kind in ("object", "array"):
        return json.loads(text)
    return text


def fill_parameters(path: Path, vault_id: str) -> list[str]:
    """Write the parameters file; return the parameters still holding the example's value."""
    example = json.loads(EXAMPLE.read_text())
    document = json.loads(path.read_text()) if path.exists() else json.loads(EXAMPLE.read_text())
    parameters: dict[str, Any] = document.setdefault("parameters", {})
    for name, spec in example["parameters"].items():
        parameters.setdefault(name, spec)
    for name, kind in template_parameters().items():
        if name in os.environ and name != "botClientSecret":
            parameters[name] = {"value": _typed(kind, name, os.environ[name])}
    parameters["botClientSecret"] = {
        "reference": {"keyVault": {"id": vault_id}, "secretName": CLIENT_SECRET_NAME}
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    return [
        name
        for name, spec in example["parameters"].items()
        if "value" in spec and spec["value"] and parameters[name] == spec
    ]


def bootstrap(args: argparse.Namespace) -> int:
    vault, group = args.vault, args.resource_group
    vault_id = az_value("keyvault", "show", "--name", vault, "--resource-group", group, "--query", "id")
    if vault_id is None:
        vault_id = az_value(
            "keyvault", "create", "--name", vault, "--resource-group", group, "--location", args.location,
            "--enable-rbac-authorization", "true", "--enabled-for-template-deployment", "true",
            "--query", "id",
        )  # fmt: skip
        if vault_id is None:
            raise SetupError(f"az keyvault create {vault} failed (is the name taken? set BOOTSTRAP_VAULT=…)")
        print(f"created the bootstrap vault {vault}")
    else:
        az(
            "keyvault", "update", "--name", vault, "--resource-group", group,
            "--enabled-for-template-deployment", "true", "--output", "none",
        )  # fmt: skip
        print(f"kept the bootstrap vault {vault}")
    officer = signed_in_object_id()
    assigned = az_value(
        "role", "assignment", "list", "--assignee", officer, "--role", SECRETS_OFFICER, "--scope", vault_id,
        "--query", "[0].id",
    )  # fmt: skip
    if not assigned:
        az(
            "role", "assignment", "create", "--assignee", officer, "--role", SECRETS_OFFICER,
            "--scope", vault_id, "--output", "none",
        )  # fmt: skip
    parameters = Path(args.parameters)
    unfilled = fill_parameters(parameters, vault_id)
    print(f"wrote {args.parameters}")
    expiry = json.loads(parameters.read_text())["parameters"][EXPIRY_PARAMETER].get("value")
    stored = current_secret(vault, CLIENT_SECRET_NAME)
    given = os.environ.get("BOT_CLIENT_SECRET")
    if stored is None or (given is not None and given.strip() != stored):
        set_secret(
            vault, CLIENT_SECRET_NAME, read_client_secret(),
            expires=None if EXPIRY_PARAMETER in unfilled else expiry, attempts=args.attempts,
        )  # fmt: skip
        print(f"set {CLIENT_SECRET_NAME} in {vault}")
    else:
        print(f"kept {CLIENT_SECRET_NAME} (already set)")
    if unfilled:
        print(f"still the example's values (pass them as NAME=…, or edit the file): {', '.join(unfilled)}")
    return 0


def entra_app(args: argparse.Namespace) -> int:
    query = "{uris: web.redirectUris, groups: groupMembershipClaims, access: requiredResourceAccess}"
    shown = az("ad", "app", "show", "--id", args.app_id, "--query", query, "--output", "json")
    app = json.loads(shown.stdout or "{}")
    uris = list(app.get("uris") or [])
    if TOKEN_SERVICE_REDIRECT not in uris:
        az("ad", "app", "update", "--id", args.app_id, "--web-redirect-uris", *uris, TOKEN_SERVICE_REDIRECT)
        print(f"added the redirect URI {TOKEN_SERVICE_REDIRECT}")
    else:
        print("kept the redirect URI (already there)")
    if app.get("groups") not in ("SecurityGroup", "All"):
        az("ad", "app", "update", "--id", args.app_id, "--set", "groupMembershipClaims=SecurityGroup")
        print("added the groups claim (security groups)")
    else:
        print("kept the groups claim (already there)")
    granted = {
        (resource.get("resourceAppId"), access.get("id"))
        for resource in app.get("access") or []
        for access in resource.get("resourceAccess") or []
    }
    for api, scopes in DELEGATED[args.crm].items():
        missing = []
        for scope in scopes:
            scope_id = az_value(
                "ad", "sp", "show", "--id", api, "--query", f"oauth2PermissionScopes[?value=='{scope}'].id | [0]"
            )  # fmt: skip
            if not scope_id:
                raise SetupError(f"API {api} offers no delegated permission {scope} in this tenant")
            if (api, scope_id) not in granted:
                missing.append((scope, scope_id))
        if missing:
            az(
                "ad", "app", "permission", "add", "--id", args.app_id, "--api", api,
                "--api-permissions", *(f"{scope_id}=Scope" for _, scope_id in missing),
            )  # fmt: skip
            print(f"added the delegated permissions {', '.join(scope for scope, _ in missing)}")
        else:
            print(f"kept the delegated permissions {', '.join(scopes)} (already there)")
    print("admin consent is still to grant: the app → API permissions → Grant admin consent")
    return 0


def _psql(conninfo: str, sql: str, token: str, *, query: bool = False) -> str:
    done = subprocess.run(
        ["psql", conninfo, "--no-psqlrc", "--set", "ON_ERROR_STOP=1", *(["--tuples-only", "--no-align"] if query else []), "--file", "-"],
        input=sql, capture_output=True, text=True, check=False, env={**os.environ, "PGPASSWORD": token},
    )  # fmt: skip
    if done.returncode != 0:
        raise SetupError(f"psql: {done.stderr.strip()}")
    return done.stdout


def _quote(value: str) -> str:
    """A libpq connection-string value."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def database(args: argparse.Namespace) -> int:
    shown = az(
        "deployment", "group", "show", "--resource-group", args.resource_group, "--name", args.deployment,
        "--query", "{outputs: properties.outputs, parameters: properties.parameters}", "--output", "json",
    )  # fmt: skip
    deployment = json.loads(shown.stdout)
    outputs = {name: spec.get("value") for name, spec in (deployment.get("outputs") or {}).items()}
    parameters = {name: spec.get("value") for name, spec in (deployment.get("parameters") or {}).items()}
    if parameters.get("postgresPasswordAuth") in (True, "true", "True"):
        raise SetupError(
            "postgresPasswordAuth=true: give copilot_app_login its password by hand (docs/DEPLOYING.md step 2)"
        )
    host, admin = outputs["postgresHost"], parameters["postgresAdminName"]
    identity, vault = outputs["managedIdentityName"], outputs["keyVaultName"]
    database_name = outputs.get("postgresDatabase") or "copilot"
    token = az_value("account", "get-access-token", "--resource-type", "oss-rdbms", "--query", "accessToken")
    if not token:
        raise SetupError("az account get-access-token --resource-type oss-rdbms failed (az login?)")
    admin_url = f"host={host} dbname={database_name} user={_quote(admin)} sslmode=require"
    migrate = subprocess.run(
        [args.python, "-m", "copilot", "db", "migrate"], cwd=ROOT, check=False,
        env={**os.environ, "DATABASE_URL": admin_url, "PGPASSWORD": token},
    )  # fmt: skip
    if migrate.returncode != 0:
        raise SetupError("python -m copilot db migrate failed")
    postgres_url = f"host={host} dbname=postgres user={_quote(admin)} sslmode=require"
    exists = _psql(
        postgres_url, f"SELECT 1 FROM pg_roles WHERE rolname = {_sql_literal(identity)};\n", token, query=True
    ).strip()
    statements = [s.strip() for s in outputs["appRoleGrantSql"].split(";") if s.strip()]
    if exists:
        statements = [s for s in statements if "pgaadauth_create_principal" not in s]
    _psql(postgres_url, "".join(f"{s};\n" for s in statements), token)
    print(f"{'granted' if exists else 'created and granted'} {identity} the copilot_app role")
    app_url = f"host={host} dbname={database_name} user={_quote(identity)} sslmode=require"
    if current_secret(vault, DATABASE_URL_SECRET) != app_url:
        set_secret(vault, DATABASE_URL_SECRET, app_url)
        print(f"set {DATABASE_URL_SECRET} in {vault}")
    else:
        print(f"kept {DATABASE_URL_SECRET} (already set)")
    return 0


def _sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/azure_setup.py", description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    boot = steps.add_parser("bootstrap")
    boot.add_argument("--resource-group", required=True)
    boot.add_argument("--location", required=True)
    boot.add_argument("--vault", required=True)
    boot.add_argument("--parameters", required=True)
    boot.add_argument("--attempts", type=int, default=12, help="secret set tries while the role propagates")
    entra = steps.add_parser("entra-app")
    entra.add_argument("--app-id", required=True)
    entra.add_argument("--crm", choices=sorted(DELEGATED), default="dataverse")
    db = steps.add_parser("database")
    db.add_argument("--resource-group", required=True)
    db.add_argument("--deployment", required=True)
    db.add_argument("--python", required=True, help="the interpreter with the product installed")
    args = parser.parse_args(argv)
    return {"bootstrap": bootstrap, "entra-app": entra_app, "database": database}[args.step](args)


if __name__ == "__main__":
    raise SystemExit(main())
