"""Who is talking, and the delegated tokens that act as them.

* Deployed (app credentials configured): Teams SSO. The rep's SSO token (audience: our
  app) arrives in ``signin/tokenExchange``; it is kept encrypted in PostgreSQL per
  (tenant, AAD object id) and exchanged on-behalf-of for CRM / Graph tokens on demand.
* Local development (no app credentials, e.g. the Agents Playground, which has no SSO):
  the Teams user's AAD object id signs in at the sandbox identity provider, and the
  resulting token takes the very same on-behalf-of path.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import jwt
from cryptography.fernet import Fernet, InvalidToken

from bot.conversations import Pool
from copilot.auth.tokens import OboTokenBroker, dev_sign_in, identity_from_assertion
from copilot.errors import AuthError
from copilot.identity import RepIdentity
from copilot.settings import Settings


@dataclass(frozen=True)
class SignedInRep:
    identity: RepIdentity
    broker: OboTokenBroker


class RepTokens(Protocol):
    """Maps a Teams user to a signed-in rep, or None when they must sign in first."""

    async def rep_for(self, tenant_id: str, aad_object_id: str) -> SignedInRep | None: ...


class DevRepTokens:
    """Local development: sign the Teams user in at the sandbox identity provider."""

    def __init__(self, settings: Settings):
        self._settings = settings
        self._cache: dict[str, tuple[SignedInRep, int]] = {}

    async def rep_for(self, tenant_id: str, aad_object_id: str) -> SignedInRep | None:
        cached = self._cache.get(aad_object_id)
        # The sign-in token expires (an hour in the sandbox); on-behalf-of needs a live one.
        if cached is not None and cached[1] - 120 > time.time():
            return cached[0]
        assertion = await dev_sign_in(self._settings, aad_object_id)
        identity = identity_from_assertion(assertion)
        rep = SignedInRep(identity, OboTokenBroker(self._settings, identity, assertion))
        expires = int(jwt.decode(assertion, options={"verify_signature": False}).get("exp", 0))
        self._cache[aad_object_id] = (rep, expires)
        return rep


SIGNED_IN_KEPT = 1024
"""Reps whose signed-in broker a process keeps between turns (least recently used dropped)."""


class SsoRepTokens:
    """Teams SSO: the rep's SSO token, encrypted at rest, exchanged on-behalf-of.

    Every turn reads the rep's stored token (so a new sign-in, or an expired token, counts
    at once), but a rep whose stored token is the one already signed in keeps its broker:
    the on-behalf-of tokens it exchanged stay cached for their lifetime, as MSAL's token
    cache would keep them, instead of a new exchange (two identity-provider round trips)
    every turn. Kept in memory only, by tenant and object id, and reused only while the
    stored ciphertext is byte for byte the same (Fernet ciphertexts differ per encryption,
    so a re-saved token always gets a new broker).
    """

    def __init__(self, settings: Settings, pool: Pool, encryption_key: str):
        self._settings = settings
        self._pool = pool
        self._signed_in: OrderedDict[tuple[str, str], tuple[bytes, SignedInRep]] = OrderedDict()
        try:
            self._fernet = Fernet(encryption_key.encode())
        except ValueError as exc:
            raise AuthError("COPILOT_TOKEN_ENCRYPTION_KEY is not a valid Fernet key") from exc

    async def save(self, assertion: str) -> RepIdentity:
        """Store a rep's SSO token (after a successful exchange)."""
        identity = identity_from_assertion(assertion)
        exp = jwt.decode(assertion, options={"verify_signature": False}).get("exp", 0)
        expires = dt.datetime.fromtimestamp(int(exp), dt.UTC)
        async with self._pool.connection() as conn:
            await conn.execute(
                """
                INSERT INTO user_tokens (tenant_id, aad_object_id, ciphertext, expires_at)
                VALUES (%s, %s, %s, %s)
                ON CONFLICT (tenant_id, aad_object_id)
                DO UPDATE SET ciphertext = EXCLUDED.ciphertext, expires_at = EXCLUDED.expires_at, updated_at = now()
                """,
                (
                    identity.tenant_id,
                    identity.aad_object_id,
                    self._fernet.encrypt(assertion.encode()),
                    expires,
                ),
            )
        return identity

    async def rep_for(self, tenant_id: str, aad_object_id: str) -> SignedInRep | None:
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT ciphertext FROM user_tokens WHERE tenant_id = %s AND aad_object_id = %s AND expires_at > now()",
                (tenant_id, aad_object_id),
            )
            row = await cur.fetchone()
        key = (tenant_id, aad_object_id)
        if row is None:
            self._signed_in.pop(key, None)
            return None
        ciphertext = bytes(row["ciphertext"])
        kept = self._signed_in.get(key)
        if kept is not None and kept[0] == ciphertext:
            self._signed_in.move_to_end(key)
            return kept[1]
        try:
            assertion = self._fernet.decrypt(ciphertext).decode()
        except InvalidToken:
            return None  # key rotated: the rep signs in again
        identity = identity_from_assertion(assertion)
        rep = SignedInRep(identity, OboTokenBroker(self._settings, identity, assertion))
        self._signed_in[key] = (ciphertext, rep)
        while len(self._signed_in) > SIGNED_IN_KEPT:
            self._signed_in.popitem(last=False)
        return rep
