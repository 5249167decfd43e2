"""The ``python -m copilot`` command line: argument parsing and output only."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence

from copilot.errors import CopilotError
from copilot.persistence.database import connect
from copilot.persistence.migrations import load_migrations, migrate
from copilot.settings import Settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m copilot", description="CRM sales copilot")
    commands = parser.add_subparsers(dest="command", required=True)
    db = commands.add_parser("db", help="database administration")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    db_migrate = db_commands.add_parser("migrate", help="apply pending schema migrations")
    db_migrate.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


async def _db_migrate(settings: Settings, as_json: bool) -> int:
    async with connect(settings) as conn:
        report = await migrate(conn)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the process exit code."""
    args = _parser().parse_args(argv)
    settings = Settings()
    try:
        if args.command == "db" and args.db_command == "migrate":
            return asyncio.run(_db_migrate(settings, args.json))
    except CopilotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    raise AssertionError(f"unhandled command {args}")
