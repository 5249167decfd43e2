"""The identity provider's RS256 token signing key and its public JWK set.

The key is generated once, persisted as ``signing-key.pem`` under the data
directory and reused afterwards; its ``kid`` is the RFC 7638 JWK thumbprint.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from sandbox.config import SandboxSettings
from sandbox.identity._files import atomic_write, locked


@dataclass(frozen=True)
class SigningKey:
    """The private signing key, its public half and its key id."""

    private_key: rsa.RSAPrivateKey
    public_key: rsa.RSAPublicKey
    kid: str

    def public_jwk(self) -> dict[str, str]:
        """The public key as a JWK (``kty``, ``use``, ``alg``, ``kid``, ``n``, ``e``)."""
        return {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid, **_rsa_members(self.public_key)}


_cache: dict[str, tuple[int, SigningKey]] = {}
_cache_lock = threading.Lock()


def signing_key(settings: SandboxSettings) -> SigningKey:
    """Load (creating once, race-safely) the persisted RS256 signing key."""
    path = settings.signing_key_path
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        stamp = -1
    cached = _cache.get(str(path))
    if cached is not None and cached[0] == stamp:
        return cached[1]
    with _cache_lock, locked(settings.data_dir, "signing-key"):
        private_key = _read(settings)
        if private_key is None:
            private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            pem = private_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            atomic_write(path, pem, private=True)
        public_key = private_key.public_key()
        key = SigningKey(private_key, public_key, jwk_thumbprint(public_key))
        _cache[str(path)] = (path.stat().st_mtime_ns, key)
        return key


def jwks(settings: SandboxSettings) -> dict[str, Any]:
    """The public JWK set (``{"keys": [...]}``) that verifies this provider's tokens."""
    return {"keys": [signing_key(settings).public_jwk()]}


def jwk_thumbprint(public_key: rsa.RSAPublicKey) -> str:
    """RFC 7638 SHA-256 thumbprint of an RSA public key, base64url without padding."""
    canonical = json.dumps({"kty": "RSA", **_rsa_members(public_key)}, sort_keys=True, separators=(",", ":"))
    return _b64url(hashlib.sha256(canonical.encode("ascii")).digest())


def _read(settings: SandboxSettings) -> rsa.RSAPrivateKey | None:
    try:
        key = serialization.load_pem_private_key(settings.signing_key_path.read_bytes(), password=None)
    except (OSError, ValueError):
        return None
    return key if isinstance(key, rsa.RSAPrivateKey) else None


def _rsa_members(public_key: rsa.RSAPublicKey) -> dict[str, str]:
    numbers = public_key.public_numbers()
    return {"e": _b64url(_int_bytes(numbers.e)), "n": _b64url(_int_bytes(numbers.n))}


def _int_bytes(value: int) -> bytes:
    return value.to_bytes((value.bit_length() + 7) // 8 or 1, "big")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
