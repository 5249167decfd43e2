"""Sandbox extensions the copilot core relies on, against the real sandbox process.

* ``update_opportunity`` with an ``idempotency_key`` writes exactly once;
* ``get_opportunity`` / ``get_account`` report the caller's effective access, and
  ``get_contact`` reads one contact under its account's permission;
* the drafts mailbox honours an ``Idempotency-Key`` header;
* the identity provider's local-development password sign-in (ROPC) issues a
  Teams-SSO-like user token that works as the on-behalf-of assertion;
* an admin can revoke and restore a user's CRM access at runtime.
"""

from __future__ import annotations

import sqlite3
import ssl
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from azure.core.exceptions import ClientAuthenticationError
from azure.identity import OnBehalfOfCredential

from sandbox import db
from sandbox.crm import CrmService
from sandbox.directory import CONTOSO, FABRIKAM, find_user
from sandbox.identity.tokens import issue_token, validate_token
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

CRM_READ = "api://sandbox-crm/crm.read"
DRAFT: dict[str, Any] = {
    "subject": "Renewal follow-up",
    "body": {"contentType": "text", "content": "Hi Maria,\nthe revised proposal is attached."},
    "toRecipients": [{"emailAddress": {"address": "maria.gonzalez@acme.example"}}],
}


def _structured(result: dict[str, Any]) -> dict[str, Any]:
    assert result["isError"] is False, result
    content: dict[str, Any] = result["structuredContent"]
    return content


def _error_code(result: dict[str, Any]) -> str:
    assert result["isError"] is True, result
    code: str = result["structuredContent"]["error"]["code"]
    return code


def _opportunities_of(sandbox: SandboxProcess, owner_handle: str) -> list[str]:
    user = find_user(owner_handle)
    assert user is not None
    state = sandbox.admin("GET", "/admin/export")
    return [
        o["id"]
        for o in state["opportunities"]
        if o["owner_id"] == user.id and o["stage"] not in ("Closed Won", "Closed Lost")
    ]


def _version(sandbox: SandboxProcess, rep: str, opportunity_id: str) -> int:
    version: int = _structured(sandbox.call(rep, "get_opportunity", opportunity_id=opportunity_id))["version"]
    return version


# --- update_opportunity idempotency key --------------------------------------------------------


def test_update_with_the_same_idempotency_key_twice_bumps_the_version_once_and_replays(
    sandbox: SandboxProcess,
) -> None:
    opp = _opportunities_of(sandbox, "lidia")[0]
    before = _version(sandbox, "lidia", opp)
    key = f"approval-{uuid.uuid4()}"
    args = {"opportunity_id": opp, "expected_version": before, "changes": {"next_step": "Send the MSA"}}

    first = _structured(sandbox.call("lidia", "update_opportunity", idempotency_key=key, **args))
    second = _structured(sandbox.call("lidia", "update_opportunity", idempotency_key=key, **args))

    assert first["replayed"] is False
    assert first["opportunity"]["version"] == before + 1
    assert second["replayed"] is True
    assert second["opportunity"] == first["opportunity"]
    assert second["previous"] == first["previous"]
    assert _version(sandbox, "lidia", opp) == before + 1
    applied = [
        r for r in sandbox.admin("GET", "/admin/export")["applied_requests"] if r["idempotency_key"] == key
    ]
    assert [r["tool"] for r in applied] == ["update_opportunity"]


def test_same_idempotency_key_with_other_arguments_is_an_idempotency_mismatch(
    sandbox: SandboxProcess,
) -> None:
    opp = _opportunities_of(sandbox, "lidia")[1]
    version = _version(sandbox, "lidia", opp)
    key = f"approval-{uuid.uuid4()}"
    sandbox.call(
        "lidia",
        "update_opportunity",
        opportunity_id=opp,
        expected_version=version,
        changes={"next_step": "Book the kickoff"},
        idempotency_key=key,
    )

    changed = sandbox.call(
        "lidia",
        "update_opportunity",
        opportunity_id=opp,
        expected_version=version,
        changes={"next_step": "Something else"},
        idempotency_key=key,
    )
    other_user = sandbox.call(
        "nestor",
        "update_opportunity",
        opportunity_id=opp,
        expected_version=version,
        changes={"next_step": "Book the kickoff"},
        idempotency_key=key,
    )

    assert _error_code(changed) == "idempotency_mismatch"
    assert _error_code(other_user) == "idempotency_mismatch"
    assert _version(sandbox, "lidia", opp) == version + 1


