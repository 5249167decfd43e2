"""The Key Vault secrets a deployment generates itself (``make infra-secrets`` / rotation).

The template (``infra/modules/keyvault.bicep``) creates the vault and the app settings that
reference these secrets; their values are made here, on the admin's machine, and written
with the Azure CLI straight into the vault (through a 0600 temporary file, never a command
line argument). Each value is produced by the code that later reads it, so its format is the
one the Function App accepts:

* ``audit-hmac-keys``: ``COPILOT_AUDIT_HMAC_KEYS``, ``kid:base64key`` newest first
  (``copilot.persistence.audit_keys``). Rotating prepends a new key and keeps the old ones,
  so rows chained with them still verify.
* ``token-encryption-key``: ``COPILOT_TOKEN_ENCRYPTION_KEY``, a Fernet key
  (``bot.rep_tokens``). Rotating replaces it: cached delegated tokens stop decrypting and
  each rep signs in again on the next message.
* ``trace-pseudonym-key``: ``COPILOT_TRACE_PSEUDONYM_KEY``, base64 of 32 random bytes
  (``copilot.tracing.pseudonym``). Rotating replaces it: a rep's pseudonym in traces changes.

``python infra/vault_secrets.py --vault NAME`` writes each secret that is missing (an existing one
is never overwritten); ``--rotate SECRET`` rotates one; ``--print`` prints fresh values as
JSON without touching Azure (tests).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence

from cryptography.fernet import Fernet

from copilot.persistence.audit_keys import generate_key_entry

AUDIT_HMAC_KEYS = "audit-hmac-keys"
TOKEN_ENCRYPTION_KEY = "token-encryption-key"
TRACE_PSEUDONYM_KEY = "trace-pseudonym-key"


def new_audit_keys(previous: str | None = None) -> str:
    """A fresh audit key (id ``kYYYYMMDD-<random>``) in front of ``previous`` (kept for verify)."""
    entry = generate_key_entry(f"k{dt.datetime.now(dt.UTC):%Y%m%d}-{secrets.token_hex(4)}")
    return f"{entry},{previous.strip()}" if previous and previous.strip() else entry


def new_token_key(previous: str | None = None) -> str:
    """A fresh Fernet key (the previous one is dropped: reps sign in again)."""
    return Fernet.generate_key().decode("ascii")


def new_pseudonym_key(previous: str | None = None) -> str:
    """Base64 of 32 random bytes (the previous one is dropped)."""
    return base64.b64encode(secrets.token_bytes(32)).decode("ascii")


GENERATED: dict[str, Callable[[str | None], str]] = {
    AUDIT_HMAC_KEYS: new_audit_keys,
    TOKEN_ENCRYPTION_KEY: new_token_key,
    TRACE_PSEUDONYM_KEY: new_pseudonym_key,
}
"""Every secret this script makes, by its Key Vault name."""


def _az(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["az", *args], capture_output=True, text=True, check=False)


def _current(vault: str, name: str) -> str | None:
    shown = _az(
        "keyvault", "secret", "show", "--vault-name", vault, "--name", name, "--query", "value", "-o", "tsv"
    )
    return shown.stdout.strip() if shown.returncode == 0 else None


def _write(vault: str, name: str, value: str) -> None:
    fd, path = tempfile.mkstemp(prefix="secret-")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(value)
        done = _az(
            "keyvault", "secret", "set", "--vault-name", vault, "--name", name,
            "--file", path, "--encoding", "utf-8", "--output", "none",
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"error: az keyvault secret set {name}: {done.stderr.strip()}")
    finally:
        os.unlink(path)


def main(argv: Sequence[str] | None = None) -> int:
    """Write missing secrets, rotate one, or print fresh values; 0 on success, 2 on bad input."""
    parser = argparse.ArgumentParser(
        prog="python infra/vault_secrets.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--vault", help="the deployment's Key Vault (output keyVaultName)")
    parser.add_argument("--rotate", choices=sorted(GENERATED), help="rotate this secret")
    parser.add_argument("--print", action="store_true", help="print fresh values as JSON; touch nothing")
    args = parser.parse_args(argv)
    if args.print:
        print(json.dumps({name: make(None) for name, make in GENERATED.items()}, indent=2))
        return 0
    if not args.vault:
        print("error: --vault NAME is required (the deployment's keyVaultName output)", file=sys.stderr)
        return 2
    if args.rotate:
        _write(args.vault, args.rotate, GENERATED[args.rotate](_current(args.vault, args.rotate)))
        print(f"rotated {args.rotate} in {args.vault}")
        return 0
    for name, make in GENERATED.items():
        if _current(args.vault, name) is not None:
            print(f"kept {name} (already set)")
            continue
        _write(args.vault, name, make(None))
        print(f"set {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
