"""A stand-in for the Bot Framework token service (``token.botframework.com``).

A bot that speaks first (a timer's proactive message) has no incoming activity carrying the
rep's token; it asks the token service for the token the rep left at the bot's OAuth
connection when they signed in, as botbuilder's ``UserTokenClient`` does. This module
speaks that service's wire protocol, as botframework-connector's ``TokenApiClient`` calls it:

* ``GET /api/usertoken/GetToken?userId=&connectionName=&channelId=&code=`` → 200
  ``TokenResponse`` (``channelId``, ``connectionName``, ``token``, ``expiration``), or 404
  when the user has no token for that connection;
* ``POST /api/usertoken/exchange?userId=&connectionName=&channelId=`` with a
  ``TokenExchangeRequest`` (``uri``, ``token``: a Teams SSO token) → 200 ``TokenResponse``
  (and the user is signed in at the connection from then on), 400 ``ErrorResponse`` if the
  token cannot be exchanged;
* ``DELETE /api/usertoken/SignOut?userId=&connectionName=&channelId=`` → 200 (signed out).

Every call must carry the bot's own app token (``Authorization: Bearer``), as the real
service requires: the app-only token the sandbox identity provider issues for the Bot
Connector audience (``_bot_connector_grant``), for the sandbox's bot app. Anything else is 401.

The token handed out is what the OAuth connection of the deployment yields: the rep's SSO
token for the bot's own app (audience the bot's app id, scope ``access_as_user``), signed by
the sandbox identity provider, so the bot exchanges it on-behalf-of like any Teams SSO token.

Users are the channel's user ids: in the sandbox a Teams user id is ``29:`` + the AAD object
id (what the Teams stand-ins in the tests send as ``from.id``). Who has signed in at the
connection is state of this process: every user but :data:`SEEDED_SIGNED_OUT` at start (and
after ``POST /admin/reset``), changed by ``exchange`` / ``SignOut``; the knob
``token_service_signed_out`` (handles) drops users' tokens without touching that state, and
``token_service_refuses_exchange`` (handles) makes ``exchange`` refuse their tokens (400).
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass, field
from typing import Any

import jwt
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandbox.config import SandboxSettings
from sandbox.directory import USERS, User, find_user
from sandbox.identity.keys import signing_key
from sandbox.identity.tokens import (
    LEEWAY_SECONDS,
    TokenError,
    bearer_from_header,
    issue_token,
    validate_token,
)
from sandbox.knobs import KnobState

TEAMS_USER_PREFIX = "29:"
"""A Teams user id in the sandbox: this prefix and the user's AAD object id."""
SEEDED_SIGNED_OUT: frozenset[str] = frozenset({"u-megan"})
"""Users who have never signed in at the token service (they get a sign-in card)."""
USER_TOKEN_SCOPE = "access_as_user"


@dataclass
class Issued:
    """One token the service handed out (its ``uti`` names it; the token itself is not kept)."""

    user: str
    connection_name: str
    channel_id: str
    uti: str
    via: str


@dataclass
class TokenServiceState:
    """Who is signed in at the connection, and what was handed out (thread-safe)."""

    signed_in: set[str] = field(default_factory=set)
    issued: list[Issued] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Back to the seed: every user but :data:`SEEDED_SIGNED_OUT` signed in, nothing issued."""
        with self._lock:
            self.signed_in = {u.id for u in USERS if u.id not in SEEDED_SIGNED_OUT}
            self.issued = []

    def set_signed_in(self, user: User, signed_in: bool) -> None:
        with self._lock:
            (self.signed_in.add if signed_in else self.signed_in.discard)(user.id)

    def is_signed_in(self, user: User) -> bool:
        with self._lock:
            return user.id in self.signed_in

    def record(self, issued: Issued) -> None:
        with self._lock:
            self.issued.append(issued)

    def export(self) -> dict[str, Any]:
        with self._lock:
            handles = sorted(u.handle for u in USERS if u.id in self.signed_in)
            return {"signed_in": handles, "issued": [vars(i).copy() for i in self.issued]}


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": 'Bearer error="invalid_token"'} if self.status == 401 else None
        return JSONResponse(
            {"error": {"code": self.code, "message": self.message}}, status_code=self.status, headers=headers
        )


def authenticate_bot(settings: SandboxSettings, authorization: str | None) -> None:
    """The caller must be the sandbox's bot, with its app-only Bot Framework token."""
    try:
        token = bearer_from_header(authorization)
    except TokenError as exc:
        raise _Refused(401, "Unauthorized", exc.description) from exc
    key = signing_key(settings)
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key.public_key,
            algorithms=["RS256"],
            audience=settings.bot_connector_audience,
            issuer=settings.issuer("botframework.com"),
            leeway=LEEWAY_SECONDS,
            options={"require": ["exp", "nbf", "iss", "aud"]},
        )
    except jwt.PyJWTError as exc:
        raise _Refused(401, "Unauthorized", f"the bot's token is not valid ({type(exc).__name__})") from exc
    if claims.get("appid") != settings.bot_app_id or claims.get("idtyp") != "app":
        raise _Refused(401, "Unauthorized", "the token is not the bot's own app token")


