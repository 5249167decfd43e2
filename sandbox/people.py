"""Microsoft-Graph-shaped user lookup: ``GET /v1.0/users/{id | userPrincipalName}`` and
``GET /v1.0/users?$filter=displayName eq '…'`` (or ``mail eq '…'``, or Graph's
``startswith(displayName,'…')``).

Callers present a delegated token for ``settings.graph_audience`` with the
``User.ReadBasic.All`` scope and see only the users of their own tenant (the directory a
real tenant's Graph answers from): a user of another tenant is "not found". Answers the
basic profile only (``id`` = the AAD object id, ``displayName``, ``mail``,
``userPrincipalName``, ``userType``), as ``User.ReadBasic.All`` does.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandbox.config import SandboxSettings
from sandbox.directory import USERS, User
from sandbox.identity.tokens import TokenClaims, TokenError, bearer_from_header, validate_token
from sandbox.mailbox import GraphError, graph_error_response

PEOPLE_SCOPE = "User.ReadBasic.All"
_FILTER = re.compile(r"^\s*(displayName|mail|userPrincipalName)\s+eq\s+'((?:[^']|'')*)'\s*$")
_STARTSWITH = re.compile(
    r"^\s*startswith\(\s*(displayName|mail|userPrincipalName)\s*,\s*'((?:[^']|'')*)'\s*\)\s*$"
)


def _profile(user: User) -> dict[str, Any]:
    return {
        "id": user.aad_object_id,
        "displayName": user.name,
        "mail": user.email,
        "userPrincipalName": user.email,
        "userType": "Member",
    }


def _authenticate(settings: SandboxSettings, request: Request) -> TokenClaims:
    try:
        token = bearer_from_header(request.headers.get("authorization"))
        return validate_token(
            settings, token, audience=settings.graph_audience, required_scopes={PEOPLE_SCOPE}
        )
    except TokenError as exc:
        code = "InvalidAuthenticationToken" if exc.status == 401 else "Authorization_RequestDenied"
        raise GraphError(
            exc.status, code, exc.description, {"WWW-Authenticate": exc.www_authenticate()}
        ) from exc


def people_routes(settings: SandboxSettings) -> list[Route]:
    """Starlette routes of the user lookup under ``/v1.0/users``."""

    async def get_user(request: Request) -> Response:
        try:
            caller = _authenticate(settings, request)
            ref = request.path_params["ref"].strip().lower()
            for user in USERS:
                if user.tenant_id == caller.tenant_id and ref in (user.aad_object_id.lower(), user.email):
                    return JSONResponse(_profile(user))
            raise GraphError(404, "Request_ResourceNotFound", f"Resource '{ref}' does not exist.")
        except GraphError as exc:
            return graph_error_response(request, exc)

    async def list_users(request: Request) -> Response:
        try:
            caller = _authenticate(settings, request)
            query = request.query_params.get("$filter", "")
            match = _FILTER.match(query) or _STARTSWITH.match(query)
            if match is None:
                raise GraphError(
                    400,
                    "Request_UnsupportedQuery",
                    "Use $filter=displayName eq '…', mail eq '…' or startswith(displayName,'…').",
                )
            field, value = match.group(1), match.group(2).replace("''", "'").strip().lower()
            prefix = match.re is _STARTSWITH
            found = [
                _profile(u)
                for u in USERS
                if u.tenant_id == caller.tenant_id
                and (
                    (u.name if field == "displayName" else u.email).lower().startswith(value)
                    if prefix
                    else (u.name if field == "displayName" else u.email).lower() == value
                )
            ]
            return JSONResponse({"value": found})
        except GraphError as exc:
            return graph_error_response(request, exc)

    return [
        Route("/v1.0/users", list_users, methods=["GET"]),
        Route("/v1.0/users/{ref}", get_user, methods=["GET"]),
    ]
