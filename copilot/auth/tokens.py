"""Delegated tokens through the OAuth 2.0 on-behalf-of flow (azure-identity), per rep.

The broker holds the rep's user assertion (a Teams SSO token, or in local development
a token from the identity provider's password grant) and exchanges it for CRM and
Graph tokens with exactly the scopes a step needs: reads never carry ``crm.write``.
Tokens stay inside this object and the HTTP headers built from it; they are never
put into model messages, graph state, tool arguments or logs.

A broker (and its credential) lives for one rep's sign-in, often one turn; the HTTP
under it lives for the process: every credential sends its token requests through one
``requests`` session (:func:`_token_transport`), so a turn reuses a kept-alive TLS
connection to the identity provider instead of loading the CA bundle and handshaking
again. That session keeps no cookies, and what identifies the rep (the user assertion)
travels in each request's body, so nothing of one rep's exchange reaches another's.
"""

from __future__ import annotations

import asyncio
import functools
import http.cookiejar
import time
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlparse

import httpx
import jwt
import requests
from azure.core.exceptions import AzureError, ClientAuthenticationError
from azure.core.pipeline.transport import RequestsTransport
from azure.identity import OnBehalfOfCredential

from copilot.errors import AuthError, InvalidInput
from copilot.identity import RepIdentity
from copilot.settings import Settings
from copilot.tls import ssl_context


class TokenBroker(Protocol):
    """What tools need: a bearer token for the CRM or Graph, acting as the rep."""

    async def crm_token(self, *, write: bool) -> str: ...

    async def graph_token(self) -> str: ...

    async def token_for(self, scopes: list[str]) -> str:
        """A delegated token for other Graph scopes (the calendar, the directory, mailbox settings)."""
        ...


