"""CRM checks that need the admin's delegated token: its audience, the Dataverse MCP server, the key column.

* ``crm.token``: the token's ``aud`` (decoded, never verified and never printed) is the CRM's
  resource: ``CRM_URL`` on the ``dataverse`` profile, ``CRM_RESOURCE`` on ``reference``;
* ``crm.tools`` on ``dataverse`` (:func:`dataverse_tools`): MCP ``initialize`` and ``tools/list``
  on ``<CRM_URL>/api/mcp``. A 403 there is Dataverse refusing a client app that is not an
  allowed MCP client; a 401 is the token (audience, expiry, scope). The listing must hold a
  read-only tool that runs a query, found by its shape (:mod:`copilot.crm.discovery`);
* ``crm.schema`` on ``dataverse``: the key column (``CRM_DATAVERSE_KEY_COLUMN``) exists on the
  activity tables and ``opportunity``, and an active alternate key over it on the activity tables.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

import httpx
from mcp.types import LATEST_PROTOCOL_VERSION, ListToolsResult, Tool
from pydantic import ValidationError

from copilot.crm.dataverse_admin import DataverseAdmin, crm_trust, key_tables
from copilot.crm.discovery import QUERY_CAPABILITY, QUERY_NEEDED_FOR, QUERY_TOOL_PREFERENCE, find_query_tool
from copilot.doctor.framework import CheckFailed, CheckSkipped, DoctorContext
from copilot.errors import CrmCallError
from copilot.settings import Settings

SETTINGS = "the copilot's settings (settings.copilot)"
TIMEOUT_SECONDS = 15.0
NO_TOKEN = "no delegated CRM token: put a rep's token in the environment variable named by --crm-token-env"
ALLOWED_CLIENT_FIX = (
    "an environment admin adds the app's client id {app_id} to the environment's allowed MCP clients: "
    "Power Platform admin center > Environments > <environment> > Settings > Product > Features > "
    "Dataverse Model Context Protocol > Advanced settings (add the client, Is Enabled = Yes), or run "
    "`python -m copilot crm prepare --allow-mcp-client {app_id}` with an admin's token (an "
    "allowedmcpclients row with isenabled=true)"
)
PREPARE_FIX = (
    "as a System Administrator of the environment, run `python -m copilot crm prepare` (it creates "
    "the column and its alternate keys and skips what exists); or set CRM_DATAVERSE_KEY_COLUMN to the "
    "column you created"
)


@dataclass(frozen=True)
class CrmToken:
    """The doctor's CRM token is for the CRM's resource (for the checks that call the CRM with it)."""

    audience: str


def token_claims(token: str) -> dict[str, Any] | None:
    """A JWT's payload, decoded without verifying it (the CRM verifies; this only reads ``aud``)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


def _resource_setting(settings: Settings) -> str:
    """The setting the CRM's resource comes from: on ``dataverse`` it derives from CRM_URL
    unless CRM_RESOURCE overrides it."""
    url = (settings.crm_url or "").rstrip("/")
    if settings.crm_kind == "dataverse" and settings.crm_resource.rstrip("/") == url:
        return "CRM_URL"
    return "CRM_RESOURCE"


def _mcp_setting(settings: Settings) -> str:
    """The setting the MCP endpoint comes from (derived from CRM_URL unless CRM_MCP_URL overrides)."""
    return (
        "CRM_URL"
        if settings.crm_mcp_url == f"{(settings.crm_url or '').rstrip('/')}/api/mcp"
        else "CRM_MCP_URL"
    )


async def crm_token(ctx: DoctorContext) -> str:
    """The token the doctor was given is for the CRM this configuration names."""
    settings = ctx.need(Settings, SETTINGS)
    if not ctx.crm_token:
        raise CheckSkipped(NO_TOKEN)
    setting = _resource_setting(settings)
    claims = token_claims(ctx.crm_token)
    if claims is None:
        raise CheckFailed(
            "the CRM token is not a JWT access token",
            setting=setting,
            fix="give the doctor a rep's access token for the CRM (not an ID token or a refresh token)",
        )
    audience = claims.get("aud")
    audiences = [audience] if isinstance(audience, str) else [a for a in audience or [] if isinstance(a, str)]
    expected = settings.crm_resource.rstrip("/")
    if expected.lower() not in {a.rstrip("/").lower() for a in audiences}:
        scope = f"{expected}/.default" if settings.crm_kind == "dataverse" else f"{expected}/crm.read"
        raise CheckFailed(
            f"the CRM token's audience is {', '.join(audiences) or '(none)'}, not {setting} {expected}: "
            "it was issued for another environment or resource",
            setting=setting,
            fix=f"set {setting} to the environment the reps' tokens are for (https://<org>.crm.dynamics.com, "
            f"no path), or get the token for {scope}",
        )
    ctx.provide(CrmToken(expected))
    scopes = str(claims.get("scp") or "")
    return f"the token's audience is {setting} ({expected}); scopes: {scopes or '(none)'}"


