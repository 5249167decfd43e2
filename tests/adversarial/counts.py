"""Trial counts and summary lines shared by the adversarial proof suites.

Each suite runs a CI-sized count by default and the full count under ``make soak``
(``COPILOT_SOAK=1``). Every suite ends with one line, ``<suite>: tried N, failures M``,
printed and appended to ``test-artifacts/adversarial/summary.txt`` so a soak run leaves
its evidence behind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

SUMMARY_FILE = Path(__file__).resolve().parents[2] / "test-artifacts" / "adversarial" / "summary.txt"


def soak() -> bool:
    """Whether this run is the full-count soak (``make soak``)."""
    return os.environ.get("COPILOT_SOAK", "") not in ("", "0")


def count(ci: int, soak_count: int) -> int:
    """The number of trials for this run: ``ci`` in CI, ``soak_count`` under ``make soak``."""
    return soak_count if soak() else ci


@dataclass
class Tally:
    """What one suite tried and what failed (with the first few failures described)."""

    suite: str
    tried: int = 0
    failures: int = 0
    examples: list[str] = field(default_factory=list)

    def ok(self) -> None:
        self.tried += 1

    def fail(self, what: str) -> None:
        self.tried += 1
        self.failures += 1
        if len(self.examples) < 10:
            self.examples.append(what)

    def record(self, passed: bool, what: str) -> None:
        if passed:
            self.ok()
        else:
            self.fail(what)

    def line(self) -> str:
        return f"{self.suite}: tried {self.tried}, failures {self.failures}"

    def report(self) -> str:
        """Print and persist the summary line; returns it (assert on ``failures`` after)."""
        line = self.line()
        print(line)
        SUMMARY_FILE.parent.mkdir(parents=True, exist_ok=True)
        with SUMMARY_FILE.open("a", encoding="utf-8") as out:
            out.write(line + ("" if not self.examples else f"  e.g. {self.examples[0]}") + "\n")
        return line

    def assert_clean(self) -> None:
        """Report, then fail the test if anything failed (showing the first failures)."""
        self.report()
        assert self.failures == 0, f"{self.line()}; first failures: {self.examples}"
