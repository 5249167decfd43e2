"""Issue and validate Entra-ID-v2-shaped access tokens signed by the sandbox key.

Validation trusts only the sandbox's own RS256 key (so ``alg: none`` and HS256
key-confusion tokens fail), checks ``exp``/``nbf``, the exact audience, the
per-tenant issuer and that the user exists in that tenant.
"""

from __future__ import annotations

import base64
import hashlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import jwt

from sandbox.config import SandboxSettings
from sandbox.directory import User, find_tenant, find_user
from sandbox.identity.keys import signing_key

LEEWAY_SECONDS = 30


class TokenError(Exception):
    """A bearer token was refused: ``status`` 401 (``invalid_token``) or 403 (``insufficient_scope``)."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(f"{error}: {description}")
        self.status = status
        self.error = error
        self.description = description

    def www_authenticate(self) -> str:
        """The RFC 6750 ``WWW-Authenticate`` header value for this error."""
        description = self.description.replace("\\", "\\\\").replace('"', '\\"')
        return f'Bearer error="{self.error}", error_description="{description}"'


@dataclass(frozen=True)
class TokenClaims:
    """A validated token: who it speaks for, in which tenant, with which scopes."""

    user: User
    tenant_id: str
    scopes: frozenset[str]
    claims: dict[str, Any] = field(hash=False, compare=False)


def subject_for(user: User) -> str:
    """The stable ``sub`` claim of a user (same for every audience, like an OBO chain keeps it)."""
    digest = hashlib.sha256(f"sandbox-sub:{user.tenant_id}:{user.aad_object_id}".encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")[:43]


def issue_token(
    settings: SandboxSettings,
    *,
    user: User,
    audience: str,
    scopes: list[str],
    lifetime: int | None = None,
    extra_claims: dict[str, Any] | None = None,
) -> str:
    """Sign an Entra-v2-shaped delegated access token for ``user`` (``scp`` = ``scopes``).

    ``lifetime`` defaults to ``settings.token_lifetime_seconds``; a negative lifetime
    yields an already expired token (useful in tests). ``extra_claims`` override or
    extend the standard claims.
    """
    key = signing_key(settings)
    now = int(time.time())
    ttl = settings.token_lifetime_seconds if lifetime is None else lifetime
    claims: dict[str, Any] = {
        "aud": audience,
        "iss": settings.issuer(user.tenant_id),
        "iat": min(now, now + ttl),
        "nbf": min(now, now + ttl),
        "exp": now + ttl,
        "ver": "2.0",
        "tid": user.tenant_id,
        "oid": user.aad_object_id,
        "sub": subject_for(user),
        "name": user.name,
        "preferred_username": user.email,
        "scp": " ".join(scopes),
        "azp": settings.bot_app_id,
        "appid": settings.bot_app_id,
        "azpacr": "1",
        "uti": uuid.uuid4().hex,
        # Entra's app-role and group claims, and a territory claim (an optional claim a
        # tenant can map): what the copilot's knowledge search matches access lists on.
        "roles": [user.role],
        "groups": ["sales"]
        + (["sales-managers"] if user.role == "manager" else [])
        + ([f"sales-{user.territory.lower()}"] if user.territory else []),
        "territories": [user.territory] if user.territory else [],
    }
    claims.update(extra_claims or {})
    return jwt.encode(claims, key.private_key, algorithm="RS256", headers={"kid": key.kid, "typ": "JWT"})


def bearer_from_header(value: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header; 401 ``TokenError`` otherwise."""
    if not value or not value.strip():
        raise TokenError(401, "invalid_token", "No bearer token: send 'Authorization: Bearer <token>'.")
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise TokenError(401, "invalid_token", "The Authorization header is not 'Bearer <token>'.")
    return token


def validate_token(
    settings: SandboxSettings,
    token: str,
    *,
    audience: str,
    required_scopes: set[str] | frozenset[str] = frozenset(),
) -> TokenClaims:
    """Verify a sandbox access token for ``audience`` and return who it speaks for.

    Raises ``TokenError`` 401 ``invalid_token`` when the token is missing, malformed,
    expired, not yet valid, badly signed, for another audience or issuer, or names
    an unknown user; 403 ``insufficient_scope`` when a required scope is missing.
    """
    if not isinstance(token, str) or not token.strip():
        raise _invalid("No token.")
    key = signing_key(settings)
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key.public_key,
            algorithms=["RS256"],
            audience=audience,
            leeway=LEEWAY_SECONDS,
            options={"require": ["exp", "nbf", "iat", "iss", "aud", "tid", "oid", "sub"]},
        )
    except jwt.ExpiredSignatureError as exc:
        raise _invalid("The token has expired.") from exc
    except jwt.ImmatureSignatureError as exc:
        raise _invalid("The token is not valid yet.") from exc
    except jwt.InvalidAudienceError as exc:
        raise _invalid(f"The token is not for this audience (expected '{audience}').") from exc
    except jwt.InvalidSignatureError as exc:
        raise _invalid("The token signature is invalid.") from exc
    except jwt.InvalidAlgorithmError as exc:
        raise _invalid("The token algorithm is not allowed (RS256 only).") from exc
    except jwt.MissingRequiredClaimError as exc:
        raise _invalid(f"The token lacks the '{exc.claim}' claim.") from exc
    except jwt.InvalidTokenError as exc:
        raise _invalid(f"The token is malformed ({type(exc).__name__}).") from exc

    if claims.get("aud") != audience:  # a list audience would pass PyJWT's membership check
        raise _invalid(f"The token is not for this audience (expected '{audience}').")
    tenant_id = claims.get("tid")
    if not isinstance(tenant_id, str) or find_tenant(tenant_id) is None:
        raise _invalid("The token names an unknown tenant.")
    if claims.get("iss") != settings.issuer(tenant_id):
        raise _invalid("The token issuer is not trusted.")
    oid = claims.get("oid")
    user = find_user(oid) if isinstance(oid, str) else None
    if user is None or user.aad_object_id != oid or user.tenant_id != tenant_id:
        raise _invalid("The token names an unknown user.")
    if claims.get("sub") != subject_for(user):
        raise _invalid("The token subject does not match its user.")

    scp = claims.get("scp", "")
    scopes = frozenset(scp.split()) if isinstance(scp, str) else frozenset()
    missing = set(required_scopes) - scopes
    if missing:
        raise TokenError(
            403, "insufficient_scope", f"The token lacks the required scope(s): {' '.join(sorted(missing))}."
        )
    return TokenClaims(user=user, tenant_id=tenant_id, scopes=scopes, claims=claims)


def _invalid(description: str) -> TokenError:
    return TokenError(401, "invalid_token", description)
