"""The sandbox as one ASGI app: CRM MCP endpoint, its Dataverse face (Web API and MCP),
identity provider, Bot Framework token service, drafts mailbox, admin."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
from mcp.server.fastmcp.server import StreamableHTTPASGIApp
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sandbox import db
from sandbox.access import crm_access_enabled
from sandbox.calendar import calendar_routes
from sandbox.config import SandboxSettings
from sandbox.crm import CrmService
from sandbox.dataverse.mcp_gate import DataverseMcpGate
from sandbox.dataverse.mcp_tools import build_dataverse_mcp
from sandbox.dataverse.org import OrgConfig
from sandbox.dataverse.records import DataverseService
from sandbox.dataverse.webapi import WebApi
from sandbox.directory import TENANTS, find_user
from sandbox.drive import drive_routes
from sandbox.identity.provider import identity_routes
from sandbox.knobs import Knobs, KnobState
from sandbox.mailbox import mailbox_routes
from sandbox.mailbox_settings import MailboxSettingsState, mailbox_settings_routes
from sandbox.mcp_auth import READ_SCOPE, WRITE_SCOPE, McpAuthGate
from sandbox.mcp_server import build_mcp_server
from sandbox.people import people_routes
from sandbox.token_service import TokenServiceState, token_service_routes
from sandbox.transcripts import transcript_routes


@dataclass
class SandboxApp:
    """The composed app plus the live state tests and the CLI poke at."""

    asgi: Starlette
    knobs: KnobState
    mailbox_settings: MailboxSettingsState
    token_service: TokenServiceState


def _admin_routes(
    settings: SandboxSettings,
    knobs: KnobState,
    mailbox_settings: MailboxSettingsState,
    token_service: TokenServiceState,
) -> list[Route]:
    async def get_knobs(_: Request) -> JSONResponse:
        return JSONResponse(knobs.knobs.model_dump())

    async def put_knobs(request: Request) -> JSONResponse:
        try:
            new = Knobs.model_validate_json(await request.body())
        except ValidationError as exc:
            return JSONResponse(
                {"error": {"code": "validation", "message": "invalid knobs", "details": exc.errors()}},
                status_code=400,
            )
        knobs.set(new)
        return JSONResponse(new.model_dump())

    async def request_log(_: Request) -> JSONResponse:
        return JSONResponse(await anyio.to_thread.run_sync(db.read_request_log, settings.db_path))

    async def export(_: Request) -> JSONResponse:
        return JSONResponse(await anyio.to_thread.run_sync(db.export_state, settings.db_path))

    async def reset(_: Request) -> JSONResponse:
        await anyio.to_thread.run_sync(db.reset, settings.db_path, settings.today())
        knobs.set(Knobs())
        mailbox_settings.reset()
        token_service.reset()
        return JSONResponse({"reset": True})

    async def put_crm_access(request: Request) -> JSONResponse:
        """Revoke (``{"enabled": false}``) or restore a user's CRM access at runtime."""
        handle = request.path_params["handle"]
        user = find_user(handle)
        if user is None:
            return JSONResponse(
                {"error": {"code": "not_found", "message": f"unknown user {handle!r}", "details": {}}},
                status_code=404,
            )
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError:
            body = None
        enabled = body.get("enabled") if isinstance(body, dict) else None
        if not isinstance(enabled, bool) or set(body) != {"enabled"}:
            return JSONResponse(
                {
                    "error": {
                        "code": "validation",
                        "message": 'body must be {"enabled": true|false}',
                        "details": {},
                    }
                },
                status_code=400,
            )
        await anyio.to_thread.run_sync(
            lambda: db.set_crm_access(
                settings.db_path,
                user_id=user.id,
                tenant_id=user.tenant_id,
                enabled=enabled,
                default=user.crm_access,
            )
        )
        effective = await anyio.to_thread.run_sync(crm_access_enabled, settings.db_path, user)
        return JSONResponse(
            {"user": user.handle, "id": user.id, "crm_access": effective, "default": user.crm_access}
        )

    async def draft_sent(request: Request) -> JSONResponse:
        """The user sent a draft from their own mail client (the sandbox itself never sends)."""
        draft_id = request.path_params["draft_id"]
        draft = await anyio.to_thread.run_sync(
            lambda: db.mark_draft_sent(settings.db_path, draft_id=draft_id)
        )
        if draft is None:
            return JSONResponse(
                {"error": {"code": "not_found", "message": f"no draft {draft_id!r}", "details": {}}},
                status_code=404,
            )
        return JSONResponse({"id": draft["id"], "sent_at": draft["sent_at"]})

    async def add_contact(request: Request) -> JSONResponse:
        """Add a contact to an account, created now or at ``created_at`` (ISO 8601)."""
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError:
            body = None
        fields = body if isinstance(body, dict) else {}
        text = {k: fields.get(k, "") for k in ("account_id", "name", "title", "email", "phone")}
        created = fields.get("created_at") or db.utc_now()
        try:
            moment = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
        except ValueError:
            moment = None
        if (
            not isinstance(body, dict)
            or set(body) - {*text, "created_at"}
            or not all(isinstance(v, str) for v in text.values())
            or not text["account_id"]
            or not text["name"]
            or moment is None
        ):
            return JSONResponse(
                {
                    "error": {
                        "code": "validation",
                        "message": "body must be {account_id, name[, title, email, phone, created_at]}",
                        "details": {},
                    }
                },
                status_code=400,
            )
        at = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)
        contact = await anyio.to_thread.run_sync(
            lambda: db.add_contact(
                settings.db_path,
                account_id=text["account_id"],
                name=text["name"],
                title=text["title"],
                email=text["email"],
                phone=text["phone"],
                created_at=at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            )
        )
        if contact is None:
            return JSONResponse(
                {
                    "error": {
                        "code": "not_found",
                        "message": f"no account {text['account_id']!r}",
                        "details": {},
                    }
                },
                status_code=404,
            )
        return JSONResponse(contact, status_code=201)

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def protected_resource(_: Request) -> JSONResponse:
        # RFC 9728 metadata: where MCP clients learn which authorization server to use.
        return JSONResponse(
            {
                "resource": settings.crm_audience,
                "authorization_servers": [settings.issuer(t.id) for t in TENANTS],
                "scopes_supported": [READ_SCOPE, WRITE_SCOPE],
                "bearer_methods_supported": ["header"],
            }
        )

    return [
        Route("/healthz", health, methods=["GET"]),
        Route("/.well-known/oauth-protected-resource", protected_resource, methods=["GET"]),
        Route("/admin/knobs", get_knobs, methods=["GET"]),
        Route("/admin/knobs", put_knobs, methods=["PUT"]),
        Route("/admin/request-log", request_log, methods=["GET"]),
        Route("/admin/export", export, methods=["GET"]),
        Route("/admin/reset", reset, methods=["POST"]),
        Route("/admin/users/{handle}/crm-access", put_crm_access, methods=["PUT"]),
        Route("/admin/drafts/{draft_id}/sent", draft_sent, methods=["POST"]),
        Route("/admin/contacts", add_contact, methods=["POST"]),
    ]


