"""``data export|delete`` (a rep's data on request) and ``retention status|run``: the commands.

Both act on the database ``DATABASE_URL`` names, as its owner (like ``db migrate``), so they
see every layer's tables; what they do is :mod:`copilot.persistence.rep_data` and
:mod:`copilot.persistence.retention`. Progress goes to stderr, so ``--json`` and an export
on stdout stay clean.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from copilot.clock import system_clock
from copilot.errors import InvalidInput
from copilot.persistence.database import connect
from copilot.persistence.migrations import assert_schema_current
from copilot.persistence.outside_data import NOT_REACHED, NotReached, OutsideEraser, OutsideStep
from copilot.persistence.rep_data import (
    AUDIT_KEPT_NOTE,
    RepDataReport,
    delete_rep_data,
    export_rep_data,
    newest_audit_write,
)
from copilot.persistence.retention import RetentionPlan, apply_retention, plan_retention
from copilot.settings import Settings

_BAR = 30
_LISTED = 20
"""Thread ids a text report lists per kind before it says "and N more" (``--json`` has all)."""


def _bar(done: int, total: int, what: str) -> None:
    filled = _BAR * done // max(total, 1)
    print(
        f"\r[{'#' * filled}{'.' * (_BAR - filled)}] {done}/{total} {what[:40]:<40}", end="", file=sys.stderr
    )
    if done == total:
        print(file=sys.stderr, flush=True)


def _check_rep(rep: str, tenant: str | None) -> None:
    for name, value in (("--rep", rep), ("--tenant", tenant)):
        if value is None:
            continue
        if not value.strip() or value != value.strip() or len(value) > 200 or not value.isprintable():
            raise InvalidInput(
                f"{name} must be a rep's AAD object id (or tenant id): printable, no spaces at either end"
            )


def _print_counts(report: RepDataReport, verb: str, out: TextIO) -> None:
    for group, counts in report.groups.items():
        touched = ", ".join(f"{table} {n}" for table, n in counts.items()) or "no tables of rep data"
        print(f"{group}: {sum(counts.values())} {verb} ({touched})", file=out)
    print(f"total: {report.total} {verb}; audit_log: {report.audit_rows_kept} kept", file=out)
    print(f"note: {AUDIT_KEPT_NOTE}", file=out)


async def data_export(
    settings: Settings, *, rep: str, tenant: str | None, out: str | None, as_json: bool
) -> int:
    """``data export --rep ID [--tenant T] [--out FILE]``: the export goes to FILE (or stdout)."""
    _check_rep(rep, tenant)
    target = Path(out) if out and out != "-" else None
    if target is not None and (target.is_dir() or not target.parent.is_dir()):
        raise InvalidInput(f"--out {out!r}: not a file in an existing folder")
    async with connect(settings) as conn:
        await assert_schema_current(conn)
        report = await export_rep_data(conn, rep=rep, tenant=tenant, progress=_bar)
    document = json.dumps(report.document(), indent=2, ensure_ascii=False)
    if target is None:
        print(document)
        # stdout carries the export; the summary goes beside the progress bar.
        _print_counts(report, "exported", sys.stderr)
        return 0
    # The export is personal data: readable by its owner only (POSIX; replaced if it exists).
    with os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
        f.write(document + "\n")
    if as_json:
        print(json.dumps({**report.summary(), "out": str(target)}))
    else:
        _print_counts(report, "exported", sys.stdout)
        print(f"written to {target}")
    return 0


def default_erasers() -> Sequence[OutsideEraser]:
    """The deployed app's places outside the database (token service, turn queues).

    Only the top layer knows them: reached lazily, for this command only, as ``doctor`` reaches
    ``functions.doctor`` (tests/unit/test_layering.py).
    """
    from functions.rep_data import outside_erasers

    return outside_erasers()


async def data_delete(
    settings: Settings,
    *,
    rep: str,
    tenant: str | None,
    dry_run: bool,
    yes: bool,
    as_json: bool,
    erasers: Sequence[OutsideEraser] | None = None,
) -> int:
    """``data delete --rep ID [--tenant T] [--dry-run] [--yes]``: asks first unless ``--yes``.

    Outside the database first (the rep's sign-in at the token service, their queued turns;
    ``erasers``, by default the deployed app's), while the rows that find the rep there still
    exist; then the database. Lists what it cannot reach and where to act. Exit 1 when an
    outside place could not be cleared (the database part is done; run it again).
    """
    _check_rep(rep, tenant)
    outside_erasers = default_erasers() if erasers is None else erasers
    async with connect(settings) as conn:
        await assert_schema_current(conn)
        planned = await delete_rep_data(conn, rep=rep, tenant=tenant, dry_run=True)
        if dry_run:
            outside = [await e(conn, rep=rep, tenant=tenant, dry_run=True) for e in outside_erasers]
            newest = await newest_audit_write(conn, rep=rep, tenant=tenant)
            _print_delete(
                planned, as_json, "would be deleted", outside, _lifecycle(settings, rep, tenant, newest)
            )
            return 0
        if not yes and not _confirmed(planned, rep):
            print("nothing deleted")
            return 1
        outside = [await e(conn, rep=rep, tenant=tenant, dry_run=False) for e in outside_erasers]
        report = await delete_rep_data(conn, rep=rep, tenant=tenant, progress=None if as_json else _bar)
        newest = await newest_audit_write(conn, rep=rep, tenant=tenant)
    _print_delete(report, as_json, "deleted", outside, _lifecycle(settings, rep, tenant, newest))
    return 1 if any(step.status == "failed" for step in outside) else 0


def _lifecycle(settings: Settings, rep: str, tenant: str | None, newest: datetime | None) -> dict[str, Any]:
    """The audit rows' retention and the places ``data delete`` cannot reach, with where to act."""
    kept_until = newest + timedelta(days=settings.audit_retention_days) if newest is not None else None
    not_reached = [entry.to_json() for entry in NOT_REACHED]
    pseudonym = _trace_pseudonym(settings, rep, tenant)
    if pseudonym is not None:
        not_reached = [
            {**entry, "act": f"{entry['act']} (this rep's pseudonym: {pseudonym})"}
            if entry["place"].startswith("LangSmith")
            else entry
            for entry in not_reached
        ]
    return {
        "audit_retention_days": settings.audit_retention_days,
        "audit_kept_until": kept_until.date().isoformat() if kept_until is not None else None,
        "not_reached": not_reached,
    }


def _trace_pseudonym(settings: Settings, rep: str, tenant: str | None) -> str | None:
    """The rep's pseudonym in traces, when the deployment's key is configured and the tenant given."""
    key = settings.trace_pseudonym_key
    if tenant is None or key is None or not key.get_secret_value().strip():
        return None
    from copilot.identity import RepIdentity
    from copilot.tracing.pseudonym import load_pseudonym_key, rep_pseudonym

    return rep_pseudonym(load_pseudonym_key(settings), RepIdentity(tenant, rep))


def _confirmed(planned: RepDataReport, rep: str) -> bool:
    # On stderr, so that stdout carries only the result (``--json`` stays one document).
    _print_counts(planned, "would be deleted", sys.stderr)
    print(
        f"Delete {planned.total} rows of rep {rep}? This cannot be undone. Type 'delete' to go on: ",
        end="",
        file=sys.stderr,
        flush=True,
    )
    # An empty read is the end of input: no terminal and no --yes means nobody said yes.
    return sys.stdin.readline().strip() == "delete"


def _print_delete(
    report: RepDataReport,
    as_json: bool,
    verb: str,
    outside: Sequence[OutsideStep],
    lifecycle: dict[str, Any],
) -> None:
    if as_json:
        print(json.dumps({**report.summary(), "outside": [s.to_json() for s in outside], **lifecycle}))
        return
    _print_counts(report, verb, sys.stdout)
    days = lifecycle["audit_retention_days"]
    until = lifecycle["audit_kept_until"]
    print(
        f"audit retention: {days} days (COPILOT_AUDIT_RETENTION_DAYS)"
        + (f"; this rep's newest audit row is kept until {until}" if until else ""),
    )
    for step in outside:
        print(f"outside: {step.place}: {step.status}: {step.detail}")
    for entry in lifecycle["not_reached"]:
        place = NotReached(**entry)
        print(f"not reached: {place.place}: holds {place.holds}; to act: {place.act}")


async def retention(settings: Settings, *, command: str, days: int | None, as_json: bool) -> int:
    """``retention status`` (what the policy keeps and removes now) or ``retention run``."""
    if days is not None and days < 1:
        raise InvalidInput("--days must be at least 1")
    older_than = timedelta(days=days if days is not None else settings.retention_days)
    async with connect(settings) as conn:
        await assert_schema_current(conn)
        saver = AsyncPostgresSaver(conn=conn)
        # The CLI is an edge: its "now" is the wall clock.
        now = system_clock()
        plan = await plan_retention(conn, saver, older_than=older_than, now=now)
        if command == "status":
            if as_json:
                print(json.dumps(plan.to_json()))
            else:
                _print_plan(plan)
            return 0
        report = await apply_retention(conn, saver, older_than=older_than, now=now)
    if as_json:
        print(json.dumps(report.to_json()))
    else:
        print(f"expired {len(report.expired_threads)} threads ({report.checkpoints_expired} checkpoints)")
        print(f"pruned {len(report.pruned_threads)} threads ({report.checkpoints_deleted} old checkpoints)")
        if report.skipped_threads:
            print(
                f"skipped {len(report.skipped_threads)} threads: {', '.join(report.skipped_threads[:_LISTED])}"
            )
        for table, n in report.rows_deleted.items():
            print(f"deleted {n} expired {table} rows")
    return 0


def _ids(entries: list[Any]) -> str:
    shown = ", ".join(e.thread_id for e in entries[:_LISTED])
    more = len(entries) - _LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def _print_plan(plan: RetentionPlan) -> None:
    days = plan.older_than / timedelta(days=1)
    print(f"policy: threads idle more than {days:g} days expire; live threads keep their newest checkpoint")
    expire = plan.expired_threads
    print(f"remove: {len(expire)} expired threads ({sum(t.checkpoints for t in expire)} checkpoints)", end="")
    print(f": {_ids(expire)}" if expire else "")
    prune = plan.pruned_threads
    print(f"remove: {sum(t.removes for t in prune)} old checkpoints of {len(prune)} live threads", end="")
    print(f": {_ids(prune)}" if prune else "")
    for rows in plan.expiring:
        print(f"remove: {rows.expired} expired {rows.table} rows")
    print(
        f"keep:   {len(prune) + len(plan.kept_threads) + len(plan.skipped_threads)} live threads "
        f"({plan.checkpoints_kept} checkpoints)"
    )
    if plan.skipped_threads:
        print(
            f"keep:   {len(plan.skipped_threads)} threads whole (DeltaChannel): {_ids(plan.skipped_threads)}"
        )
    for rows in plan.expiring:
        print(f"keep:   {rows.live} live {rows.table} rows")
    print(f"total:  {plan.checkpoints_removed} checkpoints to remove, {plan.checkpoints_kept} to keep")
