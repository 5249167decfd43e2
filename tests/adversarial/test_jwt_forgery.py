"""Forged Bot Framework channel tokens, against both HTTP hosts: none accepted, none a 500.

Each class of forgery is tried once per host in CI and ``count(1, 20)`` times under
``make soak``, every repetition with fresh random variations (claims, key ids, where a
token is cut, which issuer it pretends to come from, ...). A trial passes only if the
host answers 401 with ``WWW-Authenticate: Bearer error="invalid_token"``, quickly, runs
no turn, queues nothing, sends nothing, and looks up or connects to nothing beyond this
machine (botbuilder's emulator and skill paths would fetch Microsoft's public signing
keys). A valid token is tried too, and must be accepted: the harness can see an
acceptance when there is one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from copilot.settings import Settings
from tests.adversarial.counts import Tally, count
from tests.integration.test_bot_dev_server import (
    DevServerHost,
    OutboundWatch,
    deployed_bot_settings,
    dev_server,
)
from tests.integration.test_function_app import FunctionAppHost, Teams, deployed_function_app
from tests.support.azurite import Azurite, run_azurite
from tests.support.channel_tokens import CHANNEL_ISSUER, ChannelTokens
from tests.support.fake_connector import FakeConnector
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

HttpHost = DevServerHost | FunctionAppHost

EMULATOR_ISSUERS = [
    "https://sts.windows.net/d6d49420-f39b-4df7-a1dc-d59a935871db/",
    "https://login.microsoftonline.com/d6d49420-f39b-4df7-a1dc-d59a935871db/v2.0",
    "https://sts.windows.net/f8cdef31-a31e-4b4a-93e4-5f571e91255a/",
]
OTHER_KEYS = [rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2)]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def compact(header: dict[str, Any], payload: Any, signature: Callable[[bytes], bytes] | bytes = b"") -> str:
    """A JWT assembled by hand (any header, any payload, any signature)."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    sig = signature(signing_input.encode()) if callable(signature) else signature
    return f"{signing_input}.{b64(sig)}"


@dataclass
class Forge:
    """What a forger has: the public metadata, tokens seen on the wire, a source of variation."""

    tokens: ChannelTokens
    service_url: str
    rng: random.Random

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "serviceurl": self.service_url,
            "nbf": now - 60,
            "exp": now + 3600,
            "iss": CHANNEL_ISSUER,
            "aud": self.tokens.app_id,
        }
        if self.rng.random() < 0.5:
            claims[f"x-{self.rng.randrange(1000)}"] = uuid.uuid4().hex  # noise a forger may add
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}  # None: the claim is left out

    def valid(self, **overrides: Any) -> str:
        return jwt.encode(
            self.claims(**overrides), self.tokens._key, algorithm="RS256", headers={"kid": self.tokens.kid}
        )

    def public_pem(self) -> bytes:
        public = RSAAlgorithm.from_jwk(json.dumps(self.tokens.jwks()["keys"][0]))
        assert isinstance(public, rsa.RSAPublicKey)
        return public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def pick(self, *options: Any) -> Any:
        return self.rng.choice(options)


@dataclass
class Forgery:
    authorization: list[str]
    activity_fields: dict[str, Any]


def bearer(token: str) -> list[str]:
    return [f"Bearer {token}"]


def alg_none(f: Forge) -> Forgery:
    header = {"alg": f.pick("none", "None", "NONE"), "kid": f.tokens.kid, "typ": "JWT"}
    return Forgery(bearer(compact(header, f.claims(), f.pick(b"", b"\x00", b"sig"))), {})


def hs256_with_the_public_key(f: Forge) -> Forgery:
    pem = f.public_pem()
    alg = f.pick("HS256", "HS384", "HS512")
    digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
    token = compact(
        {"alg": alg, "kid": f.tokens.kid, "typ": "JWT"},
        f.claims(),
        lambda m: hmac.new(pem, m, digest).digest(),
    )
    return Forgery(bearer(token), {})


def wrong_issuer(f: Forge) -> Forgery:
    issuer = f.pick(
        "https://evil.example",
        CHANNEL_ISSUER + "/",
        CHANNEL_ISSUER.upper(),
        "https://api.botframework.com.evil.example",
        *EMULATOR_ISSUERS,  # botbuilder's emulator path: Microsoft's public keys
    )
    return Forgery(bearer(f.valid(iss=issuer)), {})


def wrong_audience(f: Forge) -> Forgery:
    audience = f.pick(
        str(uuid.uuid4()),
        CHANNEL_ISSUER,
        [f.tokens.app_id, str(uuid.uuid4())],
        f"api://{f.tokens.app_id}",
        f.tokens.app_id + "0",
        "",
    )
    return Forgery(bearer(f.valid(aud=audience)), {})


