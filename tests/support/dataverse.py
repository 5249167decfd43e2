"""Talking to the sandbox's Dataverse face from tests: tokens, Web API calls, MCP calls, knobs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx

from sandbox.dataverse.ids import guid_for
from sandbox.directory import find_user
from tests.support.sandbox_process import SandboxProcess

DV_SCOPES = ["user_impersonation", "mcp.tools"]


def dv_token(sandbox: SandboxProcess, rep: str, scopes: list[str] | None = None, **kwargs: Any) -> str:
    """A delegated token for the org URL (what an OBO exchange for ``<org>/.default`` returns)."""
    return sandbox.token(
        rep, DV_SCOPES if scopes is None else scopes, audience=sandbox.settings.org_url, **kwargs
    )


def webapi(
    sandbox: SandboxProcess,
    method: str,
    path: str,
    rep: str | None = "alex",
    *,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    json: Any = None,
) -> httpx.Response:
    """One Web API request (``path`` relative to ``/api/data/v9.2/``, or an absolute URL)."""
    url = path if path.startswith("http") else f"{sandbox.settings.http_base_url}/api/data/v9.2/{path}"
    sent = {"accept": "application/json", "odata-version": "4.0", **(headers or {})}
    bearer = token if token is not None else (dv_token(sandbox, rep) if rep is not None else None)
    if bearer is not None:
        sent["authorization"] = f"Bearer {bearer}"
    return httpx.request(method, url, headers=sent, json=json, timeout=30)


def mcp(
    sandbox: SandboxProcess, token: str | None, method: str, params: dict[str, Any] | None = None
) -> httpx.Response:
    """One JSON-RPC request to the Dataverse MCP endpoint (``/api/mcp``)."""
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    return httpx.post(f"{sandbox.settings.http_base_url}/api/mcp", json=body, headers=headers, timeout=30)


def call_tool(sandbox: SandboxProcess, rep: str, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a Dataverse MCP tool as ``rep``; returns the CallToolResult."""
    response = mcp(sandbox, dv_token(sandbox, rep), "tools/call", {"name": tool, "arguments": arguments})
    response.raise_for_status()
    payload = response.json()
    assert "result" in payload, payload
    result: dict[str, Any] = payload["result"]
    return result


@contextlib.contextmanager
def knobs(sandbox: SandboxProcess, **changes: Any) -> Iterator[None]:
    """Set some knobs for the duration of a block, then put the previous ones back."""
    before = sandbox.admin("GET", "/admin/knobs")
    sandbox.admin("PUT", "/admin/knobs", {**before, **changes})
    try:
        yield
    finally:
        sandbox.admin("PUT", "/admin/knobs", before)


def user_guid(handle: str) -> str:
    """The systemuser GUID of a sandbox user."""
    user = find_user(handle)
    assert user is not None, handle
    return guid_for("systemuser", user.id)


def east_account_of_diego(sandbox: SandboxProcess) -> dict[str, Any]:
    """One of diego's East accounts that is not shared with alex (so not acc-globex)."""
    state = sandbox.admin("GET", "/admin/export")
    shared = {s["record_id"] for s in state["shares"] if s["user_id"] == "u-alex"}
    account: dict[str, Any] = next(
        a
        for a in state["accounts"]
        if a["owner_id"] == "u-diego" and a["id"] != "acc-globex" and a["id"] not in shared
    )
    return account
