"""The sandbox identity provider: real HTTPS, real azure-identity OBO, and a token-validation matrix."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import jwt
import pytest
import uvicorn
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError
from azure.identity import OnBehalfOfCredential
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette

from sandbox.config import SandboxSettings
from sandbox.directory import CONTOSO, FABRIKAM, User, find_user
from sandbox.identity.ca import ensure_tls_material
from sandbox.identity.keys import jwks, signing_key
from sandbox.identity.provider import identity_routes
from sandbox.identity.tokens import TokenError, bearer_from_header, issue_token, validate_token

pytestmark = pytest.mark.integration

CRM_READ = "api://sandbox-crm/crm.read"
CRM_WRITE = "api://sandbox-crm/crm.write"


@dataclass(frozen=True)
class Sandbox:
    settings: SandboxSettings
    ca_cert: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    settings = SandboxSettings(data_dir=tmp_path_factory.mktemp("idp"), https_port=_free_port())
    tls = ensure_tls_material(settings)
    app = Starlette(routes=identity_routes(settings))
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=settings.https_port,
        ssl_certfile=str(tls.server_cert),
        ssl_keyfile=str(tls.server_key),
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "sandbox IdP exited at start"
        assert time.monotonic() < deadline, "sandbox IdP did not start"
        time.sleep(0.02)
    yield Sandbox(settings, tls.ca_cert)
    server.should_exit = True
    thread.join(timeout=10)


def _user(handle: str) -> User:
    user = find_user(handle)
    assert user is not None
    return user


def _user_token(settings: SandboxSettings, handle: str) -> str:
    """A Teams-SSO-like token: audience = the bot's Application ID URI, scope access_as_user."""
    user = _user(handle)
    return issue_token(settings, user=user, audience=settings.bot_app_id_uri, scopes=["access_as_user"])


def _obo(sandbox: Sandbox, handle: str, *scopes: str, secret: str | None = None) -> AccessToken:
    """Exchange ``handle``'s Teams-SSO-like token exactly as the bot does (azure-identity OBO)."""
    settings = sandbox.settings
    user = find_user(handle)
    assert user is not None
    with OnBehalfOfCredential(
        user.tenant_id,
        settings.bot_app_id,
        client_secret=secret or settings.bot_client_secret,
        user_assertion=_user_token(settings, handle),
        authority=settings.idp_base_url,
        disable_instance_discovery=True,
        connection_verify=str(sandbox.ca_cert),
    ) as credential:
        return credential.get_token(*scopes)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _claims(settings: SandboxSettings, handle: str = "alex") -> dict[str, object]:
    token = issue_token(settings, user=_user(handle), audience=settings.crm_audience, scopes=["crm.read"])
    return jwt.decode(token, options={"verify_signature": False})


# --- azure-identity on-behalf-of against the real HTTPS provider -----------------------------------


