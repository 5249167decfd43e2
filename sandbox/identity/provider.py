"""HTTP face of the identity provider: OpenID discovery, JWKS and the token endpoint.

Shaped like Entra ID v2.0 closely enough that MSAL / azure-identity's
``OnBehalfOfCredential`` work against it unchanged. Two grants exist, both for a
signed-in user; there are no service accounts (no ``client_credentials``):

* the on-behalf-of jwt-bearer exchange of a Teams-SSO-like user token for a CRM or
  Graph token of the *same* user (what the bot does);
* the resource-owner password grant (``grant_type=password``), a **local-development
  sign-in only**: the copilot's CLI uses it to get the Teams-SSO-like user token Teams
  would otherwise provide (see ``_password_grant``).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hmac
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import jwt
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandbox.access import crm_access_enabled
from sandbox.config import SandboxSettings
from sandbox.directory import User, find_tenant, find_user
from sandbox.identity.keys import jwks, signing_key
from sandbox.identity.tokens import TokenError, issue_token, validate_token

GRANT_JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
GRANT_PASSWORD = "password"
USER_TOKEN_SCOPE = "access_as_user"
RESERVED_SCOPES = frozenset({"openid", "profile", "offline_access", "email"})
MULTI_TENANT_ALIASES = frozenset({"common", "organizations"})
CRM_SCOPES = ("crm.read", "crm.write")
GRAPH_SCOPES = (
    "Mail.ReadWrite",
    "Sites.Read.All",
    "Calendars.Read",
    "User.ReadBasic.All",
    "MailboxSettings.Read",
)
DATAVERSE_SCOPES = ("user_impersonation", "mcp.tools")
"""What a token for the Dataverse org URL carries, whether asked for ``<org>/.default`` or
``<org>/user_impersonation``: the app registration holds both delegated permissions, and
Entra grants every consented scope of the resource."""
TRANSCRIPT_SCOPE = "OnlineMeetingTranscript.Read.All"
"""Teams meeting transcripts (``/me/onlineMeetings/{id}/transcripts``): asked for by name only
(``.default`` does not include it: it needs its own admin consent)."""
TRANSCRIPT_CONSENT_WITHHELD: frozenset[str] = frozenset({"u-diego"})
"""Users for whom the transcript permission was not consented (a consent refusal to handle)."""
CALENDAR_SCOPE = "Calendars.Read"
CALENDAR_CONSENT_WITHHELD: frozenset[str] = frozenset({"u-lidia"})
"""Users who have not consented to ``Calendars.Read`` (a rep the brief must explain this to)."""


class OAuthError(Exception):
    """An Entra-shaped token endpoint error (``AADSTS<code>: ...``)."""

    def __init__(self, status: int, error: str, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ScopeRequest:
    """The one resource a token request targets and the scope names granted on it."""

    resource: str
    names: tuple[str, ...]

    @property
    def qualified(self) -> str:
        """Space-separated fully qualified scopes, as Entra echoes them for non-Graph APIs."""
        return " ".join(f"{self.resource}/{name}" for name in self.names)


def identity_routes(settings: SandboxSettings) -> list[Route]:
    """Starlette routes of the identity provider, to mount at the root of the HTTPS app."""

    async def openid_configuration(request: Request) -> Response:
        tenant = request.path_params["tenant"]
        if tenant not in MULTI_TENANT_ALIASES | {"botframework.com"} and find_tenant(tenant) is None:
            return _oauth_error(
                request, OAuthError(400, "invalid_tenant", 90002, f"Tenant '{tenant}' not found.")
            )
        return JSONResponse(openid_metadata(settings, tenant))

    async def keys(request: Request) -> Response:
        return JSONResponse(jwks(settings), headers={"Cache-Control": "max-age=300"})

    async def token(request: Request) -> Response:
        try:
            return JSONResponse(await _token(settings, request), headers={"Cache-Control": "no-store"})
        except OAuthError as exc:
            return _oauth_error(request, exc)

    return [
        Route("/{tenant}/v2.0/.well-known/openid-configuration", openid_configuration, methods=["GET"]),
        Route("/{tenant}/.well-known/openid-configuration", openid_configuration, methods=["GET"]),
        Route("/{tenant}/discovery/v2.0/keys", keys, methods=["GET"]),
        Route("/{tenant}/discovery/keys", keys, methods=["GET"]),
        Route("/{tenant}/oauth2/v2.0/token", token, methods=["POST"]),
    ]


def openid_metadata(settings: SandboxSettings, tenant: str) -> dict[str, Any]:
    """The OpenID Provider metadata for ``tenant`` (a tenant id, ``common`` or ``organizations``)."""
    base = f"{settings.idp_base_url}/{tenant}"
    issuer_tenant = "{tenantid}" if tenant in MULTI_TENANT_ALIASES else tenant
    return {
        "issuer": settings.issuer(issuer_tenant),
        "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
        "token_endpoint": f"{base}/oauth2/v2.0/token",
        "jwks_uri": f"{base}/discovery/v2.0/keys",
        "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
        "grant_types_supported": [GRANT_JWT_BEARER, GRANT_PASSWORD, "client_credentials"],
        "response_types_supported": ["code", "id_token", "code id_token", "id_token token"],
        "response_modes_supported": ["query", "fragment", "form_post"],
        "subject_types_supported": ["pairwise"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "scopes_supported": ["openid", "profile", "email", "offline_access"],
        "claims_supported": [
            "sub",
            "iss",
            "aud",
            "exp",
            "iat",
            "nbf",
            "name",
            "preferred_username",
            "oid",
            "tid",
            "ver",
        ],
        "request_uri_parameter_supported": False,
        "tenant_region_scope": None,
        "cloud_instance_name": "localhost",
    }


async def _token(settings: SandboxSettings, request: Request) -> dict[str, Any]:
    form = _parse_form(await request.body())
    grant_type = form.get("grant_type", "")
    if grant_type == GRANT_PASSWORD:
        return _password_grant(settings, request, form)
    if grant_type == "client_credentials":
        return _bot_connector_grant(settings, request, form)
    if grant_type != GRANT_JWT_BEARER:
        raise OAuthError(
            400,
            "unsupported_grant_type",
            70003,
            f"The app requested an unsupported grant type '{grant_type}'. This sandbox supports the "
            "on-behalf-of flow (and a password sign-in for local development): there are no service "
            "accounts, every token speaks for a signed-in user.",
        )
    _authenticate_client(settings, request, form)
    if form.get("requested_token_use") != "on_behalf_of":
        raise OAuthError(
            400,
            "invalid_request",
            900144,
            "The request body must contain 'requested_token_use=on_behalf_of'.",
        )
    user = _assertion_user(settings, form.get("assertion", ""), request.path_params["tenant"])
    scopes = parse_scopes(settings, form.get("scope", ""))
    if scopes.resource in (settings.crm_audience, settings.org_url) and not await run_in_threadpool(
        crm_access_enabled, settings.db_path, user
    ):
        raise OAuthError(
            400,
            "invalid_grant",
            50105,
            f"The signed in user '{user.email}' is not assigned to a role for the application "
            f"'{settings.crm_audience}'. The user has no access to the CRM (licence revoked).",
        )
    if scopes.resource == settings.graph_audience:
        scopes = _consented(settings, user, scopes)
    return _token_response(settings, form, user, scopes)


def _consented(settings: SandboxSettings, user: User, scopes: ScopeRequest) -> ScopeRequest:
    """Graph scopes the user consented to: a named scope without consent is AADSTS65001 (as
    Entra answers); ``.default`` quietly grants only the consented ones."""
    missing = [
        n
        for n in scopes.names
        if (n == CALENDAR_SCOPE and user.id in CALENDAR_CONSENT_WITHHELD)
        or (n == TRANSCRIPT_SCOPE and user.id in TRANSCRIPT_CONSENT_WITHHELD)
    ]
    if missing and scopes.names == GRAPH_SCOPES:
        return ScopeRequest(scopes.resource, tuple(n for n in scopes.names if n not in missing))
    if missing:
        raise OAuthError(
            400,
            "invalid_grant",
            65001,
            f"The user or administrator has not consented to use the application with ID "
            f"'{settings.bot_app_id}' for scope '{settings.graph_audience}/{missing[0]}'. Send an "
            "interactive authorization request for this user and resource.",
        )
    return scopes


def _token_response(
    settings: SandboxSettings, form: dict[str, str], user: User, scopes: ScopeRequest
) -> dict[str, Any]:
    lifetime = settings.token_lifetime_seconds
    body: dict[str, Any] = {
        "token_type": "Bearer",
        "scope": scopes.qualified,
        "expires_in": lifetime,
        "ext_expires_in": lifetime,
        "access_token": issue_token(
            settings, user=user, audience=scopes.resource, scopes=list(scopes.names), lifetime=lifetime
        ),
    }
    if form.get("client_info") == "1":
        info = json.dumps({"uid": user.aad_object_id, "utid": user.tenant_id}, separators=(",", ":"))
        body["client_info"] = base64.urlsafe_b64encode(info.encode()).rstrip(b"=").decode("ascii")
    return body


def _bot_connector_grant(settings: SandboxSettings, request: Request, form: dict[str, str]) -> dict[str, Any]:
    """The bot's own app-only token for the Bot Connector (how a bot replies in Teams).

    Only for the Bot Framework audience: CRM and Graph data are never reachable with an
    app-only token here; those always go through a signed-in user (on-behalf-of).
    """
    tenant = request.path_params["tenant"]
    if tenant not in MULTI_TENANT_ALIASES | {"botframework.com"} and find_tenant(tenant) is None:
        raise OAuthError(
            400,
            "invalid_request",
            90002,
            f"Tenant '{tenant}' not found. Check to make sure you have the correct tenant ID and are "
            "signing into the correct cloud.",
        )
    _authenticate_client(settings, request, form)
    scope = form.get("scope", "").strip()
    if scope != f"{settings.bot_connector_audience}/.default":
        raise OAuthError(
            400,
            "invalid_scope",
            1002012,
            f"App-only tokens are issued only for '{settings.bot_connector_audience}/.default' (the Bot "
            "Connector); CRM and Graph data need a signed-in user (on-behalf-of).",
        )
    key = signing_key(settings)
    now = int(time.time())
    lifetime = settings.token_lifetime_seconds
    claims = {
        "aud": settings.bot_connector_audience,
        "iss": settings.issuer("botframework.com"),
        "iat": now,
        "nbf": now,
        "exp": now + lifetime,
        "appid": settings.bot_app_id,
        "azp": settings.bot_app_id,
        "ver": "2.0",
        "idtyp": "app",
    }
    token = jwt.encode(claims, key.private_key, algorithm="RS256", headers={"kid": key.kid, "typ": "JWT"})
    return {"token_type": "Bearer", "expires_in": lifetime, "ext_expires_in": lifetime, "access_token": token}


def _password_grant(settings: SandboxSettings, request: Request, form: dict[str, str]) -> dict[str, Any]:
    """Resource-owner password sign-in: **local development only**.

    Lets the copilot's local CLI obtain, through a real OAuth grant and without
    importing the sandbox, the Teams-SSO-like user token (``aud`` = the bot's
    Application ID URI, ``scp`` = ``access_as_user``) that Teams hands the bot in
    production; the CLI then exchanges it on-behalf-of like the bot does. Entra ID
    supports this grant too, but it is not how production signs users in (no MFA, no
    conditional access), so nothing outside local development should rely on it.

    ``client_id`` must be the bot app (a public client: a secret is optional but
    checked when sent); ``username`` is a handle, email or AAD object id;
    ``password`` is ``settings.dev_user_password`` for every user; ``scope`` is
    ``{bot_app_id_uri}/access_as_user`` (or ``/.default``) plus ignored reserved scopes.
    """
    _authenticate_public_client(settings, request, form)
    scopes = _user_token_scope(settings, form.get("scope", ""))
    username, password = form.get("username", ""), form.get("password", "")
    if not username or not password:
        missing = "username" if not username else "password"
        raise OAuthError(
            400,
            "invalid_request",
            900144,
            f"The request body must contain the following parameter: '{missing}'.",
        )
    user = find_user(username)
    path_tenant = request.path_params["tenant"]
    if user is not None and path_tenant not in MULTI_TENANT_ALIASES and path_tenant != user.tenant_id:
        if find_tenant(path_tenant) is None:
            raise OAuthError(400, "invalid_tenant", 90002, f"Tenant '{path_tenant}' not found.")
        user = None
    if user is None:
        raise OAuthError(
            400,
            "invalid_grant",
            50034,
            f"The user account {username} does not exist in the "
            f"{'directory' if path_tenant in MULTI_TENANT_ALIASES else f'{path_tenant} directory'}. "
            "To sign into this application, the account must be added to the directory.",
        )
    if not hmac.compare_digest(password.encode(), settings.dev_user_password.encode()):
        raise OAuthError(
            400,
            "invalid_grant",
            50126,
            "Error validating credentials due to invalid username or password.",
        )
    return _token_response(settings, form, user, scopes)


def _user_token_scope(settings: SandboxSettings, scope: str) -> ScopeRequest:
    """The only scope a password sign-in may request: the bot API's ``access_as_user``."""
    wanted = {f"{settings.bot_app_id_uri}/{USER_TOKEN_SCOPE}", f"{settings.bot_app_id_uri}/.default"}
    requested = [s for s in scope.split() if s not in RESERVED_SCOPES]
    if not requested or any(s not in wanted for s in requested):
        raise OAuthError(
            400,
            "invalid_scope",
            70011,
            f"The provided value for the input parameter 'scope' is not valid: a password sign-in may "
            f"only request '{settings.bot_app_id_uri}/{USER_TOKEN_SCOPE}'.",
        )
    return ScopeRequest(settings.bot_app_id_uri, (USER_TOKEN_SCOPE,))