def expired(f: Forge) -> Forgery:
    ago = f.rng.randrange(301 + 60, 86400 * 30)  # beyond botbuilder's five minutes of tolerance
    now = int(time.time())
    return Forgery(bearer(f.valid(exp=now - ago, nbf=now - ago - 3600)), {})


def not_yet_valid(f: Forge) -> Forgery:
    ahead = f.rng.randrange(301 + 60, 86400 * 30)
    now = int(time.time())
    return Forgery(bearer(f.valid(nbf=now + ahead, exp=now + ahead + 3600)), {})


def unknown_key_id(f: Forge) -> Forgery:
    kid = f.pick(f"unpublished-{f.rng.randrange(10**6)}", f.tokens.kid + "x", f.tokens.kid.upper(), "../keys")
    token = jwt.encode(f.claims(), f.pick(*OTHER_KEYS), algorithm="RS256", headers={"kid": kid})
    return Forgery(bearer(token), {})


def known_key_id_other_key(f: Forge) -> Forgery:
    headers: dict[str, Any] = {"kid": f.tokens.kid}
    if f.rng.random() < 0.5:  # pointing at the forger's own keys: botbuilder must not follow
        headers["jku"] = "https://evil.example/keys"
    token = jwt.encode(f.claims(), f.pick(*OTHER_KEYS), algorithm="RS256", headers=headers)
    return Forgery(bearer(token), {})


def missing_or_mismatched_serviceurl(f: Forge) -> Forgery:
    claim = f.pick(
        None,
        "",
        "https://smba.evil.example/amer/",
        f.service_url.rstrip("/"),
        f.service_url + "extra/",
        f.service_url.upper(),
    )
    return Forgery(bearer(f.valid(serviceurl=claim)), {})


def tampered_payload(f: Forge) -> Forgery:
    head, _, signature = f.valid().split(".")
    change = f.pick(
        {"aud": str(uuid.uuid4())},
        {"serviceurl": "https://smba.evil.example/"},
        {"exp": int(time.time()) + 10**7},
        {"x-admin": True},
    )
    payload = {**f.claims(), **change}
    return Forgery([f"Bearer {head}.{b64(json.dumps(payload).encode())}.{signature}"], {})


def wrong_scheme_or_empty(f: Forge) -> Forgery:
    token = f.valid()
    return Forgery(
        [
            f.pick(
                "Bearer ",
                "Bearer",
                "Bearer  ",
                "Bearer\t" + token,
                "Basic " + base64.b64encode(b"user:pass").decode(),
                "Token " + token,
                "JWT " + token,
                token,
                "Bearer " + token + " extra",
                "Bearer  " + token,
            )
        ],
        {},
    )


def truncated(f: Forge) -> Forgery:
    token = f.valid()
    cut = f.pick(
        token[: f.rng.randrange(1, len(token) - 1)],
        token.rsplit(".", 1)[0],
        token.rsplit(".", 1)[0] + ".",
        token[: -f.rng.randrange(1, 40)],
    )
    return Forgery(bearer(cut), {})


def lowercase_bearer(f: Forge) -> Forgery:
    return Forgery([f"{f.pick('bearer', 'BEARER', 'BeArEr')} {f.valid()}"], {})


def duplicate_authorization_headers(f: Forge) -> Forgery:
    valid = f"Bearer {f.valid()}"
    other = f.pick("Bearer not-a-jwt", f"Bearer {f.valid(aud=str(uuid.uuid4()))}", valid)
    pair = [valid, other] if f.rng.random() < 0.5 else [other, valid]
    return Forgery(pair, {})


def skill_token(f: Forge) -> Forgery:
    # Signed by the channel's own key, but shaped as a skill call (botbuilder's skill path).
    return Forgery(
        bearer(f.valid(ver=f.pick("1.0", "2.0"), appid=str(uuid.uuid4()), azp=str(uuid.uuid4()))), {}
    )


def key_not_endorsed_for_the_channel(f: Forge) -> Forgery:
    channel = f.pick("webchat", "emulator", "directline", "slack", "MSTEAMS")
    return Forgery(bearer(f.valid()), {"channelId": channel})


def other_signing_algorithm(f: Forge) -> Forgery:
    alg = f.pick("RS384", "RS512", "PS256")
    return Forgery(
        bearer(jwt.encode(f.claims(), f.tokens._key, algorithm=alg, headers={"kid": f.tokens.kid})), {}
    )


