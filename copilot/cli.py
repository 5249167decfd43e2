"""The ``python -m copilot`` command line: argument parsing and output only."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence

from copilot.errors import CopilotError
from copilot.persistence import audit
from copilot.persistence.checkpoint import setup_langgraph
from copilot.persistence.database import connect
from copilot.persistence.embedded import resolve_database_url
from copilot.persistence.migrations import load_migrations, migrate
from copilot.settings import Settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m copilot", description="CRM sales copilot")
    commands = parser.add_subparsers(dest="command", required=True)
    db = commands.add_parser("db", help="database administration")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    db_migrate = db_commands.add_parser("migrate", help="apply pending schema migrations")
    db_migrate.add_argument("--json", action="store_true", help="machine-readable output")
    audit_cmd = commands.add_parser("audit", help="the audit log of executed writes")
    audit_commands = audit_cmd.add_subparsers(dest="audit_command", required=True)
    audit_verify = audit_commands.add_parser(
        "verify", help="check the audit log's hash chain (exit 1 if tampered)"
    )
    audit_verify.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


async def _db_migrate(settings: Settings, as_json: bool) -> int:
    async with connect(settings) as conn:
        report = await migrate(conn)
    # LangGraph's own tables, then the app role's grants on them (needs migration 0002).
    await setup_langgraph(resolve_database_url(settings), app_role=settings.db_app_role)
    if as_json:
        print(
            json.dumps(
                {
                    "applied": [{"version": m.version, "name": m.name} for m in report.applied],
                    "current_version": report.current_version,
                }
            )
        )
    else:
        for m in report.applied:
            print(f"applied {m.version:04d} {m.name}")
        total = len(load_migrations())
        print(f"database schema is at version {report.current_version} of {total}")
    return 0


async def _audit_verify(settings: Settings, as_json: bool) -> int:
    async with connect(settings) as conn:
        report = await audit.verify(conn)
    if as_json:
        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "rows_checked": report.rows_checked,
                    "first_bad_id": report.first_bad_id,
                    "problem": report.problem,
                    "head_hash": report.head_hash,
                }
            )
        )
    elif report.ok:
        print(f"audit log intact: {report.rows_checked} rows")
    else:
        print(f"audit log TAMPERED at row {report.first_bad_id}: {report.problem}")
    return 0 if report.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the process exit code."""
    args = _parser().parse_args(argv)
    settings = Settings()
    try:
        if args.command == "db" and args.db_command == "migrate":
            return asyncio.run(_db_migrate(settings, args.json))
        if args.command == "audit" and args.audit_command == "verify":
            return asyncio.run(_audit_verify(settings, args.json))
    except CopilotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    raise AssertionError(f"unhandled command {args}")
