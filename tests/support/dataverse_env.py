"""The copilot on the ``dataverse`` profile, pointed at the sandbox's Dataverse face.

:func:`dataverse_settings`: the integration tests' settings with ``CRM_KIND=dataverse`` and
``CRM_URL`` = the sandbox's org URL: the MCP endpoint (``<org>/api/mcp``), the Web API
(``<org>/api/data/v9.2``) and the OAuth resource derive from it, as they would for
``https://<org>.crm.dynamics.com``; ``CRM_CA_BUNDLE`` trusts the sandbox's CA.

:func:`dataverse_environment`: a deployed copilot's app settings, for the doctor:

``CRM_KIND=dataverse`` with ``CRM_URL`` = the sandbox's org URL (its HTTPS listener; the
copilot trusts it through ``ENTRA_CA_BUNDLE``, the sandbox's CA), the sandbox's app id as
``MicrosoftAppId`` (the client its tokens name, so the allowed-MCP-client list applies), and
delegated org tokens (``user_impersonation mcp.tools``, audience the org URL) for a rep and
an admin. The settings only the non-CRM checks read (database, models, queues) name services
that do not exist: run the doctor with ``--only crm`` on these.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from cryptography.fernet import Fernet

from copilot.persistence.audit_keys import generate_key_entry
from copilot.settings import Settings
from tests.support.copilot_env import copilot_settings
from tests.support.dataverse import dv_token
from tests.support.sandbox_process import SandboxProcess

ADMIN = "nestor"
"""The sandbox's manager plays the environment's System Administrator."""
REP = "alex"


def dataverse_environment(sandbox: SandboxProcess, **changes: str | None) -> dict[str, str]:
    """App settings of a deployed copilot on the sandbox's Dataverse, plus the doctor's rep token
    (``COPILOT_DOCTOR_CRM_TOKEN``) and an admin token (``COPILOT_CRM_ADMIN_TOKEN``); ``changes``
    override (None removes a setting)."""
    env = {
        "COPILOT_ENVIRONMENT": "deployed",
        "CRM_KIND": "dataverse",
        "CRM_URL": sandbox.settings.org_url,
        "MicrosoftAppId": sandbox.settings.bot_app_id,
        "MicrosoftAppPassword": "dataverse-test-secret",
        "GRAPH_BASE_URL": f"{sandbox.settings.http_base_url}/v1.0",
        "ENTRA_AUTHORITY": sandbox.settings.idp_base_url,
        "ENTRA_CA_BUNDLE": str(sandbox.settings.ca_cert_path),
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/unused",
        "COPILOT_MODEL": "openai:gpt-unused",
        "OPENAI_API_KEY": "sk-unused",
        "COPILOT_AUDIT_HMAC_KEYS": generate_key_entry("dv-k1"),
        "COPILOT_TRACE_PSEUDONYM_KEY": base64.b64encode(secrets.token_bytes(32)).decode(),
        "COPILOT_TOKEN_ENCRYPTION_KEY": Fernet.generate_key().decode(),
        "COPILOT_SSO_CONNECTION": "crm-copilot-sso",
        "AzureWebJobsStorage": "UseDevelopmentStorage=true",
        "COPILOT_DOCTOR_CRM_TOKEN": dv_token(sandbox, REP),
        "COPILOT_CRM_ADMIN_TOKEN": dv_token(sandbox, ADMIN),
    }
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def deployed_dataverse_settings(sandbox: SandboxProcess, **overrides: str) -> Settings:
    """A deployed copilot's settings on the ``dataverse`` profile against the sandbox (by alias)."""
    env = {
        k: v
        for k, v in dataverse_environment(sandbox).items()
        if k not in ("COPILOT_DOCTOR_CRM_TOKEN", "COPILOT_CRM_ADMIN_TOKEN", "AzureWebJobsStorage")
    }
    return Settings(**{**env, **overrides})  # type: ignore[arg-type]


def dataverse_settings(database_url: str, sandbox: SandboxProcess, **overrides: Any) -> Settings:
    """The integration tests' settings (``tests/support/copilot_env.py``), with the CRM switched
    to the sandbox's Dataverse face."""
    values: dict[str, Any] = {
        "CRM_KIND": "dataverse",
        "CRM_URL": sandbox.settings.org_url,
        "CRM_MCP_URL": f"{sandbox.settings.org_url}/api/mcp",
        "CRM_CA_BUNDLE": sandbox.settings.ca_cert_path,
        **overrides,
    }
    return copilot_settings(database_url, sandbox, **values)