def _authenticate_public_client(settings: SandboxSettings, request: Request, form: dict[str, str]) -> None:
    """The bot app as a public client: no secret needed, but a secret sent must be right."""
    client_id, client_secret = form.get("client_id", ""), form.get("client_secret", "")
    basic = _basic_credentials(request.headers.get("authorization"))
    if basic is not None:
        client_id, client_secret = client_id or basic[0], basic[1]
    if client_secret or client_id != settings.bot_app_id:
        _authenticate_client(settings, request, {**form, "client_id": client_id})


def parse_scopes(settings: SandboxSettings, scope: str) -> ScopeRequest:
    """Resolve a requested ``scope`` string to one known resource and its scope names.

    Reserved OpenID scopes are ignored; ``<resource>/.default`` means every scope of
    that resource. Raises ``OAuthError`` for an empty, unknown or multi-resource request.
    """
    known = {
        settings.crm_audience: CRM_SCOPES,
        settings.graph_audience: GRAPH_SCOPES,
        settings.org_url: DATAVERSE_SCOPES,
    }
    requested = [s for s in scope.split() if s not in RESERVED_SCOPES]
    if not requested:
        raise OAuthError(
            400,
            "invalid_scope",
            70011,
            "The provided value for the input parameter 'scope' is not valid: name an API scope.",
        )
    resources: dict[str, list[str]] = {}
    for item in requested:
        resource, sep, name = item.rpartition("/")
        if not sep or not resource or not name:
            raise OAuthError(
                400,
                "invalid_scope",
                70011,
                f"The provided value for scope '{item}' is not valid: use '<resource>/<scope>'.",
            )
        resources.setdefault(resource, []).append(name)
    if len(resources) > 1:
        raise OAuthError(
            400,
            "invalid_scope",
            28000,
            "Provided value for the input parameter scope is not valid because it contains "
            "more than one resource.",
        )
    resource, names = next(iter(resources.items()))
    if resource not in known:
        raise OAuthError(
            400,
            "invalid_resource",
            500011,
            f"The resource principal named {resource} was not found in the tenant.",
        )
    if resource == settings.org_url and set(names) <= set(DATAVERSE_SCOPES):
        # The app registration holds both Dynamics CRM delegated permissions, and a request for
        # either one (as a public client asks for user_impersonation) gets the consented set.
        return ScopeRequest(resource, known[resource])
    if ".default" in names:
        if len(names) > 1:
            raise OAuthError(
                400,
                "invalid_scope",
                70011,
                "'.default' cannot be combined with other scopes of the resource.",
            )
        return ScopeRequest(resource, known[resource])
    named = (*known[resource], TRANSCRIPT_SCOPE) if resource == settings.graph_audience else known[resource]
    unknown = [n for n in names if n not in named]
    if unknown:
        raise OAuthError(
            400,
            "invalid_scope",
            65005,
            f"The application asked for scope '{unknown[0]}' that doesn't exist on the resource "
            f"'{resource}'.",
        )
    return ScopeRequest(resource, tuple(dict.fromkeys(names)))


