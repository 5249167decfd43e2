"""The sandbox CRM over MCP (streamable HTTP): auth, permissions, idempotency, knobs, CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from sandbox.directory import find_user
from tests.support.sandbox_process import PROJECT_ROOT, SandboxProcess

pytestmark = pytest.mark.integration

ALEX, MEGAN, DIEGO, NESTOR, PRIYA = "alex", "megan", "diego", "nestor", "priya"


@pytest.fixture(scope="module")
def seed(sandbox: SandboxProcess) -> dict[str, list[dict[str, Any]]]:
    state: dict[str, list[dict[str, Any]]] = sandbox.admin("GET", "/admin/export")
    return state


def _uid(handle: str) -> str:
    user = find_user(handle)
    assert user is not None
    return user.id


def _error_code(result: dict[str, Any]) -> str:
    assert result["isError"] is True, result
    code: str = result["structuredContent"]["error"]["code"]
    return code


def _east_accounts(seed: dict[str, list[dict[str, Any]]], shared: bool) -> list[dict[str, Any]]:
    shared_ids = {s["record_id"] for s in seed["shares"] if s["user_id"] == _uid(ALEX)}
    return [
        a
        for a in seed["accounts"]
        if a["territory"] == "East" and a["owner_id"] != _uid(ALEX) and (a["id"] in shared_ids) == shared
    ]


# --- interoperability -------------------------------------------------------------------------


def test_official_mcp_inspector_cli_lists_tools_and_calls_one(sandbox: SandboxProcess):
    inspector = PROJECT_ROOT / "node_modules" / ".bin" / "mcp-inspector"
    assert inspector.exists(), "run `npm ci` (make setup) first"
    base = [str(inspector), "--cli", sandbox.settings.mcp_url, "--transport", "http"]
    auth = ["--header", f"Authorization: Bearer {sandbox.token(ALEX, ['crm.read'])}"]

    listed = subprocess.run(
        [*base, *auth, "--method", "tools/list"], capture_output=True, text=True, timeout=120
    )
    called = subprocess.run(
        [
            *base,
            *auth,
            "--method",
            "tools/call",
            "--tool-name",
            "get_account",
            "--tool-arg",
            "account_id=acc-acme",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert listed.returncode == 0, listed.stderr
    names = {tool["name"] for tool in json.loads(listed.stdout)["tools"]}
    assert {"search_accounts", "get_account", "list_opportunities", "upsert_activity"} <= names
    assert called.returncode == 0, called.stderr
    record = json.loads(json.loads(called.stdout)["content"][0]["text"])
    assert record["id"] == "acc-acme"
    assert record["name"] == "Acme Corporation"
    assert isinstance(record["version"], int)


def test_inspector_without_a_token_is_refused(sandbox: SandboxProcess):
    inspector = PROJECT_ROOT / "node_modules" / ".bin" / "mcp-inspector"
    result = subprocess.run(
        [str(inspector), "--cli", sandbox.settings.mcp_url, "--transport", "http", "--method", "tools/list"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0


def test_tools_list_describes_every_read_and_write_tool(sandbox: SandboxProcess):
    response = sandbox.rpc(sandbox.token(ALEX, ["crm.read"]), "tools/list")
    tools = {t["name"]: t for t in response.json()["result"]["tools"]}
    assert set(tools) == {
        "search_accounts",
        "get_account",
        "list_opportunities",
        "get_opportunity",
        "list_activities",
        "list_contacts",
        "get_contact",
        "pipeline_summary",
        "get_me",
        "get_record_history",
        "upsert_activity",
        "update_opportunity",
        "void_activity",
    }
    assert all(t["description"] for t in tools.values())
    assert tools["list_opportunities"]["inputSchema"]["properties"]["limit"]["maximum"] == 100


# --- token matrix ------------------------------------------------------------------------------


def _other_key_token(sandbox: SandboxProcess) -> str:
    good = jwt.decode(sandbox.token(ALEX), options={"verify_signature": False})
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    header = jwt.get_unverified_header(sandbox.token(ALEX))
    return jwt.encode(good, stranger, algorithm="RS256", headers={"kid": header["kid"]})


def _alg_none_token(sandbox: SandboxProcess) -> str:
    claims = jwt.decode(sandbox.token(ALEX), options={"verify_signature": False})
    return jwt.encode(claims, "", algorithm="none")


def _hs256_with_public_key(sandbox: SandboxProcess) -> str:
    claims = jwt.decode(sandbox.token(ALEX), options={"verify_signature": False})
    public_pem = (
        serialization.load_pem_private_key(sandbox.settings.signing_key_path.read_bytes(), None)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    import hashlib
    import hmac

    from jwt.utils import base64url_encode

    header = base64url_encode(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = base64url_encode(json.dumps(claims).encode())
    signature = base64url_encode(hmac.new(public_pem, header + b"." + payload, hashlib.sha256).digest())
    return (header + b"." + payload + b"." + signature).decode()


@pytest.mark.parametrize(
    ("case", "make_token"),
    [
        ("missing", lambda s: None),
        ("garbage", lambda s: "not-a-jwt"),
        ("expired", lambda s: s.token(ALEX, lifetime=-120)),
        ("wrong audience", lambda s: s.token(ALEX, audience="api://someone-else")),
        ("wrong issuer", lambda s: s.token(ALEX, extra_claims={"iss": "https://evil.example/x/v2.0"})),
        ("bad signature", _other_key_token),
        ("alg none", _alg_none_token),
        ("hs256 with the public key", _hs256_with_public_key),
    ],
)
def test_requests_with_an_invalid_token_are_rejected_with_401(sandbox: SandboxProcess, case, make_token):
    response = sandbox.rpc(make_token(sandbox), "tools/list")
    assert response.status_code == 401, case
    assert response.headers["www-authenticate"].startswith("Bearer ")
    assert "resource_metadata=" in response.headers["www-authenticate"]


def test_a_write_without_the_write_scope_is_rejected_with_403_before_it_runs(sandbox: SandboxProcess, seed):
    read_only = sandbox.token(ALEX, ["crm.read"])
    key = f"scope-test-{uuid.uuid4().hex}"
    response = sandbox.rpc(
        read_only,
        "tools/call",
        {
            "name": "upsert_activity",
            "arguments": {"external_id": key, "type": "call", "subject": "x", "account_id": "acc-acme"},
        },
    )
    assert response.status_code == 403
    assert 'error="insufficient_scope"' in response.headers["www-authenticate"]
    activities = sandbox.admin("GET", "/admin/export")["activities"]
    assert not [a for a in activities if a["external_id"] == key]


def test_a_token_without_the_read_scope_is_rejected_with_403(sandbox: SandboxProcess):
    assert sandbox.rpc(sandbox.token(ALEX, ["crm.write"]), "tools/list").status_code == 403


def test_read_only_token_still_reads(sandbox: SandboxProcess):
    result = sandbox.call(sandbox.token(ALEX, ["crm.read"]), "get_account", account_id="acc-acme")
    assert result["isError"] is False


# --- permissions -------------------------------------------------------------------------------


def test_rep_cannot_read_an_unshared_account_of_another_territory(sandbox: SandboxProcess, seed):
    unshared = _east_accounts(seed, shared=False)[0]
    assert _error_code(sandbox.call(ALEX, "get_account", account_id=unshared["id"])) == "permission_denied"
    found = sandbox.call(ALEX, "search_accounts", query=unshared["name"])["structuredContent"]["items"]
    assert unshared["id"] not in [a["id"] for a in found]


def test_rep_reads_an_account_of_another_territory_shared_with_them(sandbox: SandboxProcess, seed):
    shared = _east_accounts(seed, shared=True)[0]
    result = sandbox.call(ALEX, "get_account", account_id=shared["id"])
    assert result["isError"] is False
    assert result["structuredContent"]["id"] == shared["id"]


def test_rep_never_sees_commission_but_their_manager_does(sandbox: SandboxProcess):
    for tool, args in [
        ("get_opportunity", {"opportunity_id": "opp-acme-renewal"}),
        ("list_opportunities", {"account_id": "acc-acme"}),
        ("pipeline_summary", {}),
    ]:
        rep_view = sandbox.call(ALEX, tool, **args)
        assert rep_view["isError"] is False
        assert "commission" not in json.dumps(rep_view), tool
    manager_view = sandbox.call(NESTOR, "get_opportunity", opportunity_id="opp-acme-renewal")
    assert isinstance(manager_view["structuredContent"]["commission"], int | float)


def test_get_me_gives_a_manager_their_direct_reports_and_a_rep_their_own_line_only(sandbox: SandboxProcess):
    tools = {
        t["name"]: t
        for t in sandbox.rpc(sandbox.token(ALEX, ["crm.read"]), "tools/list").json()["result"]["tools"]
    }
    assert tools["get_me"]["annotations"]["readOnlyHint"] is True

    nestor = sandbox.call(NESTOR, "get_me")["structuredContent"]
    priya = sandbox.call(PRIYA, "get_me")["structuredContent"]
    alex = sandbox.call(ALEX, "get_me")["structuredContent"]

    assert (nestor["id"], nestor["role"], nestor["manager"]) == (_uid(NESTOR), "manager", None)
    assert {r["id"] for r in nestor["direct_reports"]} == {
        "u-alex",
        "u-megan",
        "u-diego",
        "u-lidia",
        "u-adele",
    }
    megan = find_user(MEGAN)
    assert megan is not None
    assert {r["aad_object_id"] for r in nestor["direct_reports"]} >= {megan.aad_object_id}
    assert {r["id"] for r in priya["direct_reports"]} == set()
    assert priya["manager"]["id"] == "u-taylor"
    assert alex["direct_reports"] == []
    assert alex["manager"]["id"] == _uid(NESTOR)
    assert alex["aad_object_id"] == find_user(ALEX).aad_object_id  # type: ignore[union-attr]


def test_rep_cannot_update_an_opportunity_they_do_not_own_but_the_owners_manager_can(
    sandbox: SandboxProcess, seed
):
    megans = next(
        o
        for o in seed["opportunities"]
        if o["owner_id"] == _uid(MEGAN) and o["stage"] not in ("Closed Won", "Closed Lost")
    )
    current = sandbox.call(NESTOR, "get_opportunity", opportunity_id=megans["id"])["structuredContent"]

    denied = sandbox.call(
        ALEX,
        "update_opportunity",
        opportunity_id=megans["id"],
        expected_version=current["version"],
        changes={"next_step": "alex was here"},
    )
    allowed = sandbox.call(
        NESTOR,
        "update_opportunity",
        opportunity_id=megans["id"],
        expected_version=current["version"],
        changes={"next_step": "Manager review on Friday"},
    )

    assert _error_code(denied) == "permission_denied"
    assert allowed["isError"] is False
    updated = allowed["structuredContent"]["opportunity"]
    assert updated["next_step"] == "Manager review on Friday"
    assert updated["version"] == current["version"] + 1


def test_rep_of_one_tenant_sees_nothing_of_another(sandbox: SandboxProcess, seed):
    contoso_ids = {a["id"] for a in seed["accounts"] if a["tenant_id"] == find_user(ALEX).tenant_id}  # type: ignore[union-attr]
    everything = sandbox.call(PRIYA, "search_accounts", limit=100)["structuredContent"]
    assert everything["items"]
    assert not contoso_ids & {a["id"] for a in everything["items"]}
    assert _error_code(sandbox.call(PRIYA, "get_account", account_id="acc-acme")) == "not_found"
    assert (
        _error_code(sandbox.call(PRIYA, "get_opportunity", opportunity_id="opp-acme-renewal")) == "not_found"
    )
    assert _error_code(sandbox.call(PRIYA, "list_activities", account_id="acc-acme")) == "not_found"


def test_request_log_attributes_each_call_to_its_caller(sandbox: SandboxProcess, seed):
    before = len(sandbox.admin("GET", "/admin/request-log"))
    sandbox.call(ALEX, "get_account", account_id="acc-acme")
    sandbox.call(DIEGO, "get_account", account_id="acc-acme")
    sandbox.call(PRIYA, "search_accounts", query="zzz-nothing")

    new = sandbox.admin("GET", "/admin/request-log")[before:]

    assert [(r["caller_id"], r["tool"], r["outcome"]) for r in new] == [
        (_uid(ALEX), "get_account", "ok"),
        (_uid(DIEGO), "get_account", "permission_denied"),
        (_uid(PRIYA), "search_accounts", "ok"),
    ]
    assert "acc-acme" in new[0]["record_ids"]
    assert new[2]["record_ids"] == []


# --- writes ------------------------------------------------------------------------------------


def _activity(external_id: str, subject: str = "Discussed pricing") -> dict[str, Any]:
    return {"external_id": external_id, "type": "call", "subject": subject, "account_id": "acc-acme"}


def test_upsert_twice_with_the_same_key_leaves_one_record(sandbox: SandboxProcess):
    key = f"it-{uuid.uuid4().hex}"
    first = sandbox.call(ALEX, "upsert_activity", **_activity(key))["structuredContent"]
    second = sandbox.call(ALEX, "upsert_activity", **_activity(key))["structuredContent"]

    assert first["created"] is True
    assert second["created"] is False
    assert second["activity"]["id"] == first["activity"]["id"]
    rows = [a for a in sandbox.admin("GET", "/admin/export")["activities"] if a["external_id"] == key]
    assert len(rows) == 1


def test_same_key_with_other_fields_is_an_idempotency_mismatch(sandbox: SandboxProcess):
    key = f"it-{uuid.uuid4().hex}"
    sandbox.call(ALEX, "upsert_activity", **_activity(key))
    clash = sandbox.call(ALEX, "upsert_activity", **_activity(key, subject="Something else"))
    assert _error_code(clash) == "idempotency_mismatch"


def test_fifty_concurrent_identical_upserts_create_one_record(sandbox: SandboxProcess):
    key = f"it-{uuid.uuid4().hex}"
    token = sandbox.token(ALEX)
    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(
            pool.map(lambda _: sandbox.call(token, "upsert_activity", **_activity(key)), range(50))
        )

    assert all(r["isError"] is False for r in results)
    assert len({r["structuredContent"]["activity"]["id"] for r in results}) == 1
    assert sum(r["structuredContent"]["created"] for r in results) == 1
    rows = [a for a in sandbox.admin("GET", "/admin/export")["activities"] if a["external_id"] == key]
    assert len(rows) == 1


def test_stale_expected_version_is_a_conflict_carrying_the_current_values(sandbox: SandboxProcess, seed):
    opp = next(
        o for o in seed["opportunities"] if o["owner_id"] == _uid(ALEX) and o["id"] != "opp-acme-renewal"
    )
    current = sandbox.call(ALEX, "get_opportunity", opportunity_id=opp["id"])["structuredContent"]
    sandbox.call(
        ALEX,
        "update_opportunity",
        opportunity_id=opp["id"],
        expected_version=current["version"],
        changes={"next_step": "Send revised proposal"},
    )

    stale = sandbox.call(
        ALEX,
        "update_opportunity",
        opportunity_id=opp["id"],
        expected_version=current["version"],
        changes={"next_step": "Overwrite attempt"},
    )

    assert _error_code(stale) == "conflict"
    now = stale["structuredContent"]["error"]["details"]["current"]
    assert now["next_step"] == "Send revised proposal"
    assert now["version"] == current["version"] + 1
    assert "commission" not in now


def test_invalid_changes_are_validation_errors_and_write_nothing(sandbox: SandboxProcess, seed):
    opp = sandbox.call(ALEX, "get_opportunity", opportunity_id="opp-acme-renewal")["structuredContent"]
    for changes in ({"stage": "Daydreaming"}, {"amount": -5}, {"colour": "red"}):
        result = sandbox.call(
            ALEX,
            "update_opportunity",
            opportunity_id=opp["id"],
            expected_version=opp["version"],
            changes=changes,
        )
        assert _error_code(result) == "validation", changes
    protected = sandbox.call(
        ALEX,
        "update_opportunity",
        opportunity_id=opp["id"],
        expected_version=opp["version"],
        changes={"commission": 1},
    )
    assert _error_code(protected) == "permission_denied"
    after = sandbox.call(ALEX, "get_opportunity", opportunity_id="opp-acme-renewal")["structuredContent"]
    assert after["version"] == opp["version"]


def test_void_activity_is_idempotent(sandbox: SandboxProcess):
    key = f"it-{uuid.uuid4().hex}"
    activity = sandbox.call(ALEX, "upsert_activity", **_activity(key))["structuredContent"]["activity"]
    first = sandbox.call(ALEX, "void_activity", activity_id=activity["id"], reason="logged by mistake")
    second = sandbox.call(ALEX, "void_activity", activity_id=activity["id"], reason="logged by mistake")
    assert first["isError"] is False
    assert second["structuredContent"]["version"] == first["structuredContent"]["version"]


# --- knobs -------------------------------------------------------------------------------------


@pytest.fixture
def knobs(sandbox: SandboxProcess):
    def set_knobs(**values: Any) -> None:
        sandbox.admin("PUT", "/admin/knobs", values)

    yield set_knobs
    sandbox.admin("PUT", "/admin/knobs", {})


@pytest.mark.parametrize(("kind", "status"), [("503", 503), ("429", 429)])
def test_injected_transient_failures_surface_as_http_errors(sandbox: SandboxProcess, knobs, kind, status):
    knobs(failure_rate=1.0, failure_kinds=[kind], retry_after_seconds=3)
    response = sandbox.rpc(
        sandbox.token(ALEX), "tools/call", {"name": "get_account", "arguments": {"account_id": "acc-acme"}}
    )
    assert response.status_code == status
    assert response.headers["retry-after"] == "3"


def test_injected_timeout_holds_the_request(sandbox: SandboxProcess, knobs):
    knobs(failure_rate=1.0, failure_kinds=["timeout"], timeout_seconds=0.5)
    started = time.monotonic()
    response = sandbox.rpc(
        sandbox.token(ALEX), "tools/call", {"name": "get_account", "arguments": {"account_id": "acc-acme"}}
    )
    assert response.status_code == 504
    assert time.monotonic() - started >= 0.5


def test_per_user_rate_limit_answers_429_with_retry_after_for_that_user_only(sandbox: SandboxProcess, knobs):
    knobs(rate_limit_per_minute=2)
    args = {"name": "get_account", "arguments": {"account_id": "acc-acme"}}
    alex = sandbox.token(ALEX)
    statuses = [sandbox.rpc(alex, "tools/call", args).status_code for _ in range(3)]
    limited = sandbox.rpc(alex, "tools/call", args)
    assert statuses == [200, 200, 429]
    assert int(limited.headers["retry-after"]) >= 1
    assert sandbox.rpc(sandbox.token(MEGAN), "tools/call", args).status_code == 200


def test_invalid_knobs_are_refused_with_a_clear_error(sandbox: SandboxProcess):
    import httpx

    response = httpx.put(f"{sandbox.settings.http_base_url}/admin/knobs", json={"failure_rate": 7})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation"


# --- CLI ---------------------------------------------------------------------------------------


def test_users_command_prints_every_user_with_identity_fields(sandbox: SandboxProcess):
    users = json.loads(sandbox.cli("users").stdout)
    alex = next(u for u in users if u["handle"] == ALEX)
    assert alex["aad_object_id"] == "00000000-0000-0000-0000-0000000000020"
    assert alex["name"] == "Alex Wilber"
    assert {"handle", "name", "tenant", "role", "territory", "manager", "aad_object_id"} <= set(alex)
    assert len({u["tenant"] for u in users}) >= 2


def test_token_command_mints_a_token_the_server_accepts(sandbox: SandboxProcess):
    by_handle = sandbox.cli("token", "--rep", ALEX, "--scope", "crm.read").stdout.strip()
    by_oid = sandbox.cli("token", "--rep", "00000000-0000-0000-0000-0000000000020").stdout.strip()
    assert sandbox.call(by_handle, "get_account", account_id="acc-acme")["isError"] is False
    assert jwt.decode(by_oid, options={"verify_signature": False})["scp"] == "crm.read crm.write"


def test_token_command_rejects_unknown_users_and_mixed_scopes(sandbox: SandboxProcess):
    unknown = sandbox.cli("token", "--rep", "mallory")
    mixed = sandbox.cli("token", "--rep", ALEX, "--scope", "crm.read", "Mail.ReadWrite")
    assert unknown.returncode == 2
    assert "unknown user 'mallory'" in unknown.stderr
    assert mixed.returncode == 2
    assert "one resource" in mixed.stderr


def test_export_command_prints_one_key_per_table(sandbox: SandboxProcess):
    state = json.loads(sandbox.cli("export").stdout)
    assert {"accounts", "opportunities", "activities", "contacts", "drafts"} <= set(state)


def test_reset_restores_the_seed(tmp_path):
    import os
    import sys

    env = {**os.environ, "SANDBOX_DATA_DIR": str(tmp_path)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sandbox", *args],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
        )

    pristine = json.loads(run("export").stdout)
    from sandbox.crm import CrmService

    alex = find_user(ALEX)
    assert alex is not None
    CrmService(tmp_path / "crm.sqlite3").upsert_activity(
        alex, external_id="reset-me", type="task", subject="temp", account_id="acc-acme"
    )
    assert len(json.loads(run("export").stdout)["activities"]) == len(pristine["activities"]) + 1
    assert run("reset").returncode == 0
    assert json.loads(run("export").stdout)["activities"] == pristine["activities"]


def test_npx_is_available_for_the_inspector():
    assert shutil.which("node") is not None


def test_contacts_are_found_by_name_across_the_readable_accounts_only(sandbox: SandboxProcess) -> None:
    everyone = sandbox.admin("GET", "/admin/export")["contacts"]
    sarah = next(c for c in everyone if c["name"] == "Sarah Chen")
    found = sandbox.call(ALEX, "list_contacts", name="sarah chen")["structuredContent"]["items"]
    assert [c["id"] for c in found] == [sarah["id"]]
    assert found[0]["account_id"] == sarah["account_id"]
    # A contact of an account Alex cannot read is not found by name either.
    readable = {
        a["id"]
        for a in sandbox.call(ALEX, "search_accounts", query="", limit=100)["structuredContent"]["items"]
    }
    hidden = next(c for c in everyone if c["account_id"] not in readable)
    assert sandbox.call(ALEX, "list_contacts", name=hidden["name"])["structuredContent"]["items"] == []
    assert _error_code(sandbox.call(ALEX, "list_contacts")) == "validation"
