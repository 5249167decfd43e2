"""A stand-in for the Bot Framework channel's token signing, so the bench can post signed
activities to the Functions HTTP trigger: OpenID metadata and JWKS on loopback, RS256 tokens.

botbuilder reads the metadata URL from ``TO_BOT_FROM_CHANNEL_OPENID_METADATA_URL`` and
fetches it with the blocking ``requests`` library, hence a threading HTTP server.
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


@dataclass
class ChannelIssuer:
    """Publishes one signing key endorsed for ``msteams`` and signs channel → bot tokens."""

    app_id: str
    metadata_url: str = ""
    kid: str = field(default_factory=lambda: f"bench-{uuid.uuid4().hex[:8]}")
    _key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048), repr=False
    )

    def _published(self, path: str, base: str) -> dict[str, Any] | None:
        if path == "/v1/.well-known/openidconfiguration":
            return {
                "issuer": CHANNEL_ISSUER,
                "authorization_endpoint": f"{base}/v1/.well-known/authorize",
                "jwks_uri": f"{base}/v1/.well-known/keys",
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            }
        if path == "/v1/.well-known/keys":
            public: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(self._key.public_key()))
            public.update({"kid": self.kid, "use": "sig", "alg": "RS256", "endorsements": ["msteams"]})
            return {"keys": [public]}
        return None

    def authorization(self, service_url: str) -> str:
        """``Bearer <token>`` as the channel sends it for an activity with ``service_url``."""
        now = int(time.time())
        claims = {"serviceurl": service_url, "nbf": now - 60, "exp": now + 3600, "iss": CHANNEL_ISSUER}
        token = jwt.encode(
            {**claims, "aud": self.app_id}, self._key, algorithm="RS256", headers={"kid": self.kid}
        )
        return f"Bearer {token}"


@contextmanager
def running_issuer(app_id: str) -> Iterator[ChannelIssuer]:
    issuer = ChannelIssuer(app_id)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = issuer._published(self.path, issuer.metadata_url.split("/v1/", 1)[0])
            if body is None:
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

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    issuer.metadata_url = f"http://127.0.0.1:{server.server_address[1]}/v1/.well-known/openidconfiguration"
    threading.Thread(target=server.serve_forever, name="bench-channel", daemon=True).start()
    try:
        yield issuer
    finally:
        server.shutdown()
        server.server_close()
