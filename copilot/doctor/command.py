"""``python -m copilot doctor [--json] [--crm-token-env NAME]``: run the checks, print, exit 1 on a failure."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from copilot.doctor.framework import Check, CheckResult, DoctorContext, progress_line, run_checks

DEFAULT_CRM_TOKEN_ENV = "COPILOT_DOCTOR_CRM_TOKEN"
"""Where ``crm.tools`` finds a delegated CRM token by default (a variable, never an argument:
arguments show in process lists)."""


async def main(checks: Sequence[Check], *, as_json: bool, crm_token_env: str = DEFAULT_CRM_TOKEN_ENV) -> int:
    """Run ``checks`` against this process's settings; one line per check as it runs (stderr with
    ``--json``, whose report goes to stdout); 1 if any failed, else 0."""
    out = sys.stderr if as_json else sys.stdout

    def progress(result: CheckResult) -> None:
        print(progress_line(result), file=out, flush=True)

    environ = dict(os.environ)
    ctx = DoctorContext(environ=environ, crm_token=environ.get(crm_token_env) or None)
    report = await run_checks(checks, ctx, progress)
    if as_json:
        print(report.model_dump_json())
    else:
        failed = len(report.failures)
        skipped = sum(1 for c in report.checks if c.status == "skip")
        passed = len(report.checks) - failed - skipped
        print(f"doctor: {passed} passed, {failed} failed, {skipped} skipped")
    return 0 if report.ok else 1
