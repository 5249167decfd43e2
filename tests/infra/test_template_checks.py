"""The template parses (pycep) and checkov finds nothing it would fail.

checkov runs from its own tools venv (``.venv-infra/``, made by ``make setup`` from
``requirements-infra.txt``: its pins conflict with the shared venv's), offline
(``--skip-download``), over every file in ``infra/`` with its Bicep framework. A check the
template does not meet is skipped only by a ``//checkov:skip=CKV_...:reason`` comment inside
the resource it concerns, and the reason must be given.

Not covered here: the Bicep compiler (``az bicep build``) and ARM's what-if cannot be
installed or reached on these machines, so type errors the compiler would report (a
property an API version lacks, a wrong type) are not caught; docs/ADMIN.md says so.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pycep import BicepParser

from tests.infra.bicep import INFRA, MAIN, ROOT, bicep_files, parse

CHECKOV_ENV = "INFRA_CHECKOV"
"""Overrides where the checkov executable is (else the tools venv of this checkout)."""


def checkov_executable() -> Path:
    """checkov of the tools venv: this checkout's, or where ``INFRA_CHECKOV`` points."""
    override = os.environ.get(CHECKOV_ENV)
    candidates = [Path(override)] if override else []
    # A git worktree shares the main checkout's tools venv when it has none of its own.
    candidates += [
        ROOT / ".venv-infra" / "bin" / "checkov",
        ROOT.resolve() / ".venv-infra" / "bin" / "checkov",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail(
        f"checkov is not installed: run `make setup` (it creates .venv-infra/ from requirements-infra.txt) "
        f"or set {CHECKOV_ENV}; looked at {[str(c) for c in candidates]}"
    )


@cache
def checkov_report(directory: Path = INFRA) -> dict[str, Any]:
    """checkov's JSON report over ``directory`` (one run per test session)."""
    done = subprocess.run(
        [str(checkov_executable()), "--directory", str(directory), "--framework", "bicep",
         "--skip-download", "--output", "json"],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "LOG_LEVEL": "ERROR"},
    )  # fmt: skip
    assert done.returncode in (0, 1), f"checkov crashed ({done.returncode}): {done.stderr[-2000:]}"
    report = json.loads(done.stdout)
    # One framework gives an object; several would give a list.
    assert isinstance(report, dict), done.stdout[:500]
    assert report["check_type"] == "bicep"
    return report


def test_every_bicep_file_parses_with_pycep():
    files = bicep_files()
    assert MAIN in files
    assert len(files) >= 10
    for path in files:
        BicepParser().parse(file_path=path)  # raises on syntax pycep (and checkov's bundled copy) cannot read


def test_main_uses_every_module_and_nothing_outside_infra():
    used: set[Path] = set()
    pending = [MAIN]
    while pending:
        path = pending.pop()
        for spec in parse(path).get("modules", {}).values():
            target = (path.parent / spec["detail"]["path"]).resolve()
            assert target.is_relative_to(INFRA.resolve()), f"{path.name} uses {target} outside infra/"
            assert target.exists(), f"{path.name} uses a missing module {target}"
            if target not in used:
                used.add(target)
                pending.append(target)
    modules = {p.resolve() for p in bicep_files() if p != MAIN}
    assert modules == used, f"modules main.bicep never uses: {sorted(map(str, modules - used))}"


def test_checkov_reports_no_failed_check_and_no_parsing_error():
    report = checkov_report()
    summary = report["summary"]
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']}:{c['file_line_range'][0]}): {c['check_name']}"
        for c in report["results"]["failed_checks"]
    ]
    print(
        f"checkov {summary['checkov_version']}: passed {summary['passed']}, failed {summary['failed']}, "
        f"skipped {summary['skipped']}, parsing errors {summary['parsing_errors']}, "
        f"resources {summary['resource_count']}"
    )
    assert summary["parsing_errors"] == 0, report["results"]["parsing_errors"]
    assert not failed, "checkov failed:\n" + "\n".join(failed)
    assert summary["passed"] >= 30  # it really scanned the resources, not an empty directory


def test_every_checkov_skip_sits_in_its_resource_with_a_reason():
    skipped = checkov_report()["results"]["skipped_checks"]
    assert skipped, "no skip found: if none is needed any more, drop this test's premise"
    for check in skipped:
        reason = check["check_result"]["suppress_comment"]
        assert reason != "No comment provided", f"{check['check_id']} is skipped without a reason"
        assert len(reason) > 20, f"{check['check_id']}: {reason!r} is not a reason"
    # Each skip comment was applied to a resource (a stray or misplaced comment is not).
    comments: Counter[tuple[str, str]] = Counter()
    for path in bicep_files():
        for line in path.read_text().splitlines():
            if "checkov:skip=" in line:
                assert line.startswith("  //checkov:skip="), (
                    f"{path.name}: skip outside a resource body: {line}"
                )
                comments[(path.name, line.split("=", 1)[1].split(":", 1)[0])] += 1
    applied = Counter((Path(c["file_path"]).name, c["check_id"]) for c in skipped)
    assert set(comments) == set(applied), (
        f"skip comments checkov did not apply: {set(comments) - set(applied)}"
    )