def test_obo_exchanges_a_user_token_for_a_crm_token_of_the_same_user(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    alex = find_user("alex")
    assert alex is not None

    access = _obo(sandbox, "alex", CRM_READ, CRM_WRITE)

    claims = validate_token(
        settings, access.token, audience=settings.crm_audience, required_scopes={"crm.read"}
    )
    assert claims.user == alex
    assert claims.tenant_id == CONTOSO.id
    assert claims.claims["oid"] == alex.aad_object_id
    user_claims = jwt.decode(_user_token(settings, "alex"), options={"verify_signature": False})
    assert claims.claims["sub"] == user_claims["sub"]
    assert claims.scopes == {"crm.read", "crm.write"}
    assert access.expires_on > time.time() + 3000


def test_read_only_request_yields_a_token_without_crm_write(sandbox: Sandbox) -> None:
    access = _obo(sandbox, "priya", CRM_READ)

    claims = validate_token(sandbox.settings, access.token, audience=sandbox.settings.crm_audience)
    assert claims.user.handle == "priya"
    assert claims.tenant_id == FABRIKAM.id
    assert claims.scopes == {"crm.read"}
    with pytest.raises(TokenError) as excinfo:
        validate_token(
            sandbox.settings,
            access.token,
            audience=sandbox.settings.crm_audience,
            required_scopes={"crm.write"},
        )
    assert excinfo.value.status == 403


def test_default_scope_grants_every_scope_of_the_resource(sandbox: Sandbox) -> None:
    access = _obo(sandbox, "megan", "api://sandbox-crm/.default")

    claims = validate_token(sandbox.settings, access.token, audience=sandbox.settings.crm_audience)
    assert claims.scopes == {"crm.read", "crm.write"}


def test_obo_issues_graph_mail_tokens(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    access = _obo(sandbox, "diego", f"{settings.graph_audience}/Mail.ReadWrite")

    claims = validate_token(
        settings, access.token, audience=settings.graph_audience, required_scopes={"Mail.ReadWrite"}
    )
    assert claims.user.handle == "diego"


def test_revoked_user_gets_no_crm_token(sandbox: Sandbox) -> None:
    with pytest.raises(ClientAuthenticationError) as excinfo:
        _obo(sandbox, "adele", CRM_READ)

    message = str(excinfo.value)
    assert "AADSTS50105" in message
    assert "not assigned to a role" in message
    assert "no access" in message


def test_bad_client_secret_is_refused(sandbox: Sandbox) -> None:
    with pytest.raises(ClientAuthenticationError) as excinfo:
        _obo(sandbox, "alex", CRM_READ, secret="not-the-secret")

    assert "AADSTS7000215" in str(excinfo.value)


def test_scopes_of_two_resources_in_one_request_are_refused(sandbox: Sandbox) -> None:
    with pytest.raises(ClientAuthenticationError) as excinfo:
        _obo(sandbox, "alex", CRM_READ, f"{sandbox.settings.graph_audience}/Mail.ReadWrite")

    assert "AADSTS28000" in str(excinfo.value)


def _post_token(sandbox: Sandbox, form: dict[str, str], tenant: str = CONTOSO.id) -> httpx.Response:
    context = ssl.create_default_context(cafile=str(sandbox.ca_cert))
    url = f"{sandbox.settings.idp_base_url}/{tenant}/oauth2/v2.0/token"
    with httpx.Client(verify=context) as client:
        return client.post(url, data=form)


def test_app_only_tokens_are_refused_for_crm_data(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    response = _post_token(
        sandbox,
        {
            "grant_type": "client_credentials",
            "client_id": settings.bot_app_id,
            "client_secret": settings.bot_client_secret,
            "scope": "api://sandbox-crm/.default",
        },
    )

    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_scope"
    assert "signed-in user" in body["error_description"]
    assert {"timestamp", "trace_id", "correlation_id"} <= body.keys()


def test_the_bot_gets_an_app_only_token_for_the_bot_connector(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    response = _post_token(
        sandbox,
        {
            "grant_type": "client_credentials",
            "client_id": settings.bot_app_id,
            "client_secret": settings.bot_client_secret,
            "scope": "https://api.botframework.com/.default",
        },
    )
    assert response.status_code == 200
    claims = jwt.decode(response.json()["access_token"], options={"verify_signature": False})
    assert claims["aud"] == "https://api.botframework.com"
    assert claims["appid"] == settings.bot_app_id
    assert "oid" not in claims


def test_the_bot_connector_grant_needs_the_bot_secret(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    response = _post_token(
        sandbox,
        {
            "grant_type": "client_credentials",
            "client_id": settings.bot_app_id,
            "client_secret": "wrong",
            "scope": "https://api.botframework.com/.default",
        },
    )
    assert response.status_code == 401


def test_the_bot_connector_grant_refuses_a_tenant_the_directory_does_not_have(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    form = {
        "grant_type": "client_credentials",
        "client_id": settings.bot_app_id,
        "client_secret": settings.bot_client_secret,
        "scope": "https://api.botframework.com/.default",
    }
    response = _post_token(sandbox, form, tenant="00000000-0000-0000-0000-0000000000ff")
    assert response.status_code == 400
    assert response.json()["error_description"].startswith("AADSTS90002:")
    # The bot's own tenant and Bot Framework's answer.
    assert _post_token(sandbox, form, tenant="botframework.com").status_code == 200


def test_obo_assertion_must_be_a_user_token_for_the_bot(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    crm_token = issue_token(settings, user=_user("alex"), audience=settings.crm_audience, scopes=["crm.read"])
    response = _post_token(
        sandbox,
        {
            "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
            "requested_token_use": "on_behalf_of",
            "client_id": settings.bot_app_id,
            "client_secret": settings.bot_client_secret,
            "assertion": crm_token,
            "scope": CRM_READ,
        },
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"


def test_discovery_document_and_jwks_are_served_over_https(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    context = ssl.create_default_context(cafile=str(sandbox.ca_cert))
    with httpx.Client(verify=context) as client:
        config = client.get(
            f"{settings.idp_base_url}/{CONTOSO.id}/v2.0/.well-known/openid-configuration"
        ).json()
        keys = client.get(config["jwks_uri"]).json()
        unknown = client.get(f"{settings.idp_base_url}/not-a-tenant/v2.0/.well-known/openid-configuration")

    assert config["issuer"] == settings.issuer(CONTOSO.id)
    assert config["token_endpoint"] == f"{settings.idp_base_url}/{CONTOSO.id}/oauth2/v2.0/token"
    assert keys == jwks(settings)
    assert keys["keys"][0]["kid"] == signing_key(settings).kid
    assert unknown.status_code == 400


# --- key material --------------------------------------------------------------------------------


def test_tls_material_and_signing_key_are_reused_across_calls(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    before = (settings.ca_cert_path.read_bytes(), settings.server_cert_path.read_bytes())
    kid = signing_key(settings).kid

    ensure_tls_material(settings)

    assert (settings.ca_cert_path.read_bytes(), settings.server_cert_path.read_bytes()) == before
    assert signing_key(settings).kid == kid
    cert = x509.load_pem_x509_certificate(settings.server_cert_path.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "::1"}


def test_kid_is_the_rfc7638_thumbprint(sandbox: Sandbox) -> None:
    jwk = jwks(sandbox.settings)["keys"][0]
    canonical = json.dumps({"e": jwk["e"], "kty": "RSA", "n": jwk["n"]}, separators=(",", ":"))

    assert jwk["kid"] == _b64(hashlib.sha256(canonical.encode()).digest())


# --- validate_token matrix -----------------------------------------------------------------------


def _assert_invalid(settings: SandboxSettings, token: str, audience: str | None = None) -> TokenError:
    with pytest.raises(TokenError) as excinfo:
        validate_token(settings, token, audience=audience or settings.crm_audience)
    assert excinfo.value.status == 401
    assert excinfo.value.error == "invalid_token"
    return excinfo.value


@pytest.mark.parametrize("token", ["", "garbage", "a.b.c", "eyJhbGciOiJSUzI1NiJ9.e30.AAAA"])
def test_missing_or_garbage_tokens_are_rejected(sandbox: Sandbox, token: str) -> None:
    _assert_invalid(sandbox.settings, token)


def test_expired_token_is_rejected(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    token = issue_token(
        settings, user=_user("alex"), audience=settings.crm_audience, scopes=["crm.read"], lifetime=-120
    )

    assert "expired" in _assert_invalid(settings, token).description


def test_token_for_another_audience_is_rejected(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    token = _user_token(settings, "alex")

    _assert_invalid(settings, token, audience=settings.crm_audience)
    listed = issue_token(
        settings,
        user=_user("alex"),
        audience=settings.crm_audience,
        scopes=["crm.read"],
        extra_claims={"aud": [settings.crm_audience, "other"]},
    )
    _assert_invalid(settings, listed)


def test_token_from_another_issuer_is_rejected(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    alex = find_user("alex")
    assert alex is not None
    for issuer in ("https://login.microsoftonline.com/x/v2.0", settings.issuer(FABRIKAM.id)):
        token = issue_token(
            settings,
            user=alex,
            audience=settings.crm_audience,
            scopes=["crm.read"],
            extra_claims={"iss": issuer},
        )
        _assert_invalid(settings, token)


def test_token_for_an_unknown_user_or_wrong_tenant_is_rejected(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    alex = find_user("alex")
    assert alex is not None
    for extra in (
        {"oid": "aad00000-0000-4000-8000-999999999999"},
        {"tid": FABRIKAM.id, "iss": settings.issuer(FABRIKAM.id)},
    ):
        token = issue_token(
            settings, user=alex, audience=settings.crm_audience, scopes=["crm.read"], extra_claims=extra
        )
        _assert_invalid(settings, token)


def test_token_signed_by_another_key_is_rejected(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = jwt.encode(
        _claims(settings), other, algorithm="RS256", headers={"kid": signing_key(settings).kid}
    )

    assert "signature" in _assert_invalid(settings, token).description


def test_unsigned_alg_none_token_is_rejected(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    header = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": signing_key(settings).kid}).encode())
    payload = _b64(json.dumps(_claims(settings)).encode())

    _assert_invalid(settings, f"{header}.{payload}.")


def test_hs256_token_keyed_with_the_public_key_is_rejected(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    public_pem = signing_key(settings).public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    signing_input = (
        _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        + "."
        + _b64(json.dumps(_claims(settings)).encode())
    )
    signature = _b64(hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest())

    _assert_invalid(settings, f"{signing_input}.{signature}")


def test_missing_scope_is_403_insufficient_scope(sandbox: Sandbox) -> None:
    settings = sandbox.settings
    token = issue_token(settings, user=_user("alex"), audience=settings.crm_audience, scopes=["crm.read"])

    with pytest.raises(TokenError) as excinfo:
        validate_token(settings, token, audience=settings.crm_audience, required_scopes={"crm.write"})

    assert (excinfo.value.status, excinfo.value.error) == (403, "insufficient_scope")
    assert "crm.write" in excinfo.value.www_authenticate()


def test_bearer_header_must_be_present_and_bearer() -> None:
    assert bearer_from_header("Bearer abc.def.ghi") == "abc.def.ghi"
    for value in (None, "", "Basic dXNlcjpwYXNz", "Bearer", "Bearer a b"):
        with pytest.raises(TokenError) as excinfo:
            bearer_from_header(value)
        assert excinfo.value.status == 401