def identity_from_assertion(assertion: str) -> RepIdentity:
    """Read tenant and object id from a user token the caller already authenticated.

    Callers pass tokens they obtained or validated themselves (the bot validates the
    Teams SSO token; the CLI got it from the identity provider over TLS), so the
    signature is not checked again here.
    """
    try:
        claims: dict[str, Any] = jwt.decode(assertion, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise AuthError(f"the sign-in token is malformed: {exc}") from exc
    if not claims.get("tid") or not claims.get("oid"):
        raise AuthError("the sign-in token has no tenant or object id")
    return RepIdentity(
        tenant_id=str(claims["tid"]),
        aad_object_id=str(claims["oid"]),
        name=str(claims.get("name", "")),
        username=str(claims.get("preferred_username", "")),
        groups=_claim_list(claims, "groups"),
        roles=_claim_list(claims, "roles"),
        territories=_claim_list(claims, "territories"),
    )


def _claim_list(claims: dict[str, Any], name: str) -> tuple[str, ...]:
    """A list claim as strings; absent or malformed = none (access is then not widened)."""
    value = claims.get(name)
    if not isinstance(value, list):
        return ()
    return tuple(str(v) for v in value if isinstance(v, str | int) and str(v).strip())


_CONSENT_MISSING = "AADSTS65001"


def _no_access(message: str) -> bool:
    # AADSTS50105: the user is not assigned to the CRM application (licence revoked);
    # AADSTS65001: consent missing. Both mean "this rep has no CRM access".
    return "AADSTS50105" in message or "AADSTS65001" in message


@functools.cache
def _token_session() -> requests.Session:
    """The process's one session for token requests: pooled connections, no cookies."""
    session = requests.Session()
    session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    return session


@functools.cache
def _token_transport(ca_file: str | None) -> RequestsTransport:
    """The HTTP transport of every on-behalf-of credential trusting ``ca_file`` (None: the
    system's): the shared session, never closed by a credential."""
    kwargs: dict[str, Any] = {}
    if ca_file is not None:
        kwargs["connection_verify"] = ca_file
    return RequestsTransport(session=_token_session(), session_owner=False, **kwargs)


@dataclass
class OboTokenBroker:
    """On-behalf-of exchange with azure-identity's ``OnBehalfOfCredential``, cached per scope set."""

    settings: Settings
    identity: RepIdentity
    user_assertion: str = field(repr=False)
    _credential: OnBehalfOfCredential | None = field(default=None, init=False, repr=False)
    _cache: dict[tuple[str, ...], tuple[str, int]] = field(default_factory=dict, init=False, repr=False)

    def _get_credential(self) -> OnBehalfOfCredential:
        if self._credential is None:
            ca_file = None if self.settings.ca_bundle is None else str(self.settings.ca_bundle)
            self._credential = OnBehalfOfCredential(
                tenant_id=self.identity.tenant_id,
                client_id=self.settings.obo_client_id,
                client_secret=self.settings.obo_client_secret.get_secret_value(),
                user_assertion=self.user_assertion,
                authority=self.settings.entra_authority,
                disable_instance_discovery=True,
                transport=_token_transport(ca_file),
            )
        return self._credential

    async def _token(self, scopes: list[str]) -> str:
        key = tuple(scopes)
        cached = self._cache.get(key)
        loop = asyncio.get_running_loop()
        if cached is not None and cached[1] - 60 > loop.time():
            return cached[0]
        try:
            access = await asyncio.to_thread(self._get_credential().get_token, *scopes)
        except AzureError as exc:
            if not isinstance(exc, ClientAuthenticationError):
                raise AuthError(f"the identity provider is unreachable: {exc.message}") from exc
            message = str(exc.message or exc)
            if _CONSENT_MISSING in message and not any(
                s.startswith(self.settings.crm_resource) for s in scopes
            ):
                # Consent to a Graph scope (e.g. Calendars.Read) is missing: say which one,
                # not "no CRM access", which this is not.
                names = ", ".join(s.rpartition("/")[2] for s in scopes)
                raise AuthError(
                    f"consent missing: you (or your administrator) have not consented to {names} "
                    "for the copilot; grant it and try again",
                    consent_required=list(scopes),
                ) from exc
            if _no_access(message):
                raise AuthError(
                    "You don't have access to the CRM. Ask your CRM administrator to assign you a licence.",
                    no_access=True,
                ) from exc
            raise AuthError(f"could not get a CRM token on your behalf: {message.splitlines()[0]}") from exc
        expires_in = max(0, access.expires_on - int(time.time()))
        self._cache[key] = (access.token, int(loop.time()) + expires_in)
        return access.token

    async def crm_token(self, *, write: bool) -> str:
        """A CRM token with ``crm.read`` (and ``crm.write`` only when ``write``)."""
        return await self._token(self.settings.crm_scopes(write=write))

    async def token_for(self, scopes: list[str]) -> str:
        """A delegated token for other ``scopes`` of one resource (e.g. the document library's
        ``Sites.Read.All`` for knowledge ingestion), cached like the others."""
        return await self._token(scopes)

    async def graph_token(self) -> str:
        """A Graph token for the rep's mailbox (drafts)."""
        return await self._token([f"{self.settings.graph_resource}/Mail.ReadWrite"])


async def dev_sign_in(settings: Settings, username: str) -> str:
    """Local development only: sign a rep in with the identity provider's password grant.

    Returns a Teams-SSO-like user token (audience: the bot) that then goes through the
    same on-behalf-of path as a real Teams SSO token.
    """
    if settings.dev_sign_in_password is None:
        raise AuthError("local sign-in is for local development only (COPILOT_ENVIRONMENT=local)")
    host = urlparse(settings.entra_authority).hostname or ""
    if host not in ("localhost", "127.0.0.1", "::1"):
        # A password sign-in is for the local sandbox only, never a real tenant.
        raise AuthError(f"local sign-in works only against a loopback identity provider, not {host}")
    url = f"{settings.entra_authority}/organizations/oauth2/v2.0/token"
    verify = ssl_context(str(settings.ca_bundle) if settings.ca_bundle is not None else None)
    form = {
        "grant_type": "password",
        "client_id": settings.obo_client_id,
        "username": username,
        "password": settings.dev_sign_in_password.get_secret_value(),
        "scope": f"api://localhost/{settings.obo_client_id}/access_as_user",
    }
    try:
        async with httpx.AsyncClient(verify=verify, timeout=15) as client:
            response = await client.post(url, data=form)
    except httpx.HTTPError as exc:
        raise AuthError(f"the identity provider at {settings.entra_authority} is unreachable: {exc}") from exc
    if response.status_code != 200:
        try:
            description = str(response.json().get("error_description", response.text))
        except ValueError:
            description = response.text
        raise AuthError(f"sign-in as {username!r} failed: {description.splitlines()[0]}")
    token = response.json().get("access_token")
    if not isinstance(token, str):
        raise AuthError("the identity provider answered without an access token")
    return token


_UNKNOWN_USER = "AADSTS50034"
"""Entra's "no such user in the directory" error code."""


async def dev_sign_in_rep(settings: Settings, rep: str) -> tuple[RepIdentity, OboTokenBroker]:
    """The local commands' sign-in (``ask``, ``chat``, ``brief``…): :func:`dev_sign_in`, then
    the rep's identity and token broker; an unknown handle is the caller's bad input."""
    try:
        assertion = await dev_sign_in(settings, rep)
    except AuthError as exc:
        if _UNKNOWN_USER in exc.message:
            raise InvalidInput(
                f"unknown rep {rep[:60]!r}: no such user in the directory "
                "(see `python -m sandbox users` for the handles)"
            ) from exc
        raise
    identity = identity_from_assertion(assertion)
    return identity, OboTokenBroker(settings, identity, assertion)