def _authenticate_client(settings: SandboxSettings, request: Request, form: dict[str, str]) -> None:
    client_id, client_secret = form.get("client_id", ""), form.get("client_secret", "")
    basic = _basic_credentials(request.headers.get("authorization"))
    if basic is not None:
        client_id, client_secret = client_id or basic[0], basic[1]
    if client_id != settings.bot_app_id:
        raise OAuthError(
            400,
            "unauthorized_client",
            700016,
            f"Application with identifier '{client_id}' was not found in the directory.",
        )
    if not client_secret:
        raise OAuthError(
            401,
            "invalid_client",
            7000218,
            "The request body must contain the following parameter: 'client_assertion' or 'client_secret'.",
        )
    if not hmac.compare_digest(client_secret.encode(), settings.bot_client_secret.encode()):
        raise OAuthError(
            401,
            "invalid_client",
            7000215,
            "Invalid client secret provided. Ensure the secret being sent in the request is the "
            "client secret value.",
        )


def _assertion_user(settings: SandboxSettings, assertion: str, path_tenant: str) -> User:
    if not assertion:
        raise OAuthError(
            400,
            "invalid_request",
            900144,
            "The request body must contain the following parameter: 'assertion'.",
        )
    try:
        unverified_aud = jwt.decode(assertion, options={"verify_signature": False}).get("aud")
    except jwt.InvalidTokenError as exc:
        raise OAuthError(400, "invalid_grant", 50027, "The assertion is not a well-formed JWT.") from exc
    audience = (
        unverified_aud
        if unverified_aud in (settings.bot_app_id, settings.bot_app_id_uri)
        else settings.bot_app_id_uri
    )
    try:
        claims = validate_token(settings, assertion, audience=audience, required_scopes={USER_TOKEN_SCOPE})
    except TokenError as exc:
        code = 500133 if "expired" in exc.description else 50013
        raise OAuthError(
            400, "invalid_grant", code, f"Assertion failed validation: {exc.description}"
        ) from exc
    if path_tenant not in MULTI_TENANT_ALIASES and path_tenant != claims.tenant_id:
        if find_tenant(path_tenant) is None:
            raise OAuthError(400, "invalid_tenant", 90002, f"Tenant '{path_tenant}' not found.")
        raise OAuthError(
            400,
            "invalid_grant",
            50020,
            f"User account '{claims.user.email}' does not exist in tenant '{path_tenant}'.",
        )
    return claims.user


