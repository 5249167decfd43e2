"""``infra/vault_secrets.py`` makes values the code accepts, and rotation keeps what verify needs.

The Azure CLI calls (``az keyvault secret show/set``) cannot run here (no Azure); what is
tested is every value the script would write.
"""

from __future__ import annotations

import json
import subprocess
import sys
from base64 import b64decode

from cryptography.fernet import Fernet

from copilot.persistence.audit_keys import parse_keys
from tests.infra.bicep import ROOT
from tests.infra.test_template_code_consistency import load_vault_secrets


def test_printed_values_are_accepted_by_the_code_that_reads_them():
    done = subprocess.run(
        [sys.executable, "infra/vault_secrets.py", "--print"],
        cwd=ROOT, capture_output=True, text=True, check=True, env={"PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    values = json.loads(done.stdout)
    assert set(values) == set(load_vault_secrets().GENERATED)
    assert len(parse_keys(values["audit-hmac-keys"]).keys) == 1
    Fernet(values["token-encryption-key"].encode())
    assert len(b64decode(values["trace-pseudonym-key"], validate=True)) >= 32


def test_rotating_the_audit_key_puts_a_new_key_first_and_keeps_the_old_ones():
    script = load_vault_secrets()
    first = script.new_audit_keys(None)
    rotated = script.new_audit_keys(first)
    ring = parse_keys(rotated)
    old = parse_keys(first)
    assert ring.key_ids[1:] == old.key_ids
    assert ring.current.key_id not in old.key_ids


def test_the_script_refuses_to_run_without_a_vault():
    done = subprocess.run(
        [sys.executable, "infra/vault_secrets.py"],
        cwd=ROOT, capture_output=True, text=True, check=False, env={"PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 2
    assert "--vault" in done.stderr
