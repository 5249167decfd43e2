"""The any-day guard: the time-sensitive test files, replayed at moments that broke them once.

``make test`` runs it after the suite (so ``.ci/run`` does): each moment is a real shifted clock
(``faketime`` from Debian's packages, ``make setup`` installs it) over pytest, the sandbox and
everything they start, so a test that reads today's date, weekday or hour where it should name
its moment fails here on any day CI runs, not only on the Sundays and Mondays it would fail
on its own. PostgreSQL runs outside the shifted clock, as a database server on its own machine
would: a product path that asks the database for "now" where the service's clock is meant is
then off by days and fails too.

Each failure names the moment it ran at and the command that replays it. Exit 0 when every
moment passed, 1 when one failed, 2 when ``faketime`` is missing.

    python -m tests.any_day                      # the next Sunday evening and Monday early morning (UTC)
    python -m tests.any_day --at "2026-12-13 20:00:00"   # one moment
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]

TIME_SENSITIVE = (
    "tests/integration/test_brief_token_service.py",
    "tests/integration/test_brief_preferences.py",
    "tests/integration/test_suggestion_ledger.py",
    "tests/integration/test_digest_timer.py",
    "tests/integration/test_thread_rotation.py",
    "tests/integration/test_delegation.py",
    "tests/integration/test_retention_command.py",
    "tests/integration/test_audit_seal.py",
    "tests/integration/test_undo.py",
    "tests/integration/test_insight_risk.py",
    "tests/integration/test_insight_catchup.py",
    "tests/integration/test_followthrough.py",
)
"""Briefs, digest, ledger, token service, rotation, delegation, retention, audit seal, undo window,
deal risk, catch-up, meeting follow-through."""


@dataclass(frozen=True)
class Outcome:
    moment: dt.datetime
    returncode: int
    summary: str
    seconds: float
    command: str


def default_moments(now: dt.datetime) -> list[dt.datetime]:
    """The next Sunday 20:00 UTC after ``now`` and the Monday 03:00 UTC after it: the hours at
    which midnight UTC of the day is still the day before for a rep in the Americas."""
    days_to_sunday = (6 - now.weekday()) % 7 or 7
    sunday = dt.datetime.combine(now.date() + dt.timedelta(days=days_to_sunday), dt.time(20), dt.UTC)
    return [sunday, sunday + dt.timedelta(hours=7)]


def _label(moment: dt.datetime) -> str:
    return f"{moment:%A %Y-%m-%d %H:%M} UTC"


def _faketime_spec(moment: dt.datetime) -> str:
    return f"@{moment:%Y-%m-%d %H:%M:%S}"


def _start_postgres(pgdata: Path) -> str:
    # The project's own embedded server, started in this (unshifted) process.
    from copilot.persistence.embedded import start_embedded

    return start_embedded(pgdata)


def run_moment(
    moment: dt.datetime, files: Sequence[str], workers: str, database_url: str, basetemp: Path
) -> Outcome:
    """The files under pytest with the clock set to ``moment`` (it runs on from there)."""
    env = {
        **os.environ,
        "TZ": "UTC",
        "DATABASE_URL": database_url,
        # One shifted clock for the whole process tree: a child process (a pytest worker, the
        # sandbox) goes on from the parent's faked time instead of restarting at the moment.
        "FAKETIME_DONT_RESET": "1",
    }
    # A base temp of its own: pytest prunes old numbered temp dirs under the shared one, which
    # would remove a moment's sandbox from under it while the other moment runs.
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={basetemp}"]
    args += ["-n", workers, "--dist", "loadfile", *files]
    command = ["faketime", "-f", _faketime_spec(moment), sys.executable, *args]
    started = time.monotonic()
    done = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    errors = done.stderr.strip().splitlines()
    summary = lines[-1] if lines else (errors[-1] if errors else "")
    if done.returncode != 0:
        failing = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
        summary = "\n".join([*failing, summary])
    replay = f"faketime -f '{_faketime_spec(moment)}' {sys.executable} -m pytest {' '.join(files)}"
    return Outcome(moment, done.returncode, summary, time.monotonic() - started, replay)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.any_day", description=__doc__.splitlines()[0])
    parser.add_argument("--at", action="append", help='a moment, "YYYY-MM-DD HH:MM:SS" UTC (repeatable)')
    parser.add_argument("--workers", default="1", help="pytest-xdist workers per moment (default 1)")
    parser.add_argument("--jobs", type=int, default=2, help="moments run side by side (default 2)")
    parser.add_argument("files", nargs="*", help="test files (default: the time-sensitive ones)")
    args = parser.parse_args(argv)
    if shutil.which("faketime") is None:
        print(
            "any-day: faketime is missing: run 'make setup' (or 'apt-get install faketime')", file=sys.stderr
        )
        return 2
    try:
        moments = (
            [dt.datetime.fromisoformat(at).replace(tzinfo=dt.UTC) for at in args.at]
            if args.at
            else default_moments(dt.datetime.now(dt.UTC))
        )
    except ValueError as exc:
        print(f"any-day: --at needs 'YYYY-MM-DD HH:MM:SS': {exc}", file=sys.stderr)
        return 2
    files = args.files or list(TIME_SENSITIVE)
    with tempfile.TemporaryDirectory(prefix="any-day-") as scratch:
        # One database server per moment, so the moments run side by side without sharing
        # a migrated template.
        urls = [_start_postgres(Path(scratch) / f"pg{n}") for n in range(len(moments))]
        print(
            f"any-day: {len(files)} time-sensitive files at {', '.join(_label(m) for m in moments)}",
            flush=True,
        )
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            outcomes = list(
                pool.map(
                    lambda n: run_moment(moments[n], files, args.workers, urls[n], Path(scratch) / f"tmp{n}"),
                    range(len(moments)),
                )
            )
    failed = False
    for outcome in outcomes:
        if outcome.returncode == 0:
            print(f"any-day: at {_label(outcome.moment)}: {outcome.summary} ({outcome.seconds:.0f} s)")
        else:
            failed = True
            print(f"any-day: FAILED at {_label(outcome.moment)}:\n{outcome.summary}", file=sys.stderr)
            print(f"any-day: replay with: {outcome.command}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
