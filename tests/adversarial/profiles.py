"""The CRM profiles the adversarial suites run on: ``reference`` (the sandbox CRM's own MCP tools)
and ``dataverse`` (the sandbox's Dataverse face: MCP reads, Web API writes).

Both faces are one CRM: a record has its sandbox id on the reference face and a GUID on the
Dataverse face (:func:`crm_id`), and the export (``/admin/export``) counts writes through either.
A suite's summary line is ``<suite>`` on the reference profile (as before) and
``<suite>[dataverse]`` on the other.
"""

from __future__ import annotations

from typing import Literal

from copilot.settings import Settings
from sandbox.dataverse.ids import guid_for
from tests.support.dataverse_env import dataverse_settings
from tests.support.sandbox_process import SandboxProcess

Profile = Literal["reference", "dataverse"]
PROFILES: tuple[Profile, ...] = ("reference", "dataverse")


def suite_name(suite: str, profile: Profile) -> str:
    """The suite's name in the summary: unchanged on the reference profile."""
    return suite if profile == "reference" else f"{suite}[{profile}]"


def crm_id(profile: Profile, kind: str, sandbox_id: str) -> str:
    """How the profile's CRM names a sandbox record (``kind``: account, contact, opportunity…)."""
    return sandbox_id if profile == "reference" else guid_for(kind, sandbox_id)


def settings_for(
    profile: Profile, reference: Settings, database_url: str, sandbox: SandboxProcess
) -> Settings:
    """The copilot's settings on ``profile`` (``reference``: the integration tests' own)."""
    if profile == "reference":
        return reference
    return dataverse_settings(database_url, sandbox)


def process_env(settings: Settings) -> dict[str, str]:
    """What a copilot process (CLI, bot) needs beyond the reference settings to run on Dataverse."""
    if settings.crm_kind != "dataverse":
        return {}
    assert settings.crm_url is not None
    return {
        "CRM_KIND": "dataverse",
        "CRM_URL": settings.crm_url,
        "CRM_MCP_URL": settings.crm_mcp_url,
        "CRM_CA_BUNDLE": str(settings.crm_ca_file),
    }
