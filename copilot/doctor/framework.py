"""The preflight's check framework: named checks run in order, each passing, failing or skipped.

A check is an async function of the :class:`DoctorContext`. It returns what it found
(one line) or raises :class:`CheckFailed` naming the exact setting and the fix; a check that
needs what an earlier one failed to give (e.g. valid settings) is skipped, naming it.
Results are pydantic models, printed as one line each while the checks run, or as JSON.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar, assert_never

from pydantic import BaseModel

from copilot.errors import CopilotError

Status = Literal["pass", "fail", "skip"]

T = TypeVar("T")


class CheckResult(BaseModel):
    """One check's outcome."""

    name: str
    """Stable id, e.g. ``database.migrations``: what a script or a runbook keys on."""
    status: Status
    detail: str
    """What was found, one line."""
    setting: str | None = None
    """The exact app setting at fault (or to look at), when there is one."""
    fix: str | None = None
    """What to do about a failure."""


class DoctorReport(BaseModel):
    """Every check's outcome; ``ok`` when none failed (skipped checks do not fail the run)."""

    ok: bool
    environment: str | None
    """``COPILOT_ENVIRONMENT`` as the checks saw it."""
    checks: list[CheckResult]

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "fail"]


class CheckFailed(CopilotError):
    """Raised by a check: what is wrong, the setting at fault and the fix."""

    code = "doctor_check_failed"

    def __init__(self, detail: str, *, setting: str | None = None, fix: str | None = None):
        super().__init__(detail, setting=setting, fix=fix)
        self.setting = setting
        self.fix = fix


class CheckSkipped(CopilotError):
    """Raised by a check that cannot run (what it needs failed earlier, or it does not apply)."""

    code = "doctor_check_skipped"


@dataclass
class DoctorContext:
    """What the checks share: the environment they judge and what earlier checks built."""

    environ: Mapping[str, str]
    """The app settings (environment variables) under test."""
    crm_token: str | None = field(default=None, repr=False)
    """A delegated CRM token (``crm.read``) to list the CRM's tools with; None = that part is skipped."""
    _built: dict[type, object] = field(default_factory=dict, repr=False)

    def provide(self, value: object) -> None:
        """Keep ``value`` (e.g. the validated settings) for the checks after this one."""
        self._built[type(value)] = value

    def need(self, kind: type[T], what: str) -> T:
        """What an earlier check built, or skip this check (``what`` names that check)."""
        value = self._built.get(kind)
        if value is None:
            raise CheckSkipped(f"needs {what}, which did not pass")
        assert isinstance(value, kind)
        return value


CheckFunction = Callable[[DoctorContext], Awaitable[str]]


@dataclass(frozen=True)
class Check:
    """One named check."""

    name: str
    run: CheckFunction


def result_of_error(
    name: str, exc: CopilotError, *, setting: str | None = None, fix: str | None = None
) -> CheckResult:
    """A failure from one of the copilot's own errors (its message names what is wrong)."""
    return CheckResult(name=name, status="fail", detail=_one_line(str(exc)), setting=setting, fix=fix)


async def run_check(check: Check, ctx: DoctorContext) -> CheckResult:
    """Run one check; whatever goes wrong inside it is that check's failure, never the run's."""
    try:
        detail = await check.run(ctx)
    except CheckFailed as exc:
        return CheckResult(
            name=check.name, status="fail", detail=_one_line(exc.message), setting=exc.setting, fix=exc.fix
        )
    except CheckSkipped as exc:
        return CheckResult(name=check.name, status="skip", detail=_one_line(exc.message))
    except CopilotError as exc:
        return result_of_error(check.name, exc, setting=_named_setting(str(exc)))
    except Exception as exc:  # noqa: BLE001 - the preflight's edge: one check's surprise is its failure, the next checks still run
        return CheckResult(
            name=check.name,
            status="fail",
            detail=_one_line(f"unexpected {type(exc).__name__}: {exc}"),
            fix="report this: the check itself failed",
        )
    return CheckResult(name=check.name, status="pass", detail=_one_line(detail))


async def run_checks(
    checks: Iterable[Check], ctx: DoctorContext, progress: Callable[[CheckResult], None]
) -> DoctorReport:
    """Run ``checks`` in order, reporting each result to ``progress`` as it is known."""
    results: list[CheckResult] = []
    for check in checks:
        result = await run_check(check, ctx)
        progress(result)
        results.append(result)
    return DoctorReport(
        ok=all(r.status != "fail" for r in results),
        environment=ctx.environ.get("COPILOT_ENVIRONMENT", "local"),
        checks=results,
    )


def mark(status: Status) -> str:
    """The progress line's mark for ``status``."""
    if status == "pass":
        return "ok  "
    if status == "fail":
        return "FAIL"
    if status == "skip":
        return "skip"
    assert_never(status)


def progress_line(result: CheckResult) -> str:
    """One line per check: mark, name, what was found; for a failure the setting and the fix."""
    line = f"{mark(result.status)} {result.name}: {result.detail}"
    if result.status == "fail":
        if result.setting:
            line += f" [setting: {result.setting}]"
        if result.fix:
            line += f" → fix: {result.fix}"
    return line


MAX_DETAIL_CHARS = 400


def _one_line(text: str) -> str:
    line = " ".join(text.split()) or "(no detail)"
    return line if len(line) <= MAX_DETAIL_CHARS else line[: MAX_DETAIL_CHARS - 1] + "…"


_SETTING_NAME = re.compile(r"\b[A-Za-z][A-Za-z0-9_]*\b")


def _named_setting(message: str) -> str | None:
    """The app settings a message names (words that look like setting names), comma-separated."""
    found = [w for w in dict.fromkeys(_SETTING_NAME.findall(message)) if _looks_like_setting(w)]
    return ", ".join(found) or None


def _looks_like_setting(word: str) -> bool:
    return (word.isupper() and "_" in word) or word.startswith(("MicrosoftApp", "AzureWebJobs"))


def settings_named(message: str, aliases: Iterable[str]) -> str | None:
    """Which of ``aliases`` (setting names) ``message`` mentions, in order, comma-separated."""
    wanted = set(aliases)
    found = [w for w in dict.fromkeys(_SETTING_NAME.findall(message)) if w in wanted]
    return ", ".join(found) or None