def test_ten_concurrent_updates_with_the_same_idempotency_key_bump_the_version_once(
    sandbox: SandboxProcess,
) -> None:
    opp = _opportunities_of(sandbox, "lidia")[2]
    before = _version(sandbox, "lidia", opp)
    key = f"approval-{uuid.uuid4()}"
    token = sandbox.token("lidia")

    def update(_: int) -> dict[str, Any]:
        return _structured(
            sandbox.call(
                token,
                "update_opportunity",
                opportunity_id=opp,
                expected_version=before,
                changes={"amount": 123456},
                idempotency_key=key,
            )
        )

    with ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(update, range(10)))

    assert sorted(r["replayed"] for r in results) == [False] + [True] * 9
    assert {r["opportunity"]["version"] for r in results} == {before + 1}
    assert _version(sandbox, "lidia", opp) == before + 1


def test_a_conflicting_keyed_update_stores_nothing_so_a_corrected_retry_can_use_the_key(
    sandbox: SandboxProcess,
) -> None:
    opp = _opportunities_of(sandbox, "lidia")[3]
    version = _version(sandbox, "lidia", opp)
    key = f"approval-{uuid.uuid4()}"
    common = {"opportunity_id": opp, "changes": {"next_step": "Retry me"}, "idempotency_key": key}

    stale = sandbox.call("lidia", "update_opportunity", expected_version=version + 5, **common)
    fresh = sandbox.call("lidia", "update_opportunity", expected_version=version, **common)

    assert _error_code(stale) == "conflict"
    assert _structured(fresh)["replayed"] is False


def test_applied_requests_are_exported_and_cleared_by_reset(tmp_path: Path) -> None:
    crm = CrmService(tmp_path / "crm.sqlite3")
    alex = find_user("alex")
    assert alex is not None
    pristine = db.export_state(crm.db_path)
    crm.update_opportunity(alex, "opp-acme-renewal", 1, {"next_step": "Call Maria"}, idempotency_key="k-1")

    exported = db.export_state(crm.db_path)["applied_requests"]
    db.reset(crm.db_path)

    assert pristine["applied_requests"] == []
    assert [(r["idempotency_key"], r["caller_id"]) for r in exported] == [("k-1", "u-alex")]
    assert exported[0]["result_json"]["opportunity"]["version"] == 2
    assert db.export_state(crm.db_path) == pristine


# --- effective access and get_contact ----------------------------------------------------------


@pytest.mark.parametrize(("rep", "edit"), [("alex", True), ("nestor", True), ("megan", False)])
def test_get_opportunity_reports_edit_access_for_owner_and_manager_only(
    sandbox: SandboxProcess, rep: str, edit: bool
) -> None:
    opportunity = _structured(sandbox.call(rep, "get_opportunity", opportunity_id="opp-acme-renewal"))

    assert opportunity["access"]["read"] is True
    assert opportunity["access"]["edit"] is edit


@pytest.mark.parametrize(
    ("rep", "account_id", "edit"),
    [
        ("alex", "acc-acme", True),  # owner
        ("nestor", "acc-acme", True),  # owner's manager
        ("megan", "acc-acme", False),  # same territory
        ("alex", "acc-globex", False),  # shared with alex
        ("diego", "acc-globex", True),  # owner
    ],
)
def test_get_account_reports_read_and_edit_access(
    sandbox: SandboxProcess, rep: str, account_id: str, edit: bool
) -> None:
    account = _structured(sandbox.call(rep, "get_account", account_id=account_id))

    assert account["access"] == {"read": True, "edit": edit, "log_activity": True}


def test_access_matches_what_update_opportunity_allows(sandbox: SandboxProcess) -> None:
    opp = _opportunities_of(sandbox, "alex")[-1]
    seen = _structured(sandbox.call("megan", "get_opportunity", opportunity_id=opp))

    refused = sandbox.call(
        "megan",
        "update_opportunity",
        opportunity_id=opp,
        expected_version=seen["version"],
        changes={"next_step": "not mine"},
    )

    assert seen["access"]["edit"] is False
    assert _error_code(refused) == "permission_denied"


