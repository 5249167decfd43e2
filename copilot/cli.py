"""The ``python -m copilot`` command line: argument parsing and output only."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

from pydantic import ValidationError

from copilot import cli_conversation as conversation
from copilot.errors import (
    ConfigurationError,
    CopilotError,
    InvalidDecision,
    InvalidInput,
    ThreadAccessDenied,
    ThreadNotFound,
)
from copilot.persistence import audit
from copilot.persistence.checkpoint import setup_langgraph
from copilot.persistence.database import connect
from copilot.persistence.embedded import resolve_database_url
from copilot.persistence.migrations import load_migrations, migrate
from copilot.settings import Settings

T = TypeVar("T")

# Errors that mean the command's input is wrong (exit 2, like argparse's own), not that
# something it talks to failed (exit 1). A thread that does not exist or is not the
# rep's is bad input too: the id given names nothing this rep can open.
_BAD_INPUT: tuple[type[CopilotError], ...] = (
    InvalidInput,
    InvalidDecision,
    ThreadNotFound,
    ThreadAccessDenied,
)

DEFAULT_ADMIN_TOKEN_ENV = "COPILOT_CRM_ADMIN_TOKEN"
"""Where ``crm prepare`` finds the admin's token (a variable, never an argument: arguments show
in process lists)."""

MAX_ERROR_CHARS = 500
"""Longest error line printed (messages can quote what was given, which may be huge)."""


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
        "verify",
        help="check the audit log's HMAC chain against its anchors (exit 1 if tampered); "
        "then anchor the verified head",
    )
    audit_verify.add_argument("--json", action="store_true", help="machine-readable output")
    audit_verify.add_argument(
        "--no-anchor", action="store_true", help="only check: do not anchor the verified head"
    )
    audit_anchor = audit_commands.add_parser(
        "anchor", help="verify, then append a signed checkpoint of the head to the anchor store"
    )
    audit_anchor.add_argument("--json", action="store_true", help="machine-readable output")

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
    analytics = commands.add_parser(
        "analytics", help="approve / edit / reject rates per tool and field, from the audit and rejections"
    )
    analytics.add_argument(
        "--since", type=_date, help="only decisions on or after this day (YYYY-MM-DD, UTC)"
    )
    analytics.add_argument("--tenant", help="only this tenant's decisions")
    analytics.add_argument("--json", action="store_true", help="a JSON document instead of the tables")
    _data_arguments(commands)
    brief = commands.add_parser("brief", help="the meeting prep briefs the timer would post at a moment")
    brief.add_argument("--rep", required=True, help="the rep's handle or AAD object id")
    brief.add_argument(
        "--at", default="now", help="the moment, ISO 8601 (e.g. 2026-12-03T14:30:00Z) or now (the default)"
    )
    brief.add_argument(
        "--lead-minutes", type=int, default=60, help="meetings starting within this (default 60)"
    )
    brief.add_argument("--json", action="store_true", help="machine-readable output (see docs/BRIEFS.md)")
    digest = commands.add_parser("digest", help="a rep's daily digest (meetings, deals, waiting proposals)")
    digest.add_argument("--rep", required=True, help="the rep's handle or AAD object id")
    digest.add_argument(
        "--at",
        default="now",
        help="the moment, ISO 8601 or now (the default); the digest is of its day in the rep's zone",
    )
    digest.add_argument("--json", action="store_true", help="machine-readable output (see docs/BRIEFS.md)")
    knowledge = commands.add_parser("knowledge", help="playbooks and product documents for retrieval")
    knowledge_commands = knowledge.add_subparsers(dest="knowledge_command", required=True)
    k_ingest = knowledge_commands.add_parser(
        "ingest", help="load Markdown, HTML, PDF or DOCX files (a file, folder or URL) into search"
    )
    k_ingest.add_argument("target", metavar="PATH_OR_URL")
    k_ingest.add_argument("--tenant", required=True, help="the tenant whose reps may read it")
    k_ingest.add_argument(
        "--acl",
        action="append",
        default=[],
        metavar="KIND:VALUE",
        help="restrict to group:NAME, role:NAME or territory:NAME (repeatable; kinds combine with AND)",
    )
    k_ingest.add_argument(
        "--bearer-env",
        metavar="NAME",
        help="environment variable holding the Graph token a drive listing URL needs (Sites.Read.All)",
    )
    k_ingest.add_argument("--json", action="store_true", help="machine-readable output")
    k_list = knowledge_commands.add_parser("list", help="the ingested documents")
    k_list.add_argument("--tenant", help="only this tenant's documents")
    k_list.add_argument("--json", action="store_true", help="machine-readable output")
    k_remove = knowledge_commands.add_parser("remove", help="delete a document and its chunks")
    k_remove.add_argument("document_id", metavar="DOCUMENT_ID")
    k_remove.add_argument("--tenant", required=True)
    k_remove.add_argument("--json", action="store_true", help="machine-readable output")
    doctor = commands.add_parser(
        "doctor", help="preflight of a deployed configuration: each check passes or names the setting and fix"
    )
    doctor.add_argument("--json", action="store_true", help="machine-readable results")
    doctor.add_argument(
        "--crm-token-env",
        default="COPILOT_DOCTOR_CRM_TOKEN",
        metavar="NAME",
        help="environment variable holding a rep's delegated CRM token (crm.read) to list the CRM's tools",
    )
    doctor.add_argument(
        "--only",
        action="append",
        metavar="PREFIX",
        help="run only the checks whose name starts with PREFIX (e.g. crm), after the settings checks; "
        "repeatable",
    )
    crm = commands.add_parser("crm", help="CRM environment administration")
    crm_commands = crm.add_subparsers(dest="crm_command", required=True)
    prepare = crm_commands.add_parser(
        "prepare",
        help="create the key column and its alternate keys in the Dataverse environment (idempotent); "
        "with --allow-mcp-client, also enable the app as an allowed MCP client",
    )
    prepare.add_argument("--json", action="store_true", help="machine-readable output")
    prepare.add_argument(
        "--token-env",
        default=DEFAULT_ADMIN_TOKEN_ENV,
        metavar="NAME",
        help="environment variable holding a System Administrator's delegated token for CRM_URL",
    )
    prepare.add_argument(
        "--allow-mcp-client",
        metavar="APP_ID",
        help="the app's client id to add (or enable) as an allowed MCP client of the environment",
    )
    return parser


def _data_arguments(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``data export|delete`` (a rep's data on request) and ``retention status|run``."""
    data = commands.add_parser("data", help="a rep's stored data on request: export or delete")
    data_commands = data.add_subparsers(dest="data_command", required=True)
    for name, help_text in (
        ("export", "write everything stored about a rep as JSON"),
        ("delete", "delete it"),
    ):
        sub = data_commands.add_parser(name, help=help_text)
        sub.add_argument("--rep", required=True, help="the rep's AAD object id")
        sub.add_argument("--tenant", help="only this tenant's rows (default: every tenant)")
        sub.add_argument("--json", action="store_true")
        if name == "export":
            sub.add_argument("--out", help="file to write the export to (default, or '-': stdout)")
        else:
            sub.add_argument(
                "--dry-run", action="store_true", help="count what would be deleted; delete nothing"
            )
            sub.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    retention = commands.add_parser("retention", help="expire idle threads, prune checkpoints and tokens")
    retention_commands = retention.add_subparsers(dest="retention_command", required=True)
    for name, help_text in (
        ("status", "what the policy keeps and removes now"),
        ("run", "remove exactly that"),
    ):
        sub = retention_commands.add_parser(name, help=help_text)
        sub.add_argument(
            "--days", type=int, help="idle days before a thread expires (default COPILOT_RETENTION_DAYS)"
        )
        sub.add_argument("--json", action="store_true")


