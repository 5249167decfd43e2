"""The ``python -m copilot`` command line: argument parsing and output only."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence

from copilot import cli_conversation as conversation
from copilot.errors import CopilotError, InvalidDecision
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

    ask = commands.add_parser("ask", help="one turn: answer a question or stop at proposals")
    ask.add_argument("--rep", required=True, help="the rep's handle or AAD object id")
    ask.add_argument("--thread", help="continue this conversation thread")
    ask.add_argument("--json", action="store_true", help="machine-readable output (see README)")
    ask.add_argument("question")
    resume = commands.add_parser("resume", help="decide pending proposals and continue")
    resume.add_argument("--rep", required=True)
    resume.add_argument("--thread", required=True)
    resume.add_argument(
        "--decisions",
        required=True,
        help='JSON list (or @file): [{"tool_call_id": ..., "type": "approve"|"edit"|"reject", ...}]',
    )
    resume.add_argument("--json", action="store_true")
    chat = commands.add_parser("chat", help="interactive chat with per-proposal approve / edit / reject")
    chat.add_argument("--rep", required=True)
    chat.add_argument("--thread", help="continue this conversation thread")
    chat.add_argument("--json", action="store_true")
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
        if args.command == "ask":
            return asyncio.run(conversation.ask(settings, args.rep, args.thread, args.question, args.json))
        if args.command == "resume":
            return asyncio.run(
                conversation.resume(settings, args.rep, args.thread, args.decisions, args.json)
            )
        if args.command == "chat":
            return asyncio.run(conversation.chat(settings, args.rep, args.thread, args.json))
    except InvalidDecision as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except CopilotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    raise AssertionError(f"unhandled command {args}")