def _basic_credentials(header: str | None) -> tuple[str, str] | None:
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    client_id, sep, secret = decoded.partition(":")
    return (client_id, secret) if sep else None


def _parse_form(body: bytes) -> dict[str, str]:
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True)
    except UnicodeDecodeError as exc:
        raise OAuthError(
            400, "invalid_request", 900144, "The request body is not form-encoded UTF-8."
        ) from exc
    return {k: v[0] for k, v in parsed.items()}


def _oauth_error(request: Request, exc: OAuthError) -> JSONResponse:
    now = dt.datetime.now(dt.UTC)
    timestamp = now.strftime("%Y-%m-%d %H:%M:%SZ")
    trace_id = str(uuid.uuid4())
    correlation_id = request.headers.get("client-request-id") or str(uuid.uuid4())
    description = (
        f"AADSTS{exc.code}: {exc.message} Trace ID: {trace_id} "
        f"Correlation ID: {correlation_id} Timestamp: {timestamp}"
    )
    body = {
        "error": exc.error,
        "error_description": description,
        "error_codes": [exc.code],
        "timestamp": timestamp,
        "trace_id": trace_id,
        "correlation_id": correlation_id,
        "error_uri": f"{request.base_url}error?code={exc.code}",
    }
    headers = {"Cache-Control": "no-store"}
    if exc.status == 401:
        headers["WWW-Authenticate"] = 'Basic realm="sandbox-idp"'
    return JSONResponse(body, status_code=exc.status, headers=headers)
