"""The audit chain's HMAC keys (invariant 6): configured in deployments, generated locally.

The key never enters the database: whoever can write ``audit_log`` without it cannot
compute a row's HMAC, so a forged, rewritten or re-chained row is found by ``audit
verify``. Keys come from ``COPILOT_AUDIT_HMAC_KEYS`` (in Azure an app setting that is a
Key Vault reference), a comma-separated ``kid:base64key`` list, newest first:

* new rows (and anchors) are chained with the newest key, and record its key id;
* ``verify`` accepts every configured key, looked up by the row's key id, so rotating is
  "prepend a new key"; a retired key stays in the list while rows chained with it exist.

In local development, with the setting unset, one key is generated once into
``<data_dir>/audit/hmac.key`` (mode 0600, the same ``kid:base64key`` format). A deployment
(``COPILOT_ENVIRONMENT=deployed``) refuses to start without the setting.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from copilot.errors import ConfigurationError
from copilot.settings import Settings

logger = logging.getLogger(__name__)

SETTING = "COPILOT_AUDIT_HMAC_KEYS"
KEY_ID_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
MIN_KEY_BYTES = 32
"""HMAC-SHA256 keys shorter than the hash add no strength and suggest a typo."""


@dataclass(frozen=True)
class AuditKey:
    """One HMAC-SHA256 key and the id rows chained with it record."""

    key_id: str
    secret: bytes = field(repr=False)

    def mac(self, message: bytes) -> str:
        """``HMAC-SHA256(secret, message)`` as hex."""
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()

    def matches(self, message: bytes, expected: str) -> bool:
        """Whether ``expected`` is this key's MAC of ``message`` (constant-time compare)."""
        return hmac.compare_digest(self.mac(message), expected)


@dataclass(frozen=True)
class AuditKeyring:
    """The configured keys, newest first; :attr:`current` signs, all of them verify."""

    keys: tuple[AuditKey, ...]
    source: str
    """Where the keys came from (a setting name or a file), for error messages."""

    def __post_init__(self) -> None:
        if not self.keys:
            raise ConfigurationError(f"{self.source} holds no audit key")
        ids = [key.key_id for key in self.keys]
        if len(set(ids)) != len(ids):
            raise ConfigurationError(f"{self.source} names an audit key id twice: {ids}")

    @property
    def current(self) -> AuditKey:
        """The newest key: what new rows and anchors are chained/signed with."""
        return self.keys[0]

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(key.key_id for key in self.keys)

    def get(self, key_id: str) -> AuditKey | None:
        """The key with this id, or ``None`` when it is not configured."""
        for key in self.keys:
            if key.key_id == key_id:
                return key
        return None


def parse_keys(text: str, *, source: str = SETTING) -> AuditKeyring:
    """Parse ``kid:base64key[,kid:base64key...]`` (newest first); raises ConfigurationError."""
    keys: list[AuditKey] = []
    for position, item in enumerate((part.strip() for part in text.split(",")), start=1):
        if not item:
            continue
        key_id, sep, encoded = item.partition(":")
        key_id = key_id.strip()
        if not sep or not KEY_ID_PATTERN.fullmatch(key_id):
            # Never echo the item: it may be a key pasted without its id.
            raise ConfigurationError(
                f"{source} entry {position} is not 'kid:base64key' (kid: 1-64 of A-Z a-z 0-9 . _ -)"
            )
        try:
            secret = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ConfigurationError(f"{source}: the key of {key_id!r} is not valid base64") from exc
        if len(secret) < MIN_KEY_BYTES:
            raise ConfigurationError(
                f"{source}: the key of {key_id!r} has {len(secret)} bytes; use at least {MIN_KEY_BYTES}"
            )
        keys.append(AuditKey(key_id, secret))
    return AuditKeyring(tuple(keys), source)


def generate_key_entry(key_id: str | None = None) -> str:
    """A new ``kid:base64key`` entry (32 random bytes), e.g. for a Key Vault secret."""
    key_id = key_id or f"k{secrets.token_hex(4)}"
    return f"{key_id}:{base64.b64encode(secrets.token_bytes(32)).decode('ascii')}"


def local_key_file(settings: Settings) -> Path:
    """Where local development keeps its generated key."""
    return settings.data_dir / "audit" / "hmac.key"


def load_keyring(settings: Settings) -> AuditKeyring:
    """The keyring for these settings: the setting, else (local only) the generated file."""
    if settings.audit_hmac_keys is not None and settings.audit_hmac_keys.get_secret_value().strip():
        return parse_keys(settings.audit_hmac_keys.get_secret_value())
    if settings.environment == "deployed":
        raise ConfigurationError(
            f"{SETTING} is not set: a deployment must configure the audit log's HMAC key "
            "(in Azure, an app setting that references a Key Vault secret)"
        )
    path = local_key_file(settings)
    try:
        text = _read_or_create(path)
    except OSError as exc:
        raise ConfigurationError(
            f"could not read or create the local audit key {path}: {exc} (or set {SETTING})"
        ) from exc
    return parse_keys(text, source=str(path))


def _read_or_create(path: Path) -> str:
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return _create(path)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        logger.warning("audit key file %s is readable by others (mode %o): chmod 600 it", path, mode)
    return text


def _create(path: Path) -> str:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Write a private temporary file, then link it into place: link() fails if another
    # process got there first, so every process ends up using the one same key.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(generate_key_entry(f"local-{secrets.token_hex(4)}") + "\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, path)
            logger.info("generated the local audit HMAC key in %s", path)
        except FileExistsError:
            pass
    finally:
        temporary.unlink(missing_ok=True)
    return path.read_text(encoding="ascii")