def test_get_contact_follows_its_accounts_read_permission(sandbox: SandboxProcess) -> None:
    contacts = _structured(sandbox.call("alex", "list_contacts", account_id="acc-acme"))["items"]
    maria = next(c for c in contacts if c["name"] == "Maria Gonzalez")

    owner_view = _structured(sandbox.call("alex", "get_contact", contact_id=maria["id"]))
    same_territory = sandbox.call("megan", "get_contact", contact_id=maria["id"])
    other_territory = sandbox.call("diego", "get_contact", contact_id=maria["id"])
    other_tenant = sandbox.call("priya", "get_contact", contact_id=maria["id"])
    unknown = sandbox.call("alex", "get_contact", contact_id="con-nope")

    assert owner_view == {
        "id": maria["id"],
        "name": "Maria Gonzalez",
        "title": "VP Operations",
        "email": maria["email"],
        "phone": maria["phone"],
        "account": {"id": "acc-acme", "name": "Acme Corporation"},
        "created_at": maria["created_at"],
    }
    assert maria["created_at"].endswith("Z")  # when the contact was added, as list_contacts says
    assert same_territory["isError"] is False
    assert _error_code(other_territory) == "permission_denied"
    assert _error_code(other_tenant) == "not_found"
    assert _error_code(unknown) == "not_found"


# --- drafts Idempotency-Key --------------------------------------------------------------------


