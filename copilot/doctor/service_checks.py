"""Checks of what the copilot talks to: Entra, the CRM's MCP server, Graph, the models, LangSmith.

Each makes the smallest real call that shows the service is there and configured: the
authority's OpenID metadata and signing keys, the CRM's tool list (with a delegated token
the admin supplies; never a service account), Graph's drafts endpoint asking for a token,
one one-token model call per configured model, LangSmith's ``/info`` and a read with the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from langchain_core.messages import HumanMessage
from langsmith import tracing_context

from copilot.crm.connector import expected_tools
from copilot.crm.dataverse_admin import crm_trust
from copilot.doctor.crm_checks import crm_schema, crm_token, dataverse_tools
from copilot.doctor.framework import Check, CheckFailed, CheckSkipped, DoctorContext
from copilot.errors import AuthError, CopilotError, CrmUnavailable
from copilot.models.factory import build_model
from copilot.settings import Settings
from copilot.tls import ssl_context
from copilot.tools.crm_client import TRANSPORT_ERRORS, open_crm_session

SETTINGS = "the copilot's settings (settings.copilot)"
TIMEOUT_SECONDS = 10.0
_LIST_ERRORS: tuple[type[BaseException], ...] = (CrmUnavailable, *TRANSPORT_ERRORS)
ENTRA_METADATA_TENANT = "organizations"
"""The authority's multi-tenant metadata document (what the sign-in and OBO paths start from)."""


@dataclass(frozen=True)
class CrmEndpoint:
    """The CRM's MCP endpoint answered (for ``crm.tools``)."""

    url: str


def _verify(settings: Settings) -> Any:
    return ssl_context(str(settings.ca_bundle) if settings.ca_bundle is not None else None)


