"""Who is calling the Dataverse surfaces, and whether they may: token, client app, budget.

* a token must be a delegated user token for the org URL (``SandboxSettings.org_url``)
  with ``user_impersonation`` (Web API) or ``mcp.tools`` (MCP); anything else is 401;
* a user whose CRM access was revoked is 401, as on the sandbox's own MCP server;
* on ``/api/mcp`` the token's client app (``appid``/``azp``) must be an enabled
  ``allowedmcpclient`` row (:class:`~sandbox.dataverse.org.OrgConfig`: from the knob
  ``dataverse_allowed_mcp_clients``, default the product's app, plus what an admin adds) or it is 403;
* every request counts against the caller's service-protection budget (knobs
  ``dataverse_request_budget`` per ``dataverse_window_seconds``); past it, 429.
"""

from __future__ import annotations

from typing import Literal

import anyio

from sandbox.access import crm_access_enabled
from sandbox.config import SandboxSettings
from sandbox.dataverse.errors import UNAUTHORIZED, DataverseError, throttled
from sandbox.dataverse.org import OrgConfig
from sandbox.identity.tokens import TokenClaims, TokenError, bearer_from_header, validate_token
from sandbox.knobs import KnobState

Surface = Literal["webapi", "mcp"]
WEBAPI_SCOPE = "user_impersonation"
MCP_SCOPE = "mcp.tools"


def _challenge(settings: SandboxSettings, error: TokenError) -> dict[str, str]:
    authority = f"{settings.idp_base_url}/common/oauth2/authorize"
    return {
        "WWW-Authenticate": f'Bearer authorization_uri="{authority}", resource_id="{settings.org_url}", '
        f'error="{error.error}"'
    }


async def authenticate(settings: SandboxSettings, authorization: str | None, surface: Surface) -> TokenClaims:
    """The validated token of a Dataverse request (``DataverseError`` 401 otherwise)."""
    try:
        token = bearer_from_header(authorization)
        claims = validate_token(settings, token, audience=settings.org_url)
        needed = WEBAPI_SCOPE if surface == "webapi" else MCP_SCOPE
        if needed not in claims.scopes:
            raise TokenError(401, "invalid_token", f"The token lacks the '{needed}' scope.")
        if not await anyio.to_thread.run_sync(crm_access_enabled, settings.db_path, claims.user):
            raise TokenError(
                401, "invalid_token", "The user is disabled or has no access to this organization."
            )
    except TokenError as exc:
        raise DataverseError(401, UNAUTHORIZED, exc.description, _challenge(settings, exc)) from exc
    return claims


def client_app_id(claims: TokenClaims) -> str | None:
    """The application (client) id a delegated token was issued to (``appid`` v1, ``azp`` v2)."""
    value = claims.claims.get("azp") or claims.claims.get("appid")
    return value if isinstance(value, str) else None


def require_allowed_mcp_client(org: OrgConfig, claims: TokenClaims) -> None:
    """403 unless the token's client app is an enabled ``allowedmcpclient`` of the org."""
    app_id = client_app_id(claims)
    if not org.allowed(app_id):
        raise DataverseError(
            403,
            "",  # Microsoft documents no fault code for this refusal, only the 403
            f"The MCP client with application id '{app_id}' is not enabled for this environment. An"
            " administrator must add it to the allowed MCP clients (allowedmcpclient) first.",
        )


def charge(knobs: KnobState, claims: TokenClaims) -> None:
    """Count one request against the caller's budget; 429 with ``Retry-After`` past it."""
    current = knobs.knobs
    wait = knobs.within_budget(
        f"dataverse:{claims.user.id}", current.dataverse_request_budget, current.dataverse_window_seconds
    )
    if wait is not None:
        assert current.dataverse_request_budget is not None
        raise throttled(current.dataverse_request_budget, current.dataverse_window_seconds, wait)
