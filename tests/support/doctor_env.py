"""A deployed-like configuration on the sandbox for ``python -m copilot doctor`` tests.

Everything is real and reached over its wire protocol: embedded PostgreSQL (a migrated
database and one left behind), the sandbox's CRM MCP server, identity provider and Graph
stand-in, the fake OpenAI server (OpenAI and Azure routes), the fake LangSmith, Azurite's
queue service. :class:`StubCrm` is a second MCP server that lists the sandbox's tools plus a
write tool the copilot does not gate, for the "unexpected write tool" case.
"""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bot.package import PackageSettings, build_package
from copilot.persistence.audit_keys import generate_key_entry
from tests.support.sandbox_process import SandboxProcess, free_port
from tests.support.threaded_server import ThreadedServer

UNGATED_WRITE_TOOL = "delete_account"

AZURE_DEPLOYMENT = "doctor-fallback"

BOT_DOMAIN = "crm-copilot.tailspin-toys.com"
"""The deployment's bot domain (the app package's validDomains and SSO resource)."""

SANDBOX_TENANT = "00000000-0000-0000-0000-000000000001"
"""The sandbox directory's first tenant (Contoso): where its bot app is registered."""


def closed_url(scheme: str = "http") -> str:
    """A loopback URL nothing listens on (the port was free a moment ago)."""
    return f"{scheme}://127.0.0.1:{free_port()}"


def deployed_environment(
    *,
    database_url: str,
    sandbox: SandboxProcess,
    openai_url: str,
    langsmith_url: str,
    queue_connection: str,
    anchor_file: str,
    app_package: str,
) -> dict[str, str]:
    """The app settings of a good deployment whose services are the local stand-ins (and the
    app package the doctor compares with them, built by :func:`app_package_for`)."""
    return {
        "COPILOT_ENVIRONMENT": "deployed",
        "DATABASE_URL": database_url,
        # The sandbox's bot app: bot.credentials gets a Bot Connector token with these.
        "MicrosoftAppId": sandbox.settings.bot_app_id,
        "MicrosoftAppPassword": sandbox.settings.bot_client_secret,
        "MicrosoftAppTenantId": SANDBOX_TENANT,
        "MicrosoftAppType": "SingleTenant",
        "BOT_CONNECTOR_AUTHORITY": sandbox.settings.idp_base_url,
        "BOT_CONNECTOR_CA_BUNDLE": str(sandbox.settings.ca_cert_path),
        "BOT_CONNECTOR_SCOPE": sandbox.settings.bot_connector_audience,
        "CRM_MCP_URL": sandbox.settings.mcp_url,
        "GRAPH_BASE_URL": f"{sandbox.settings.http_base_url}/v1.0",
        "ENTRA_AUTHORITY": sandbox.settings.idp_base_url,
        "ENTRA_CA_BUNDLE": str(sandbox.settings.ca_cert_path),
        "COPILOT_MODEL": "openai:gpt-doctor",
        "OPENAI_BASE_URL": f"{openai_url}/v1",
        "OPENAI_API_KEY": "sk-doctor",
        "COPILOT_FALLBACK_MODELS": f"azure_openai:{AZURE_DEPLOYMENT}",
        "AZURE_OPENAI_ENDPOINT": openai_url,
        "AZURE_OPENAI_API_KEY": "azure-doctor",
        "OPENAI_API_VERSION": "2024-10-21",
        "COPILOT_AUDIT_HMAC_KEYS": generate_key_entry("doctor-k1"),
        "COPILOT_AUDIT_ANCHOR_FILE": anchor_file,
        "LANGSMITH_TRACING": "true",
        "LANGSMITH_ENDPOINT": langsmith_url,
        "LANGSMITH_API_KEY": "ls-doctor",
        "COPILOT_TRACE_PSEUDONYM_KEY": base64.b64encode(secrets.token_bytes(32)).decode(),
        "COPILOT_TOKEN_ENCRYPTION_KEY": Fernet.generate_key().decode(),
        # The sandbox's token service stand-in holds the bot's OAuth connection.
        "COPILOT_SSO_CONNECTION": sandbox.settings.sso_connection_name,
        "OAUTH_URL": sandbox.settings.http_base_url,
        "AzureWebJobsStorage": queue_connection,
        "COPILOT_TURN_QUEUE": "copilot-turns",
        "COPILOT_DOCTOR_CRM_TOKEN": sandbox.token("alex", ["crm.read"]),
        "BOT_DOMAIN": BOT_DOMAIN,
        "COPILOT_DOCTOR_APP_PACKAGE": app_package,
    }


def app_package_for(out: Path, *, app_id: str, domain: str = "") -> str:
    """A Teams app package for ``app_id`` and ``domain`` (default :data:`BOT_DOMAIN`), as
    ``make infra-package`` builds it; its path."""
    settings = PackageSettings.model_validate(
        {
            "MicrosoftAppId": app_id,
            "BOT_DOMAIN": domain or BOT_DOMAIN,
            "PUBLISHER_NAME": "Tailspin Sales IT",
            "WEBSITE_URL": "https://tailspin-toys.com/crm-copilot",
            "PRIVACY_URL": "https://tailspin-toys.com/privacy",
            "TERMS_URL": "https://tailspin-toys.com/terms",
        }
    )
    return str(build_package(settings, out))


class StubCrm:
    """An MCP server (streamable HTTP, JSON responses) listing ``tools`` and requiring a bearer token.

    Only what listing needs: ``initialize``, the ``initialized`` notification, ``tools/list``.
    """

    def __init__(self, tools: list[dict[str, Any]]):
        self.tools = tools
        self._server = ThreadedServer(
            Starlette(routes=[Route("/mcp", self._mcp, methods=["GET", "POST", "DELETE"])])
        )

    def __enter__(self) -> StubCrm:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    @property
    def url(self) -> str:
        return f"{self._server.url}/mcp"

    async def _mcp(self, request: Request) -> Response:
        if not request.headers.get("authorization", "").startswith("Bearer "):
            return JSONResponse(
                {"error": "invalid_token"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        if request.method != "POST":
            return Response(status_code=405)
        message = json.loads(await request.body())
        method = message.get("method")
        if "id" not in message:  # a notification
            return Response(status_code=202)
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "stub-crm", "version": "1.0"},
            }
        elif method == "tools/list":
            result = {"tools": self.tools}
        else:
            return JSONResponse(
                {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no"}}
            )
        return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": result})


def sandbox_tools_with_an_ungated_write(sandbox: SandboxProcess, token: str) -> list[dict[str, Any]]:
    """The sandbox's own tool list, plus a write tool no registry entry calls."""
    response = sandbox.rpc(token, "tools/list")
    response.raise_for_status()
    tools: list[dict[str, Any]] = response.json()["result"]["tools"]
    extra = {
        "name": UNGATED_WRITE_TOOL,
        "description": "Delete an account.",
        "inputSchema": {"type": "object", "properties": {"account_id": {"type": "string"}}},
        "annotations": {"readOnlyHint": False, "destructiveHint": True},
    }
    return [*tools, extra]