def _query(request: Request, name: str, *, required: bool = True) -> str:
    value = request.query_params.get(name, "")
    if required and not value:
        raise _Refused(400, "BadArgument", f"the query parameter {name!r} is required")
    return value


def _user(settings: SandboxSettings, request: Request) -> tuple[User, str, str]:
    """The user, connection and channel a call is about (400 if unknown)."""
    user_id = _query(request, "userId")
    connection = _query(request, "connectionName")
    channel = _query(request, "channelId", required=False)
    if connection != settings.sso_connection_name:
        raise _Refused(400, "BadArgument", f"the bot has no OAuth connection named {connection!r}")
    user = (
        find_user(user_id.removeprefix(TEAMS_USER_PREFIX)) if user_id.startswith(TEAMS_USER_PREFIX) else None
    )
    if user is None:
        # The real service knows no tokens for a user id it never saw: no token, not an error.
        raise _Refused(404, "NotFound", "no token for this user and connection")
    return user, connection, channel


def _token_response(
    settings: SandboxSettings, state: TokenServiceState, user: User, connection: str, channel: str, via: str
) -> dict[str, Any]:
    token = issue_token(settings, user=user, audience=settings.bot_app_id, scopes=[USER_TOKEN_SCOPE])
    claims = jwt.decode(token, options={"verify_signature": False})
    state.record(Issued(user.handle, connection, channel, str(claims["uti"]), via))
    expiration = dt.datetime.fromtimestamp(int(claims["exp"]), dt.UTC)
    return {
        "channelId": channel,
        "connectionName": connection,
        "token": token,
        "expiration": expiration.isoformat().replace("+00:00", "Z"),
    }


def token_service_routes(
    settings: SandboxSettings, state: TokenServiceState, knobs: KnobState
) -> list[Route]:
    """The token service's routes (``/api/usertoken/...``) and its admin view."""

    def dropped(user: User) -> bool:
        return user.handle in knobs.knobs.token_service_signed_out

    async def get_token(request: Request) -> Response:
        try:
            authenticate_bot(settings, request.headers.get("authorization"))
            user, connection, channel = _user(settings, request)
            if request.query_params.get("code"):
                # No magic-code sign-in is pending in the sandbox: a code never completes one.
                raise _Refused(404, "NotFound", "no sign-in is pending for this code")
            if dropped(user) or not state.is_signed_in(user):
                raise _Refused(404, "NotFound", "no token for this user and connection")
            return JSONResponse(_token_response(settings, state, user, connection, channel, "GetToken"))
        except _Refused as exc:
            return exc.response()

    async def exchange(request: Request) -> Response:
        try:
            authenticate_bot(settings, request.headers.get("authorization"))
            user, connection, channel = _user(settings, request)
            try:
                body = await request.json()
            except ValueError:
                body = None
            sso = body.get("token") if isinstance(body, dict) else None
            if not isinstance(sso, str) or not sso:
                raise _Refused(400, "BadArgument", "the exchange request carries no token")
            # Teams SSO tokens name the Application ID URI; a token for the app id is as good.
            try:
                unverified = jwt.decode(sso, options={"verify_signature": False}).get("aud")
            except jwt.PyJWTError:
                unverified = None
            audience = unverified if unverified == settings.bot_app_id else settings.bot_app_id_uri
            try:
                claims = validate_token(settings, sso, audience=audience, required_scopes={USER_TOKEN_SCOPE})
            except TokenError as exc:
                raise _Refused(
                    400, "ExchangeFailed", f"the token cannot be exchanged: {exc.description}"
                ) from exc
            if claims.user.id != user.id:
                raise _Refused(400, "ExchangeFailed", "the token belongs to another user")
            if user.handle in knobs.knobs.token_service_refuses_exchange:
                raise _Refused(400, "ExchangeFailed", "the connection cannot exchange this user's token")
            state.set_signed_in(user, True)
            return JSONResponse(_token_response(settings, state, user, connection, channel, "exchange"))
        except _Refused as exc:
            return exc.response()

    async def sign_out(request: Request) -> Response:
        try:
            authenticate_bot(settings, request.headers.get("authorization"))
            user, _, _ = _user(settings, request)
        except _Refused as exc:
            if exc.status != 404:
                return exc.response()
            return JSONResponse({})
        state.set_signed_in(user, False)
        return JSONResponse({})

    async def admin_view(_: Request) -> JSONResponse:
        return JSONResponse(state.export())

    return [
        Route("/api/usertoken/GetToken", get_token, methods=["GET"]),
        Route("/api/usertoken/exchange", exchange, methods=["POST"]),
        Route("/api/usertoken/SignOut", sign_out, methods=["DELETE"]),
        Route("/admin/token-service", admin_view, methods=["GET"]),
    ]
