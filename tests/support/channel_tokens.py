"""A stand-in for the Bot Framework channel's token signing: OpenID metadata, JWKS, tokens.

Teams (through the Bot Framework channel service) calls the bot with
``Authorization: Bearer <JWT>`` issued by ``https://api.botframework.com``, audience the
bot's app id, with a ``serviceurl`` claim, signed by a key published at
``https://login.botframework.com/v1/.well-known/openidconfiguration``. botbuilder reads
that metadata URL from ``TO_BOT_FROM_CHANNEL_OPENID_METADATA_URL``, so tests point it at
this server and sign with its own RSA key. The key carries ``"endorsements":
["msteams"]``: botbuilder accepts it only for activities whose ``channelId`` is endorsed.

The server is a plain threading ``http.server`` on purpose: botbuilder fetches the
metadata with the blocking ``requests`` library from inside the event loop, so an
asyncio server on that same loop would never answer.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

CHANNEL_ISSUER = "https://api.botframework.com"


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class ChannelTokens:
    """Publishes one endorsed signing key and signs channel → bot tokens with it."""

    app_id: str
    endorsements: list[str] = field(default_factory=lambda: ["msteams"])
    kid: str = field(default_factory=lambda: f"test-{uuid.uuid4().hex[:8]}")
    metadata_url: str = ""
    _key: rsa.RSAPrivateKey = field(default_factory=_new_key, repr=False)
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)

    # --- what the server publishes ------------------------------------------------------------

    def jwks(self) -> dict[str, Any]:
        public: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(self._key.public_key()))
        public.update({"kid": self.kid, "use": "sig", "alg": "RS256", "endorsements": self.endorsements})
        return {"keys": [public]}

    def metadata(self, base_url: str) -> dict[str, Any]:
        return {
            "issuer": CHANNEL_ISSUER,
            "authorization_endpoint": f"{base_url}/v1/.well-known/authorize",
            "jwks_uri": f"{base_url}/v1/.well-known/keys",
            "id_token_signing_alg_values_supported": ["RS256"],
            "token_endpoint_auth_methods_supported": ["private_key_jwt"],
        }

    # --- tokens -----------------------------------------------------------------------------------

    def token(
        self,
        service_url: str,
        *,
        audience: str | None = None,
        issuer: str = CHANNEL_ISSUER,
        lifetime: int = 3600,
        issued_ago: int = 60,
        key: rsa.RSAPrivateKey | None = None,
        kid: str | None = None,
        **claims: Any,
    ) -> str:
        """A channel token as Teams sends it; every parameter can be bent to make a bad one."""
        now = int(time.time())
        payload: dict[str, Any] = {
            "serviceurl": service_url,
            "nbf": now - issued_ago,
            "exp": now - issued_ago + lifetime,
            "iss": issuer,
            "aud": self.app_id if audience is None else audience,
            **claims,
        }
        return jwt.encode(
            payload,
            key or self._key,
            algorithm="RS256",
            headers={"kid": kid or self.kid, "typ": "JWT"},
        )

    def header(self, service_url: str, **kwargs: Any) -> str:
        """``Bearer <token>`` for the Authorization header."""
        return f"Bearer {self.token(service_url, **kwargs)}"

    def expired(self, service_url: str) -> str:
        """Expired an hour ago (well beyond botbuilder's five minutes of clock tolerance)."""
        return self.header(service_url, issued_ago=7200, lifetime=3600)

    def wrong_audience(self, service_url: str) -> str:
        return self.header(service_url, audience="99999999-8888-4777-8666-555555555555")

    def wrong_issuer(self, service_url: str) -> str:
        return self.header(service_url, issuer="https://evil.example")

    def signed_by_another_key(self, service_url: str) -> str:
        """Same key id, different key: the signature does not verify."""
        return self.header(service_url, key=_new_key())

    def unknown_key(self, service_url: str) -> str:
        """Signed by a key the metadata does not publish."""
        return self.header(service_url, key=_new_key(), kid="unpublished-key")

    def service_url_mismatch(self, service_url: str) -> str:
        """A valid token minted for another service URL than the activity's."""
        return self.header("https://smba.evil.example/amer/")

    # --- server --------------------------------------------------------------------------------------

    def start(self) -> None:
        tokens = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                base = f"http://127.0.0.1:{self.server.server_port}"  # type: ignore[attr-defined]
                if self.path == "/v1/.well-known/openidconfiguration":
                    body = tokens.metadata(base)
                elif self.path == "/v1/.well-known/keys":
                    body = tokens.jwks()
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        port = self._server.server_address[1]
        self.metadata_url = f"http://127.0.0.1:{port}/v1/.well-known/openidconfiguration"
        threading.Thread(target=self._server.serve_forever, name="channel-tokens", daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@contextmanager
def channel_tokens(app_id: str, endorsements: list[str] | None = None) -> Iterator[ChannelTokens]:
    """A running metadata + JWKS server for ``app_id`` (endorsed for ``msteams`` by default)."""
    tokens = ChannelTokens(app_id, endorsements=endorsements or ["msteams"])
    tokens.start()
    try:
        yield tokens
    finally:
        tokens.stop()
