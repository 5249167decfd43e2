"""``python -m sandbox serve | token | users | export | reset``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from sandbox import db
from sandbox.config import SandboxSettings
from sandbox.directory import USERS, User, find_user
from sandbox.identity.tokens import issue_token
from sandbox.knobs import Knobs

CRM_SCOPES = ("crm.read", "crm.write")
GRAPH_SCOPES = ("Mail.ReadWrite", "Sites.Read.All", "Calendars.Read", "User.ReadBasic.All")
SSO_SCOPES = ("access_as_user",)
DATAVERSE_SCOPES = ("user_impersonation", "mcp.tools")


class UsageError(Exception):
    """Bad command-line input, reported as one line on stderr."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox", description="Sandbox CRM, identity and mailbox"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the CRM MCP server, identity provider and mailbox")
    serve.add_argument("--port", type=int, help="plain HTTP port (MCP at /mcp); default 8765")
    serve.add_argument("--https-port", type=int, help="HTTPS port (identity provider); default port+1")
    serve.add_argument("--knobs", help="test knobs as JSON, e.g. '{\"latency_ms\": 200}'")
    token = commands.add_parser("token", help="print a delegated access token for a user")
    token.add_argument("--rep", required=True, help="handle (e.g. alex) or AAD object id")
    token.add_argument(
        "--scope",
        nargs="+",
        action="extend",
        help="crm.read, crm.write (default both), Mail.ReadWrite, access_as_user (Teams SSO token), or"
        " user_impersonation mcp.tools (a Dataverse token for the org URL)",
    )
    token.add_argument("--lifetime", type=int, help="seconds until expiry (default from settings)")
    commands.add_parser("users", help="print the users as JSON")
    commands.add_parser("export", help="print the whole sandbox state as JSON")
    commands.add_parser("reset", help="restore the seed data (drops every change)")
    return parser


def _user(ref: str) -> User:
    user = find_user(ref)
    if user is None:
        handles = ", ".join(u.handle for u in USERS)
        raise UsageError(f"unknown user {ref!r}; known handles: {handles}")
    return user


def _audience(settings: SandboxSettings, scopes: list[str]) -> str:
    if all(s in CRM_SCOPES for s in scopes):
        return settings.crm_audience
    if all(s in GRAPH_SCOPES for s in scopes):
        return settings.graph_audience
    if all(s in SSO_SCOPES for s in scopes):
        return settings.bot_app_id_uri
    if all(s in DATAVERSE_SCOPES for s in scopes):
        return settings.org_url
    known = ", ".join((*CRM_SCOPES, *GRAPH_SCOPES, *SSO_SCOPES, *DATAVERSE_SCOPES))
    raise UsageError(f"scopes {scopes} must all belong to one resource; known scopes: {known}")


def _users_json() -> list[dict[str, object]]:
    by_id = {u.id: u for u in USERS}
    return [
        {
            "handle": u.handle,
            "name": u.name,
            "tenant": u.tenant_id,
            "role": u.role,
            "territory": u.territory,
            "manager": by_id[u.manager_id].handle if u.manager_id else None,
            "aad_object_id": u.aad_object_id,
            "email": u.email,
            "crm_access": u.crm_access,
        }
        for u in USERS
    ]


def _serve(settings: SandboxSettings, knobs_json: str | None) -> None:
    from sandbox.server import serve  # uvicorn and the app only when serving

    try:
        knobs = Knobs.model_validate_json(knobs_json) if knobs_json else None
    except ValidationError as exc:
        raise UsageError(f"invalid --knobs: {exc.errors()[0]['msg']}") from exc

    def ready() -> None:
        print(
            f"Sandbox CRM MCP server: {settings.mcp_url}\n"
            f"Identity provider:      {settings.idp_base_url}/<tenant>/v2.0 (CA: {settings.ca_cert_path})\n"
            f"Drafts mailbox:         {settings.http_base_url}/v1.0/me/messages\n"
            f"Dataverse (org {settings.org_url}): Web API {settings.http_base_url}/api/data/v9.2/,"
            f" MCP {settings.http_base_url}/api/mcp\n"
            "Try it:\n"
            "  TOKEN=$(python -m sandbox token --rep alex --scope crm.read)\n"
            f"  npx @modelcontextprotocol/inspector --cli {settings.mcp_url} --transport http \\\n"
            '    --header "Authorization: Bearer $TOKEN" --method tools/list\n'
            "Press Ctrl-C to stop.",
            flush=True,
        )

    asyncio.run(serve(settings, knobs, on_ready=ready))


def main(argv: Sequence[str] | None = None) -> int:
    """Run one sandbox command; returns the exit code."""
    args = _parser().parse_args(argv)
    overrides: dict[str, object] = {}
    if getattr(args, "port", None):
        overrides["http_port"] = args.port
        overrides["https_port"] = args.https_port or args.port + 1
    elif getattr(args, "https_port", None):
        overrides["https_port"] = args.https_port
    settings = SandboxSettings(**overrides)  # type: ignore[arg-type]
    try:
        if args.command == "serve":
            _serve(settings, args.knobs or os.environ.get("SANDBOX_KNOBS"))
        elif args.command == "token":
            scopes = list(args.scope or CRM_SCOPES)
            user = _user(args.rep)
            print(
                issue_token(
                    settings,
                    user=user,
                    audience=_audience(settings, scopes),
                    scopes=scopes,
                    lifetime=args.lifetime,
                )
            )
        elif args.command == "users":
            print(json.dumps(_users_json(), indent=2))
        elif args.command == "export":
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            db.ensure_schema(settings.db_path, settings.today())
            print(json.dumps(db.export_state(settings.db_path), indent=2, default=str))
        elif args.command == "reset":
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            db.reset(settings.db_path, settings.today())
            print(f"sandbox reset to its seed data ({settings.db_path})")
        else:
            raise AssertionError(f"unhandled command {args.command}")
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
