"""A rep's stable pseudonym in traces: a keyed HMAC of tenant and Entra object id.

The same rep has the same pseudonym in every process and every trace (so their runs
can be grouped and their feedback read together), yet nobody without the key can tell
who it is or test a guess: traces never carry the raw object id, name or email.
The key is ``COPILOT_TRACE_PSEUDONYM_KEY`` (base64, at least 32 bytes); in local
development, unset, one is generated once into ``<data_dir>/tracing/pseudonym.key``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from copilot.errors import ConfigurationError
from copilot.identity import RepIdentity
from copilot.settings import Settings

SETTING = "COPILOT_TRACE_PSEUDONYM_KEY"
MIN_KEY_BYTES = 32


def local_key_file(settings: Settings) -> Path:
    return settings.data_dir / "tracing" / "pseudonym.key"


def _decode(text: str, source: str) -> bytes:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigurationError(f"{source} is not valid base64") from exc
    if len(key) < MIN_KEY_BYTES:
        raise ConfigurationError(f"{source} has {len(key)} bytes; use at least {MIN_KEY_BYTES}")
    return key


def load_pseudonym_key(settings: Settings) -> bytes:
    """The key: the setting, else (local development only) the generated file."""
    if settings.trace_pseudonym_key is not None and settings.trace_pseudonym_key.get_secret_value().strip():
        return _decode(settings.trace_pseudonym_key.get_secret_value(), SETTING)
    if not settings.local:
        raise ConfigurationError(f"{SETTING} is not set: a deployment with tracing on must configure it")
    path = local_key_file(settings)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return _decode(path.read_text(), str(path))
        with os.fdopen(fd, "w") as handle:
            handle.write(base64.b64encode(secrets.token_bytes(MIN_KEY_BYTES)).decode("ascii"))
        return _decode(path.read_text(), str(path))
    except OSError as exc:
        raise ConfigurationError(f"could not read or create {path}: {exc} (or set {SETTING})") from exc


def rep_pseudonym(key: bytes, identity: RepIdentity) -> str:
    """``rep-`` + the first 128 bits of ``HMAC-SHA256(key, tenant NUL object id)`` as hex."""
    message = f"{identity.tenant_id}\0{identity.aad_object_id}".encode()
    return "rep-" + hmac.new(key, message, hashlib.sha256).hexdigest()[:32]