def malformed_header_or_payload(f: Forge) -> Forgery:
    header: Any = f.pick(
        {"alg": "RS256", "kid": 7},
        {"alg": "RS256"},
        {"alg": "RS256", "kid": ""},
        {"alg": "RS256", "kid": [f.tokens.kid]},
        [],
        "RS256",
    )
    payload: Any = f.pick(f.claims(), [f.claims()], "claims", None)
    return Forgery(bearer(compact(header, payload, b"x" * 256)), {})


def oversized_token(f: Forge) -> Forgery:
    # Large, yet under the dev server's 8 KiB header line limit, so the bot itself answers.
    claims = f.claims(padding="x" * f.rng.randrange(2_000, 5_500))
    token = jwt.encode(claims, f.pick(*OTHER_KEYS), algorithm="RS256", headers={"kid": f.tokens.kid})
    return Forgery(bearer(token), {})


FORGERIES: list[Callable[[Forge], Forgery]] = [
    alg_none,
    hs256_with_the_public_key,
    wrong_issuer,
    wrong_audience,
    expired,
    not_yet_valid,
    unknown_key_id,
    known_key_id_other_key,
    missing_or_mismatched_serviceurl,
    tampered_payload,
    wrong_scheme_or_empty,
    truncated,
    lowercase_bearer,
    duplicate_authorization_headers,
    skill_token,
    key_not_endorsed_for_the_channel,
    other_signing_algorithm,
    malformed_header_or_payload,
    oversized_token,
]


# --- the hosts ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def azurite() -> Iterator[Azurite]:
    with run_azurite() as running:
        yield running


@pytest.fixture
async def connector() -> AsyncIterator[FakeConnector]:
    fake = FakeConnector()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture(params=["dev-server", "function-app"])
async def host(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    copilot_settings: Settings,
    sandbox: SandboxProcess,
    azurite: Azurite,
    channel: ChannelTokens,
    connector: FakeConnector,
) -> AsyncIterator[HttpHost]:
    """Each HTTP host, deployed (app credentials), trusting the test's channel signing key."""
    if request.param == "dev-server":
        async with dev_server(copilot_settings, deployed_bot_settings(sandbox, channel), channel) as dev:
            dev.record_turns(run=False)
            yield dev
    else:
        async with deployed_function_app(monkeypatch, copilot_settings, sandbox, azurite, channel) as queue:
            functions = FunctionAppHost(Teams(connector, channel), queue)
            await functions.record_turns(run=False)
            yield functions


def _activity(host: HttpHost, rng: random.Random, **fields: Any) -> dict[str, Any]:
    text = rng.choice(["summarise Acme", "my pipeline", "log a call with Acme", "help"])
    activity = host.teams.activity(text=text)
    return {**activity, **fields}


# --- the suite -----------------------------------------------------------------------------------------------


async def test_forged_channel_tokens_are_never_accepted_and_never_a_500(host: HttpHost):
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    repeats = count(1, 20)
    tally = Tally(f"jwt-forgery ({host.name}, {len(FORGERIES)} classes x {repeats}, seed {seed})")
    forge = Forge(host.tokens, host.teams.connector.url, rng)

    # The control: a genuine token is accepted, so an acceptance below would be seen.
    control = json.dumps(_activity(host, rng)).encode()
    accepted = await host.post(control, [host.sign(control)])
    assert accepted.status in (200, 202), accepted.body
    assert host.effects(), "the genuine activity had an effect"
    host.turns.clear()
    if isinstance(host, FunctionAppHost):
        for queued_message in host.queue.receive_messages():
            host.queue.delete_message(queued_message)
    assert host.effects() == []

    with OutboundWatch() as watch:
        for forgery_class in FORGERIES:
            for _ in range(repeats):
                forgery = forgery_class(forge)
                raw = json.dumps(_activity(host, rng, **forgery.activity_fields)).encode()
                effects, contacted = len(host.effects()), len(watch.beyond_loopback())
                posted = await host.post(raw, forgery.authorization)
                new_effects, new_contacts = host.effects()[effects:], watch.beyond_loopback()[contacted:]
                refused = posted.status == 401 and "invalid_token" in posted.headers.get(
                    "www-authenticate", ""
                )
                tally.record(
                    refused and posted.seconds < 5 and not new_effects and not new_contacts,
                    f"{forgery_class.__name__} ({forgery.authorization[0][:60]!r}...): {posted.status} "
                    f"{posted.body[:80]!r} in {posted.seconds:.1f}s, effects {new_effects}, contacted {new_contacts}",
                )
    tally.assert_clean()