async def _get(url: str, *, verify: Any = True, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(verify=verify, timeout=TIMEOUT_SECONDS, follow_redirects=False) as client:
        return await client.get(url, headers=headers)


async def entra_metadata(ctx: DoctorContext) -> str:
    """The Entra authority's OpenID metadata and its signing keys are reachable."""
    settings = ctx.need(Settings, SETTINGS)
    url = f"{settings.entra_authority.rstrip('/')}/{ENTRA_METADATA_TENANT}/v2.0/.well-known/openid-configuration"
    fix = "set ENTRA_AUTHORITY to the authority (https://login.microsoftonline.com) and let the app reach it"
    try:
        response = await _get(url, verify=_verify(settings))
    except httpx.HTTPError as exc:
        setting = "ENTRA_CA_BUNDLE" if "CERTIFICATE" in str(exc).upper() else "ENTRA_AUTHORITY"
        raise CheckFailed(
            f"{url} is unreachable: {type(exc).__name__}: {exc}", setting=setting, fix=fix
        ) from exc
    if response.status_code != 200:
        raise CheckFailed(f"{url} answered HTTP {response.status_code}", setting="ENTRA_AUTHORITY", fix=fix)
    try:
        metadata = response.json()
        jwks_uri, token_endpoint = str(metadata["jwks_uri"]), str(metadata["token_endpoint"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckFailed(f"{url} is not OpenID metadata", setting="ENTRA_AUTHORITY", fix=fix) from exc
    try:
        keys = (await _get(jwks_uri, verify=_verify(settings))).json().get("keys")
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        raise CheckFailed(
            f"the signing keys at {jwks_uri} are unreachable", setting="ENTRA_AUTHORITY", fix=fix
        ) from exc
    if not keys:
        raise CheckFailed(f"{jwks_uri} lists no signing keys", setting="ENTRA_AUTHORITY", fix=fix)
    return f"metadata and {len(keys)} signing key(s); token endpoint {token_endpoint}"


async def crm_endpoint(ctx: DoctorContext) -> str:
    """The CRM's MCP endpoint answers, and refuses a call without a token (an OAuth resource server)."""
    settings = ctx.need(Settings, SETTINGS)
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    try:
        # Dataverse's host may sit behind a private CA (the sandbox's); the reference CRM kept
        # the default trust it always had.
        verify: Any = crm_trust(settings) if settings.crm_kind == "dataverse" else True
        async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS, verify=verify) as client:
            response = await client.post(settings.crm_mcp_url, json=body, headers=headers)
    except httpx.HTTPError as exc:
        raise CheckFailed(
            f"the CRM's MCP server at {settings.crm_mcp_url} is unreachable: {type(exc).__name__}: {exc}",
            setting="CRM_MCP_URL",
            fix="set CRM_MCP_URL to the CRM's MCP endpoint (streamable HTTP) and let the app reach it",
        ) from exc
    if response.status_code in (401, 403):
        ctx.provide(CrmEndpoint(settings.crm_mcp_url))
        challenge = "with a" if "www-authenticate" in response.headers else "without a"
        return f"{settings.crm_mcp_url} answers and refuses a call without a token ({challenge} challenge)"
    if response.is_success:
        raise CheckFailed(
            f"the CRM's MCP server at {settings.crm_mcp_url} answers calls without a token",
            setting="CRM_MCP_URL",
            fix="the copilot calls the CRM as each rep (on-behalf-of): require the rep's bearer token "
            "on the MCP server, or point CRM_MCP_URL at the authenticated endpoint",
        )
    raise CheckFailed(
        f"{settings.crm_mcp_url} answered HTTP {response.status_code}, not an MCP server",
        setting="CRM_MCP_URL",
        fix="set CRM_MCP_URL to the CRM's MCP endpoint (e.g. https://<crm>/mcp)",
    )


def expected_crm_tools(settings: Settings) -> tuple[set[str], set[str]]:
    """The CRM MCP tools the copilot calls by name, as its CRM connector says: reads (its write
    tools' snapshots and checks, the briefs, the stats card) and writes (its writers)."""
    reads, writes = expected_tools(settings)
    return set(reads), set(writes)


async def crm_tools(ctx: DoctorContext) -> str:
    """The CRM lists every tool the code calls, reads as read-only, and no write tool the code does not gate."""
    settings = ctx.need(Settings, SETTINGS)
    ctx.need(CrmEndpoint, "the CRM's endpoint (crm.endpoint)")
    if not ctx.crm_token:
        raise CheckSkipped(
            "no delegated CRM token to list the tools with: put one (crm.read) in the environment variable "
            "named by --crm-token-env"
        )
    if settings.crm_kind == "dataverse":
        return await dataverse_tools(ctx, settings)
    try:
        async with open_crm_session(settings, ctx.crm_token) as session:
            listed = (await session.list_tools()).tools
    except AuthError as exc:
        raise CheckFailed(
            f"the CRM refused the token: {exc}",
            setting="CRM_RESOURCE",
            fix="use a rep's delegated token for the CRM's resource (CRM_RESOURCE) with crm.read",
        ) from exc
    except _LIST_ERRORS as exc:
        raise CheckFailed(
            f"could not list the CRM's tools: {exc}", setting="CRM_MCP_URL", fix="check CRM_MCP_URL"
        ) from exc
    read_only = {t.name for t in listed if t.annotations is not None and t.annotations.readOnlyHint is True}
    names = {t.name for t in listed}
    reads, writes = expected_crm_tools(settings)
    problems: list[str] = []
    if missing := sorted((reads | writes) - names):
        problems.append(f"missing tools the copilot calls: {', '.join(missing)}")
    if not_read_only := sorted((reads & names) - read_only):
        problems.append(f"reads not declared read-only (readOnlyHint): {', '.join(not_read_only)}")
    if writes_as_reads := sorted(writes & read_only):
        problems.append(
            f"write tools declared read-only, so they would be offered to the model without approval: "
            f"{', '.join(writes_as_reads)}"
        )
    # A connector that writes through the Web API (Dataverse) calls no MCP write tool: the
    # CRM's own MCP writes are never offered to the model (not read-only) nor called.
    if writes and (unexpected := sorted(names - read_only - writes)):
        problems.append(
            f"unexpected write tools (not read-only, not one the copilot gates): {', '.join(unexpected)}"
        )
    if problems:
        raise CheckFailed(
            "; ".join(problems),
            setting="CRM_MCP_URL",
            fix="the CRM's MCP server must list the copilot's reads as read-only and no other write tool: "
            "remove or allow-list the tools on the server, or point CRM_MCP_URL at the right one",
        )
    if not writes:
        return (
            f"{len(read_only)} read-only tools offered to the model; the copilot writes through the "
            f"{settings.crm_kind} connector, never the CRM's MCP write tools"
        )
    return (
        f"{len(read_only)} read-only tools (incl. {', '.join(sorted(reads))}) and the write tools "
        f"{', '.join(sorted(writes))}; nothing else writes"
    )


async def graph(ctx: DoctorContext) -> str:
    """Graph's drafts endpoint answers (asking for a token, as it should)."""
    settings = ctx.need(Settings, SETTINGS)
    url = f"{settings.graph_base_url.rstrip('/')}/me/messages?$top=1"
    fix = "set GRAPH_BASE_URL to https://graph.microsoft.com/v1.0 and let the app reach it"
    try:
        response = await _get(url)
    except httpx.HTTPError as exc:
        raise CheckFailed(
            f"Graph at {url} is unreachable: {type(exc).__name__}: {exc}", setting="GRAPH_BASE_URL", fix=fix
        ) from exc
    if response.status_code in (200, 401, 403):
        return f"{settings.graph_base_url} answers (HTTP {response.status_code} without a token)"
    raise CheckFailed(
        f"{url} answered HTTP {response.status_code}, not Graph", setting="GRAPH_BASE_URL", fix=fix
    )


async def _one_token(name: str, setting: str) -> None:
    try:
        model = build_model(name)
    except CopilotError as exc:
        raise CheckFailed(str(exc), setting=setting, fix=f"correct {setting}") from exc
    try:
        # Not traced: LangChain would send this probe to LangSmith when LANGSMITH_TRACING is on.
        with tracing_context(enabled=False):
            await model.ainvoke([HumanMessage("Reply with OK.")], max_tokens=1)
    except Exception as exc:  # every provider raises its own errors: any of them means no answer
        raise CheckFailed(
            f"model {name!r} did not answer a one-token call: {type(exc).__name__}: {exc}",
            setting=setting,
            fix=f"check {name!r}'s deployment name and its provider's endpoint and key "
            "(AZURE_OPENAI_ENDPOINT, AZURE_OPENAI_API_KEY, OPENAI_API_VERSION for azure_openai:; "
            "OPENAI_BASE_URL, OPENAI_API_KEY for openai:)",
        ) from exc


async def model_primary(ctx: DoctorContext) -> str:
    settings = ctx.need(Settings, SETTINGS)
    await _one_token(settings.copilot_model, "COPILOT_MODEL")
    return f"{settings.copilot_model} answered a one-token call"


async def model_fallbacks(ctx: DoctorContext) -> str:
    settings = ctx.need(Settings, SETTINGS)
    names = settings.fallback_model_names()
    if not names:
        return "none configured (COPILOT_FALLBACK_MODELS unset)"
    for position, name in enumerate(names, start=1):
        await _one_token(name, f"COPILOT_FALLBACK_MODELS (entry {position})")
    return f"each answered a one-token call: {', '.join(names)}"


async def langsmith(ctx: DoctorContext) -> str:
    """With tracing on, LangSmith answers and accepts the API key."""
    settings = ctx.need(Settings, SETTINGS)
    if not settings.langsmith_tracing:
        return "tracing is off (LANGSMITH_TRACING unset): nothing is sent"
    base = settings.langsmith_endpoint.rstrip("/")
    fix = "set LANGSMITH_ENDPOINT to your LangSmith API (e.g. https://api.smith.langchain.com) and let the app reach it"
    try:
        info = await _get(f"{base}/info")
    except httpx.HTTPError as exc:
        raise CheckFailed(
            f"LangSmith at {base} is unreachable: {type(exc).__name__}: {exc}",
            setting="LANGSMITH_ENDPOINT",
            fix=fix,
        ) from exc
    if info.status_code != 200:
        raise CheckFailed(
            f"{base}/info answered HTTP {info.status_code}", setting="LANGSMITH_ENDPOINT", fix=fix
        )
    headers = {
        "x-api-key": settings.langsmith_api_key.get_secret_value() if settings.langsmith_api_key else ""
    }
    if settings.langsmith_workspace_id:
        headers["x-tenant-id"] = settings.langsmith_workspace_id
    try:
        sessions = await _get(f"{base}/sessions?limit=1", headers=headers)
    except httpx.HTTPError as exc:
        raise CheckFailed(
            f"LangSmith at {base} is unreachable: {exc}", setting="LANGSMITH_ENDPOINT", fix=fix
        ) from exc
    if sessions.status_code in (401, 403):
        raise CheckFailed(
            f"LangSmith refused the API key (HTTP {sessions.status_code})",
            setting="LANGSMITH_API_KEY",
            fix="set LANGSMITH_API_KEY to a valid key (and LANGSMITH_WORKSPACE_ID for a workspace key)",
        )
    return f"{base} answers and accepts the key (project {settings.langsmith_project!r})"


CHECKS = (
    Check("entra.metadata", entra_metadata),
    Check("crm.endpoint", crm_endpoint),
    Check("crm.token", crm_token),
    Check("crm.tools", crm_tools),
    Check("crm.schema", crm_schema),
    Check("graph.reachable", graph),
    Check("model.primary", model_primary),
    Check("model.fallbacks", model_fallbacks),
    Check("langsmith.reachable", langsmith),
)