def build_app(settings: SandboxSettings, knobs: Knobs | None = None) -> SandboxApp:
    """Compose the sandbox app; the database is created and seeded if it is new."""
    db.ensure_schema(settings.db_path, settings.today())
    state = KnobState(knobs)
    mailbox_settings = MailboxSettingsState()
    token_service = TokenServiceState()
    mcp = build_mcp_server(settings, CrmService(settings.db_path, settings.today))
    mcp.streamable_http_app()  # creates the session manager the endpoint below drives
    endpoint = McpAuthGate(StreamableHTTPASGIApp(mcp.session_manager), settings, state)
    # The Dataverse face of the same records: Web API v9.2 and the Dataverse MCP tools.
    dataverse = DataverseService(settings.db_path, settings.dataverse_activity_key)
    org = OrgConfig(settings, state)
    dataverse_mcp = build_dataverse_mcp(settings, state, dataverse)
    dataverse_mcp.streamable_http_app()
    dataverse_endpoint = DataverseMcpGate(
        StreamableHTTPASGIApp(dataverse_mcp.session_manager), settings, state, org
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[dict[str, Any]]:
        async with mcp.session_manager.run(), dataverse_mcp.session_manager.run():
            yield {}

    routes = [
        Route("/mcp", endpoint, methods=["GET", "POST", "DELETE"]),
        Route("/api/mcp", dataverse_endpoint, methods=["GET", "POST", "DELETE"]),
        *WebApi(settings, state, dataverse, org).routes(),
        *identity_routes(settings),
        *mailbox_routes(settings),
        *calendar_routes(settings),
        *transcript_routes(settings),
        *mailbox_settings_routes(settings, mailbox_settings),
        *people_routes(settings),
        *drive_routes(settings),
        *token_service_routes(settings, token_service, state),
        *_admin_routes(settings, state, mailbox_settings, token_service),
    ]
    return SandboxApp(
        asgi=Starlette(routes=routes, lifespan=lifespan),
        knobs=state,
        mailbox_settings=mailbox_settings,
        token_service=token_service,
    )
