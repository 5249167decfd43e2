"""Everything a bench run needs: the sandbox, a fresh database, settings, the rep signed in,
and the scenarios built on the CRM records that rep can see.

The CRM is always the bench's own sandbox, on one of two profiles (``CRM_KIND``, read from the
environment as the copilot reads it: :func:`crm_profile`): ``reference``, the sandbox CRM's own
MCP server, or ``dataverse``, the sandbox's Dataverse face (``CRM_URL`` = its org URL, MCP at
``<org>/api/mcp``, Web API at ``<org>/api/data/v9.2``, over HTTPS trusting its CA). The
environment's own CRM_URL / CRM_MCP_URL are never used: a bench never touches a real CRM.
"""

from __future__ import annotations

import base64
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from bench.database import fresh_database
from bench.sandbox import SandboxServer, start_sandbox, stop_sandbox
from bench.scenarios import Scenarios, discover
from bench.stats import Progress
from copilot.auth.tokens import OboTokenBroker, dev_sign_in, identity_from_assertion
from copilot.identity import RepIdentity
from copilot.settings import CrmKind, Settings


class _Profile(BaseSettings):
    """``CRM_KIND`` alone, with the copilot's own alias and type (``copilot.settings.Settings``
    would also demand ``CRM_URL``, which the bench sets itself, to its sandbox)."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    crm_kind: CrmKind = Field(default="reference", alias="CRM_KIND")


def crm_profile() -> CrmKind:
    """The CRM profile the bench measures: ``CRM_KIND`` (default ``reference``); a value that is
    not a profile raises pydantic's ``ValidationError``, as ``Settings()`` would."""
    return _Profile().crm_kind


@dataclass
class BenchEnvironment:
    """The run's settings (fresh database, the bench's sandbox), its signed-in rep and the
    scenarios on that rep's records."""

    settings: Settings
    sandbox: SandboxServer
    identity: RepIdentity
    assertion: str = field(repr=False)
    scenarios: Scenarios
    variables: dict[str, str] = field(default_factory=dict, repr=False)
    """The settings as environment variables, for product processes the bench starts."""
    work: Path = field(default_factory=Path)
    """The run's scratch directory (removed afterwards)."""

    @property
    def crm_kind(self) -> CrmKind:
        """The CRM profile measured."""
        return self.settings.crm_kind

    def broker(self) -> OboTokenBroker:
        """A token broker for the rep (each side of a comparison gets its own, same assertion)."""
        return OboTokenBroker(self.settings, self.identity, self.assertion)


def crm_variables(crm_kind: CrmKind, sandbox: SandboxServer) -> dict[str, str]:
    """The CRM settings of ``crm_kind`` on the bench's sandbox (as environment variables)."""
    if crm_kind == "reference":
        return {"CRM_KIND": "reference", "CRM_MCP_URL": sandbox.mcp_url}
    # As a deployment names Dynamics 365: the org URL, from which the rest derive; spelled out
    # so nothing of the caller's environment (a CRM_MCP_URL, a CRM_RESOURCE) can point elsewhere.
    return {
        "CRM_KIND": "dataverse",
        "CRM_URL": sandbox.org_url,
        "CRM_MCP_URL": f"{sandbox.org_url}/api/mcp",
        "CRM_RESOURCE": sandbox.org_url,
        "CRM_CA_BUNDLE": str(sandbox.ca_cert_path),
    }


def bench_variables(
    database_url: str, sandbox: SandboxServer, work: Path, crm_kind: CrmKind = "reference"
) -> dict[str, str]:
    """Settings pointing at the bench's database and sandbox (its CRM on ``crm_kind``'s
    profile); audit key and anchors of its own, so a bench run never writes into the local
    ``.data/audit``."""
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    return {
        "DATABASE_URL": database_url,
        "COPILOT_DATA_DIR": str(work),
        "COPILOT_ENVIRONMENT": "local",
        "COPILOT_AUDIT_HMAC_KEYS": f"bench:{key}",
        "COPILOT_AUDIT_ANCHOR_FILE": str(work / "audit" / "anchors.jsonl"),
        "COPILOT_MODEL": "offline",
        "COPILOT_FALLBACK_MODELS": "",
        **crm_variables(crm_kind, sandbox),
        "GRAPH_BASE_URL": sandbox.graph_base_url,
        "ENTRA_AUTHORITY": sandbox.idp_base_url,
        "ENTRA_CA_BUNDLE": str(sandbox.ca_cert_path),
    }


@asynccontextmanager
async def bench_environment(
    progress: Progress, rep: str, crm_kind: CrmKind = "reference"
) -> AsyncIterator[BenchEnvironment]:
    """Start the sandbox, create and migrate a database, sign ``rep`` in and find the records
    the scenarios use (as ``rep``, over MCP, on ``crm_kind``'s profile); undo it all after."""
    work = Path(tempfile.mkdtemp(prefix="copilot-bench-"))
    try:
        # Only the database server is read from it; the CRM is set below, to the sandbox's.
        base = Settings(CRM_KIND="reference")
        progress("bench: starting the sandbox")
        sandbox = await start_sandbox(work / "sandbox")
        try:
            progress("bench: creating and migrating a fresh database")
            async with fresh_database(base, app_role=base.db_app_role) as url:
                variables = bench_variables(url, sandbox, work, crm_kind)
                values: dict[str, Any] = dict(variables)
                settings = Settings(**values)
                assertion = await dev_sign_in(settings, rep)
                identity = identity_from_assertion(assertion)
                # A broker of its own: the measured sides' brokers start with no token cached.
                scenarios = await discover(settings, OboTokenBroker(settings, identity, assertion))
                yield BenchEnvironment(settings, sandbox, identity, assertion, scenarios, variables, work)
        finally:
            await stop_sandbox(sandbox)
    finally:
        shutil.rmtree(work, ignore_errors=True)