def _mail_headers(sandbox: SandboxProcess, handle: str, key: str | None = None) -> dict[str, str]:
    user = find_user(handle)
    assert user is not None
    token = issue_token(
        sandbox.settings, user=user, audience=sandbox.settings.graph_audience, scopes=["Mail.ReadWrite"]
    )
    headers = {"Authorization": f"Bearer {token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


def _messages_url(sandbox: SandboxProcess) -> str:
    return f"{sandbox.settings.http_base_url}/v1.0/me/messages"


def _draft_count(sandbox: SandboxProcess, handle: str) -> int:
    response = httpx.get(_messages_url(sandbox), headers=_mail_headers(sandbox, handle), timeout=30)
    return len(response.json()["value"])


def test_repeating_a_draft_with_the_same_idempotency_key_returns_the_first_draft_with_200(
    sandbox: SandboxProcess,
) -> None:
    key = f"draft-{uuid.uuid4()}"
    headers = _mail_headers(sandbox, "megan", key)
    before = _draft_count(sandbox, "megan")

    first = httpx.post(_messages_url(sandbox), json=DRAFT, headers=headers, timeout=30)
    second = httpx.post(_messages_url(sandbox), json=DRAFT, headers=headers, timeout=30)

    assert first.status_code == 201
    assert second.status_code == 200
    assert second.json() == first.json()
    assert _draft_count(sandbox, "megan") == before + 1


def test_same_draft_key_with_another_payload_is_409_and_keys_are_per_mailbox(
    sandbox: SandboxProcess,
) -> None:
    key = f"draft-{uuid.uuid4()}"
    url = _messages_url(sandbox)
    first = httpx.post(url, json=DRAFT, headers=_mail_headers(sandbox, "megan", key), timeout=30)

    changed = httpx.post(
        url, json={**DRAFT, "subject": "Other"}, headers=_mail_headers(sandbox, "megan", key), timeout=30
    )
    other_owner = httpx.post(url, json=DRAFT, headers=_mail_headers(sandbox, "diego", key), timeout=30)

    assert first.status_code == 201
    assert changed.status_code == 409
    assert changed.json()["error"]["code"] == "ErrorIdempotencyMismatch"
    assert other_owner.status_code == 201
    assert other_owner.json()["id"] != first.json()["id"]


def test_ten_concurrent_identical_draft_posts_store_one_draft(sandbox: SandboxProcess) -> None:
    key = f"draft-{uuid.uuid4()}"
    headers = _mail_headers(sandbox, "lidia", key)
    before = _draft_count(sandbox, "lidia")

    def post(_: int) -> httpx.Response:
        return httpx.post(_messages_url(sandbox), json=DRAFT, headers=headers, timeout=30)

    with ThreadPoolExecutor(max_workers=10) as pool:
        responses = list(pool.map(post, range(10)))

    assert sorted(r.status_code for r in responses) == [200] * 9 + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    assert _draft_count(sandbox, "lidia") == before + 1


@pytest.mark.parametrize("key", ["", "k" * 201])
def test_an_empty_or_overlong_idempotency_key_header_is_400(sandbox: SandboxProcess, key: str) -> None:
    response = httpx.post(
        _messages_url(sandbox), json=DRAFT, headers=_mail_headers(sandbox, "megan", key), timeout=30
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "ErrorInvalidRequest"


def test_create_draft_keeps_its_signature_and_an_old_drafts_table_gains_the_key_column(
    tmp_path: Path,
) -> None:
    path = tmp_path / "crm.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE drafts (id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, owner_id TEXT NOT NULL,"
        " subject TEXT NOT NULL, body_content_type TEXT NOT NULL, body TEXT NOT NULL,"
        " to_recipients TEXT NOT NULL, created_at TEXT NOT NULL)"
    )
    conn.commit()
    conn.close()
    db.ensure_schema(path)
    fields: dict[str, Any] = {
        "tenant_id": CONTOSO.id,
        "owner_id": "u-alex",
        "subject": "Hello",
        "body_content_type": "text",
        "body": "Hi",
        "to_recipients": ["maria.gonzalez@acme.example"],
    }

    plain = db.create_draft(path, **fields)
    keyed = db.create_draft(path, **fields, idempotency_key="k")
    again = db.create_draft(path, **fields, idempotency_key="k")

    assert plain["idempotency_key"] is None
    assert again == keyed
    with pytest.raises(db.DraftIdempotencyMismatch):
        db.create_draft(path, **{**fields, "body": "Other"}, idempotency_key="k")


# --- identity provider: dev sign-in (ROPC) -----------------------------------------------------


def _token_url(sandbox: SandboxProcess, tenant: str = "organizations") -> str:
    return f"{sandbox.settings.idp_base_url}/{tenant}/oauth2/v2.0/token"


def _password_sign_in(
    sandbox: SandboxProcess,
    username: str,
    password: str | None = None,
    tenant: str = "organizations",
    **extra: str,
) -> httpx.Response:
    settings = sandbox.settings
    form = {
        "grant_type": "password",
        "client_id": settings.bot_app_id,
        "username": username,
        "password": settings.dev_user_password if password is None else password,
        "scope": f"openid profile offline_access {settings.bot_app_id_uri}/access_as_user",
        **extra,
    }
    verify = ssl.create_default_context(cafile=str(settings.ca_cert_path))
    return httpx.post(_token_url(sandbox, tenant), data=form, verify=verify, timeout=30)


def _obo_credential(sandbox: SandboxProcess, handle: str, assertion: str) -> OnBehalfOfCredential:
    user = find_user(handle)
    assert user is not None
    settings = sandbox.settings
    return OnBehalfOfCredential(
        user.tenant_id,
        settings.bot_app_id,
        client_secret=settings.bot_client_secret,
        user_assertion=assertion,
        authority=settings.idp_base_url,
        disable_instance_discovery=True,
        connection_verify=str(settings.ca_cert_path),
    )


@pytest.mark.parametrize(
    "username", ["megan", "megan@contoso.example", "aad00000-0000-4000-8000-000000000003"]
)
def test_password_sign_in_issues_an_access_as_user_token_for_that_user(
    sandbox: SandboxProcess, username: str
) -> None:
    response = _password_sign_in(sandbox, username)

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["token_type"] == "Bearer"
    assert body["scope"] == f"{sandbox.settings.bot_app_id_uri}/access_as_user"
    claims = validate_token(
        sandbox.settings,
        body["access_token"],
        audience=sandbox.settings.bot_app_id_uri,
        required_scopes={"access_as_user"},
    )
    assert claims.user.handle == "megan"
    assert jwt.decode(body["access_token"], options={"verify_signature": False})["scp"] == "access_as_user"


def test_password_sign_in_token_works_as_the_on_behalf_of_assertion_for_the_crm(
    sandbox: SandboxProcess,
) -> None:
    assertion = _password_sign_in(sandbox, "alex", tenant=CONTOSO.id).json()["access_token"]

    with _obo_credential(sandbox, "alex", assertion) as credential:
        crm_token = credential.get_token(CRM_READ).token

    result = sandbox.call(crm_token, "get_account", account_id="acc-acme")
    assert result["isError"] is False


def test_password_sign_in_accepts_the_right_client_secret_and_refuses_a_wrong_one(
    sandbox: SandboxProcess,
) -> None:
    good = _password_sign_in(sandbox, "alex", client_secret=sandbox.settings.bot_client_secret)
    bad = _password_sign_in(sandbox, "alex", client_secret="nope")

    assert good.status_code == 200
    assert bad.status_code == 401
    assert bad.json()["error"] == "invalid_client"


@pytest.mark.parametrize(
    ("username", "password", "tenant", "code"),
    [
        ("alex", "wrong-password", "organizations", 50126),
        ("mallory", None, "organizations", 50034),
        ("alex", None, FABRIKAM.id, 50034),
    ],
)
def test_password_sign_in_refuses_wrong_credentials_with_invalid_grant(
    sandbox: SandboxProcess, username: str, password: str | None, tenant: str, code: int
) -> None:
    response = _password_sign_in(sandbox, username, password, tenant)

    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_grant"
    assert body["error_codes"] == [code]
    assert body["error_description"].startswith(f"AADSTS{code}:")
    assert "access_token" not in body


def test_password_sign_in_cannot_ask_for_crm_scopes_directly(sandbox: SandboxProcess) -> None:
    response = _password_sign_in(sandbox, "alex", scope=CRM_READ)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_scope"


# --- runtime CRM access revocation -------------------------------------------------------------


@pytest.fixture
def restore_megan(sandbox: SandboxProcess) -> Iterator[None]:
    try:
        yield
    finally:
        sandbox.admin("PUT", "/admin/users/megan/crm-access", {"enabled": True})


def test_revoking_crm_access_refuses_obo_and_existing_tokens_until_restored(
    sandbox: SandboxProcess, restore_megan: None
) -> None:
    existing = sandbox.token("megan", ["crm.read"])
    assertion = _password_sign_in(sandbox, "megan").json()["access_token"]
    assert sandbox.rpc(existing, "tools/list").status_code == 200

    revoked = sandbox.admin("PUT", "/admin/users/megan/crm-access", {"enabled": False})
    refused = sandbox.rpc(existing, "tools/list")
    with (
        _obo_credential(sandbox, "megan", assertion) as credential,
        pytest.raises(ClientAuthenticationError, match="AADSTS50105"),
    ):
        credential.get_token(CRM_READ)
    with _obo_credential(sandbox, "megan", assertion) as credential:
        graph = credential.get_token(f"{sandbox.settings.graph_audience}/Mail.ReadWrite")

    restored = sandbox.admin("PUT", "/admin/users/megan/crm-access", {"enabled": True})
    with _obo_credential(sandbox, "megan", assertion) as credential:
        crm_token = credential.get_token(CRM_READ).token

    assert revoked["crm_access"] is False
    assert refused.status_code == 401
    assert refused.json() == {
        "error": "invalid_token",
        "error_description": "CRM access revoked for this user",
    }
    assert 'error="invalid_token"' in refused.headers["www-authenticate"]
    assert graph.token
    assert restored["crm_access"] is True
    assert sandbox.rpc(existing, "tools/list").status_code == 200
    assert sandbox.rpc(crm_token, "tools/list").status_code == 200
    assert sandbox.admin("GET", "/admin/export")["user_overrides"] == []


def test_crm_access_admin_endpoint_validates_its_input(sandbox: SandboxProcess) -> None:
    url = f"{sandbox.settings.http_base_url}/admin/users"

    unknown = httpx.put(f"{url}/mallory/crm-access", json={"enabled": False}, timeout=30)
    not_bool = httpx.put(f"{url}/megan/crm-access", json={"enabled": "no"}, timeout=30)

    assert unknown.status_code == 404
    assert not_bool.status_code == 400
    assert sandbox.admin("GET", "/admin/export")["user_overrides"] == []