# --- the Dataverse MCP server -------------------------------------------------------------


def _messages(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a streamable-HTTP reply: one JSON body, or an event stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        found = []
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                found.append(json.loads(line[5:]))
        return found
    body = response.json()
    return body if isinstance(body, list) else [body]


async def _rpc(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    method: str,
    params: dict[str, Any],
    rid: int,
) -> tuple[httpx.Response, dict[str, Any] | None]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if rid:
        body["id"] = rid
    response = await client.post(url, json=body, headers=headers)
    if not response.is_success or not rid:
        return response, None
    reply = next((m for m in _messages(response) if m.get("id") == rid), None)
    return response, reply


def _refused(settings: Settings, response: httpx.Response, token: str) -> CheckFailed:
    url = settings.crm_mcp_url
    if response.status_code == 403:
        claims = token_claims(token) or {}
        app_id = str(
            claims.get("azp") or claims.get("appid") or settings.app_client_id or "<the app's client id>"
        )
        return CheckFailed(
            f"{url} answered HTTP 403: the app {app_id} is not an allowed MCP client of this environment "
            "(Dataverse refuses MCP calls from client apps an admin has not enabled)",
            setting="MicrosoftAppId",
            fix=ALLOWED_CLIENT_FIX.format(app_id=app_id),
        )
    if response.status_code == 401:
        return CheckFailed(
            f"{url} answered HTTP 401: the token was not accepted (its audience, expiry or scopes)",
            setting=_resource_setting(settings),
            fix="give the app registration the Dynamics CRM delegated permissions user_impersonation and "
            "mcp.tools with admin consent, and get the rep's token for <CRM_URL>/.default",
        )
    return CheckFailed(
        f"{url} answered HTTP {response.status_code}, not the Dataverse MCP server",
        setting=_mcp_setting(settings),
        fix="set CRM_URL to the environment's URL (the MCP endpoint is <CRM_URL>/api/mcp) and turn the "
        "Dataverse MCP server on for the environment",
    )


async def list_mcp_tools(settings: Settings, token: str) -> list[Tool]:
    """``initialize`` then ``tools/list`` (every page) on the CRM's MCP endpoint, as ``token``'s user.

    By hand rather than through the MCP client: a refusal's HTTP status (401 or 403) is the
    diagnosis, and the client reports both as one error.
    """
    url = settings.crm_mcp_url
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    init = {
        "protocolVersion": LATEST_PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "copilot-doctor", "version": "1"},
    }
    try:
        async with httpx.AsyncClient(verify=crm_trust(settings), timeout=TIMEOUT_SECONDS) as client:
            response, reply = await _rpc(client, url, headers, "initialize", init, 1)
            if not response.is_success:
                raise _refused(settings, response, token)
            if reply is None or "result" not in reply:
                raise CheckFailed(
                    f"{url} did not answer MCP initialize: {reply}", setting="CRM_URL", fix="check CRM_URL"
                )
            if session := response.headers.get("mcp-session-id"):
                headers["Mcp-Session-Id"] = session
            version = reply["result"].get("protocolVersion")
            if isinstance(version, str):
                headers["MCP-Protocol-Version"] = version
            await _rpc(client, url, headers, "notifications/initialized", {}, 0)
            tools: list[Tool] = []
            cursor: str | None = None
            for page in range(2, 50):
                response, reply = await _rpc(
                    client, url, headers, "tools/list", {"cursor": cursor} if cursor else {}, page
                )
                if not response.is_success:
                    raise _refused(settings, response, token)
                if reply is None or "result" not in reply:
                    raise CheckFailed(
                        f"{url} did not answer tools/list: {reply}", setting="CRM_URL", fix="check CRM_URL"
                    )
                listed = ListToolsResult.model_validate(reply["result"])
                tools.extend(listed.tools)
                cursor = listed.nextCursor
                if not cursor:
                    break
    except httpx.HTTPError as exc:
        raise CheckFailed(
            f"the Dataverse MCP server at {url} is unreachable: {type(exc).__name__}: {exc}",
            setting="CRM_URL",
            fix="set CRM_URL to the environment's URL and let the app reach it",
        ) from exc
    except (ValueError, ValidationError) as exc:
        raise CheckFailed(
            f"{url} answered something other than MCP: {exc}", setting="CRM_URL", fix="check CRM_URL"
        ) from exc
    return tools