async def _data(settings: Settings, args: argparse.Namespace) -> int:
    from copilot import cli_data

    if args.command == "retention":
        return await cli_data.retention(
            settings, command=args.retention_command, days=args.days, as_json=args.json
        )
    if args.data_command == "export":
        return await cli_data.data_export(
            settings, rep=args.rep, tenant=args.tenant, out=args.out, as_json=args.json
        )
    return await cli_data.data_delete(
        settings, rep=args.rep, tenant=args.tenant, dry_run=args.dry_run, yes=args.yes, as_json=args.json
    )


def _doctor(args: argparse.Namespace) -> int:
    """The preflight judges the whole deployed app, so it runs every layer's checks: it reaches
    the top layer (``functions.doctor``) lazily, for this command only (see test_layering)."""
    from copilot.doctor.command import main as doctor
    from functions.doctor import all_checks

    checks = all_checks()
    if args.only:
        # The settings checks build what every other check needs, so they always run.
        prefixes = ("settings.", *(p if p.endswith(".") else f"{p}." for p in args.only))
        checks = tuple(c for c in checks if c.name.startswith(prefixes))
    return asyncio.run(doctor(checks, as_json=args.json, crm_token_env=args.crm_token_env))


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text[:40]!r}") from None


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


async def _audit_verify(
    settings: Settings, as_json: bool, *, command: str = "verify", anchor: bool = True
) -> int:
    """``audit verify`` (check; anchor the head if it verifies and moved) or ``audit anchor``
    (check; always anchor). Exit 1 when the log does not verify."""
    config = audit.audit_config(settings)
    written: audit.Anchor | None = None
    async with connect(settings) as conn:
        report = await audit.verify(conn, config=config)
        if report.ok and (anchor or command == "anchor"):
            written = await audit.seal(conn, report, config=config, only_if_advanced=command == "verify")
    last = written or report.last_anchor
    if as_json:
        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "rows_checked": report.rows_checked,
                    "last_id": report.last_id,
                    "head_hash": report.head_hash,
                    "first_bad_id": report.first_bad_id,
                    "problem": report.problem,
                    "truncated": report.truncated,
                    "anchors_checked": report.anchors_checked,
                    "anchor_store": report.anchor_store,
                    "last_anchor": None
                    if last is None
                    else {
                        "last_id": last.last_id,
                        "head_hash": last.head_hash,
                        "rows": last.rows,
                        "time": last.time.isoformat(),
                        "key_id": last.key_id,
                    },
                    "anchored_now": written is not None,
                }
            )
        )
    elif report.ok:
        print(f"audit log intact: {report.rows_checked} rows")
        print(f"head: {report.head_hash} (row {report.last_id})")
        if last is None:
            print("anchor: none yet (a removed tail cannot be detected until one is written)")
        else:
            print(
                f"anchor: row {last.last_id} ({last.rows} rows) at {last.time.isoformat()}"
                f"{' (written now)' if written is not None else ''} in {report.anchor_store}"
            )
    else:
        where = f"at row {report.first_bad_id}" if report.first_bad_id is not None else "(anchor store)"
        print(f"audit log TAMPERED {where}: {report.problem}")
    return 0 if report.ok else 1


