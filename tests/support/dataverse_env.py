"""The copilot on the ``dataverse`` profile against the sandbox's Dataverse face.

``CRM_KIND=dataverse`` and ``CRM_URL`` = the sandbox's org URL: the MCP endpoint
(``<org>/api/mcp``), the Web API (``<org>/api/data/v9.2``) and the OAuth resource derive from it,
as they would for ``https://<org>.crm.dynamics.com``. The sandbox's HTTPS certificate chains to
its own CA, which ``CRM_CA_BUNDLE`` trusts.
"""

from __future__ import annotations

from typing import Any

from copilot.settings import Settings
from tests.support.copilot_env import copilot_settings
from tests.support.sandbox_process import SandboxProcess


def dataverse_settings(database_url: str, sandbox: SandboxProcess, **overrides: Any) -> Settings:
    """The integration tests' settings, with the CRM switched to Dataverse."""
    values: dict[str, Any] = {
        "CRM_KIND": "dataverse",
        "CRM_URL": sandbox.settings.org_url,
        "CRM_MCP_URL": f"{sandbox.settings.org_url}/api/mcp",
        "CRM_CA_BUNDLE": sandbox.settings.ca_cert_path,
        **overrides,
    }
    return copilot_settings(database_url, sandbox, **values)
