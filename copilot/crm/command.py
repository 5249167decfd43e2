"""``python -m copilot crm prepare [--json] [--token-env NAME] [--allow-mcp-client APP_ID]``."""

from __future__ import annotations

import os
import re
import uuid

from copilot.crm.dataverse_admin import PrepareStep, prepare
from copilot.errors import InvalidInput
from copilot.settings import Settings

_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def _checked(settings: Settings, token_env: str, allow_mcp_client: str | None) -> tuple[str, str | None]:
    """The admin's token and the client id, or :class:`InvalidInput` (exit 2) before any call."""
    if settings.crm_kind != "dataverse":
        raise InvalidInput(
            f"crm prepare prepares a Dataverse environment: set CRM_KIND=dataverse and CRM_URL "
            f"(CRM_KIND is {settings.crm_kind!r})"
        )
    token = os.environ.get(token_env, "").strip()
    if not token:
        raise InvalidInput(
            f"no admin token: put a System Administrator's delegated token for CRM_URL in {token_env}"
        )
    if allow_mcp_client is not None:
        if not _GUID.match(allow_mcp_client.strip()):
            raise InvalidInput(
                f"--allow-mcp-client takes an app's client id (a GUID), not {allow_mcp_client[:60]!r}"
            )
        allow_mcp_client = str(uuid.UUID(allow_mcp_client.strip()))
    return token, allow_mcp_client


def _line(step: PrepareStep) -> str:
    """One step as ``created  column phonecall.new_copilotkey`` (what, then where)."""
    if step.what == "key_column":
        thing = f"column {step.table}.{step.name}"
    elif step.what == "alternate_key":
        thing = f"alternate key {step.name} on {step.table}"
    else:
        thing = f"allowed MCP client {step.name}"
    return f"{step.action:<8} {thing}"


async def prepare_main(
    settings: Settings, *, token_env: str, allow_mcp_client: str | None, as_json: bool
) -> int:
    """Prepare the environment; prints each step (or ``--json``); 0 when it is prepared."""
    token, app_id = _checked(settings, token_env, allow_mcp_client)
    report = await prepare(settings, token, allow_mcp_client=app_id)
    if as_json:
        print(report.model_dump_json())
    else:
        for step in report.steps:
            print(_line(step))
        print(f"crm prepare: {report.changed} change(s) in {report.crm_url}")
    return 0