async def _knowledge(settings: Settings, args: argparse.Namespace) -> int:
    from copilot.knowledge import command as knowledge

    if args.knowledge_command == "ingest":
        return await knowledge.ingest(
            settings,
            target=args.target,
            tenant=args.tenant,
            acl=args.acl,
            as_json=args.json,
            bearer_env=args.bearer_env,
        )
    if args.knowledge_command == "list":
        return await knowledge.list_command(settings, tenant=args.tenant, as_json=args.json)
    return await knowledge.remove_command(
        settings, tenant=args.tenant, document_id=args.document_id, as_json=args.json
    )


def _error(message: str) -> None:
    """One line on stderr, whatever the message quotes (newlines, a megabyte of input)."""
    line = " ".join(message.splitlines()).strip() or "unknown error"
    if len(line) > MAX_ERROR_CHARS:
        line = line[: MAX_ERROR_CHARS - 1] + "…"
    print(f"error: {line}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the process exit code.

    Bad input (see ``_BAD_INPUT``) is one ``error:`` line and exit code 2, before anything
    is changed (``ask`` / ``resume`` / ``chat`` check their arguments before signing in);
    a failure of a service is one line and exit code 1; never a traceback.
    """
    args = _parser().parse_args(argv)
    if args.command == "doctor":  # before Settings(): invalid settings are what it reports
        return _doctor(args)
    return guarded(Settings, lambda settings: _dispatch(args, settings))


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    """The command ``args`` names, run with ``settings`` (errors are :func:`guarded`'s)."""
    if args.command == "db" and args.db_command == "migrate":
        return asyncio.run(_db_migrate(settings, args.json))
    if args.command == "audit":
        return asyncio.run(
            _audit_verify(
                settings,
                args.json,
                command=args.audit_command,
                anchor=not getattr(args, "no_anchor", False),
            )
        )
    if args.command == "ask":
        return asyncio.run(conversation.ask(settings, args.rep, args.thread, args.question, args.json))
    if args.command == "resume":
        return asyncio.run(conversation.resume(settings, args.rep, args.thread, args.decisions, args.json))
    if args.command == "chat":
        return asyncio.run(conversation.chat(settings, args.rep, args.thread, args.json))
    if args.command == "analytics":
        from copilot.analytics.command import main as analytics_main

        return asyncio.run(analytics_main(settings, since=args.since, tenant=args.tenant, as_json=args.json))
    if args.command == "knowledge":
        return asyncio.run(_knowledge(settings, args))
    if args.command == "crm":
        from copilot.crm.command import prepare_main

        return asyncio.run(
            prepare_main(
                settings,
                token_env=args.token_env,
                allow_mcp_client=args.allow_mcp_client,
                as_json=args.json,
            )
        )
    if args.command in ("data", "retention"):
        return asyncio.run(_data(settings, args))
    if args.command == "brief":
        from copilot.cli_briefs import main as brief_main

        return asyncio.run(
            brief_main(settings, rep=args.rep, at=args.at, lead_minutes=args.lead_minutes, as_json=args.json)
        )
    if args.command == "digest":
        from copilot.cli_briefs import digest_main

        return asyncio.run(digest_main(settings, rep=args.rep, at=args.at, as_json=args.json))
    raise AssertionError(f"unhandled command {args}")


def guarded(prepare: Callable[[], T], command: Callable[[T], int]) -> int:
    """Run a command at the process's edge: ``python -m copilot``'s, and the tooling's
    (``python -m bench``, ``python -m evals``).

    ``prepare`` reads the settings: invalid ones are one line and exit 1. ``command`` then
    runs: bad input (:data:`_BAD_INPUT`) is one line and exit 2, a failure of a service one
    line and exit 1, never a traceback.
    """
    try:
        prepared = prepare()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        _error(f"invalid configuration ({where}): {first['msg']}")
        return 1
    except ConfigurationError as exc:  # e.g. a deployment left on the offline model
        _error(str(exc))
        return 1
    try:
        return command(prepared)
    except _BAD_INPUT as exc:
        _error(str(exc))
        return 2
    except KeyboardInterrupt:
        return 130
    except CopilotError as exc:
        _error(str(exc))
        return 1
    except Exception as exc:  # noqa: BLE001 - the outermost edge: a one-line error, never a traceback
        _error(f"unexpected internal error ({type(exc).__name__}): {exc}")
        return 1