async def dataverse_tools(ctx: DoctorContext, settings: Settings) -> str:
    """``crm.tools`` on ``dataverse``: the app may call the MCP server, and it can run a query."""
    ctx.need(CrmToken, "a token for the CRM (crm.token)")
    assert ctx.crm_token is not None
    tools = await list_mcp_tools(settings, ctx.crm_token)
    query = find_query_tool(tools)
    read_only = sorted(
        t.name for t in tools if t.annotations is not None and t.annotations.readOnlyHint is True
    )
    if query is None:
        raise CheckFailed(
            f"the Dataverse MCP server lists no read-only tool that can {QUERY_CAPABILITY} "
            f"(read-only tools: {', '.join(read_only) or 'none'}); without it the copilot cannot "
            f"{QUERY_NEEDED_FOR}",
            setting="CRM_URL",
            fix="use the environment's GA Dataverse MCP server (<CRM_URL>/api/mcp), whose read_query "
            "tool runs Dataverse SQL, and check no connector policy or server change removed it",
        )
    renamed = (
        ""
        if query.name in QUERY_TOOL_PREFERENCE
        else f" (found by its shape; not named {QUERY_TOOL_PREFERENCE[0]})"
    )
    return (
        f"the app may call {settings.crm_mcp_url}; {len(tools)} tools, {len(read_only)} read-only; "
        f"queries run through {query.name}({query.parameter}){renamed}"
    )


# --- the key column -----------------------------------------------------------------------


async def crm_schema(ctx: DoctorContext) -> str:
    """The key column and its alternate keys exist (``dataverse``); nothing to prepare on ``reference``."""
    settings = ctx.need(Settings, SETTINGS)
    if settings.crm_kind == "reference":
        return "the reference CRM keys the copilot's writes itself (external_id, idempotency_key): nothing to prepare"
    ctx.need(CrmToken, "a token for the CRM (crm.token)")
    assert ctx.crm_token is not None
    admin = DataverseAdmin(settings, ctx.crm_token)
    column_tables, alternate_key_tables = key_tables(settings)
    column = settings.crm_dataverse_key_column
    try:
        no_column = [t for t in column_tables if not await admin.has_column(t)]
        states = [await admin.key_status(t) for t in alternate_key_tables if t not in no_column]
    except CrmCallError as exc:
        raise CheckFailed(
            f"could not read the environment's metadata: {exc}",
            setting=_resource_setting(settings),
            fix="give the doctor a token of a user with a Dynamics 365 Sales security role in the environment",
        ) from exc
    problems = []
    if no_column:
        problems.append(f"no column {column} on {', '.join(no_column)}")
    if no_key := [t for t in alternate_key_tables if t in no_column] + [
        s.table for s in states if s.status is None
    ]:
        problems.append(f"no alternate key over {column} on {', '.join(no_key)}")
    if problems:
        raise CheckFailed("; ".join(problems), setting="CRM_DATAVERSE_KEY_COLUMN", fix=PREPARE_FIX)
    if failed := [s.table for s in states if s.status == "Failed"]:
        raise CheckFailed(
            f"the alternate key over {column} failed to build on {', '.join(failed)} (duplicate values?)",
            setting="CRM_DATAVERSE_KEY_COLUMN",
            fix="clear duplicate key values, then reactivate the key (Power Apps > Tables > <table> > Keys, "
            "or the ReactivateEntityKey action)",
        )
    if building := [f"{s.table} ({s.status})" for s in states if s.status != "Active"]:
        raise CheckFailed(
            f"the alternate key over {column} is still being built on {', '.join(building)}",
            setting="CRM_DATAVERSE_KEY_COLUMN",
            fix="Dataverse builds a new key's index in the background: run the doctor again once it is Active",
        )
    return (
        f"{column} on {', '.join(column_tables)}; an active alternate key over it on "
        f"{', '.join(alternate_key_tables)}"
    )
