"""Everything a bench run needs: the sandbox, a fresh database, settings, the rep signed in,
and the scenarios built on the CRM records that rep can see."""

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

from bench.database import fresh_database
from bench.sandbox import SandboxServer, start_sandbox, stop_sandbox
from bench.scenarios import Scenarios, discover
from bench.stats import Progress
from copilot.auth.tokens import OboTokenBroker, dev_sign_in, identity_from_assertion
from copilot.identity import RepIdentity
from copilot.settings import Settings


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

    def broker(self) -> OboTokenBroker:
        """A token broker for the rep (each side of a comparison gets its own, same assertion)."""
        return OboTokenBroker(self.settings, self.identity, self.assertion)


def bench_variables(database_url: str, sandbox: SandboxServer, work: Path) -> dict[str, str]:
    """Settings pointing at the bench's database and sandbox; audit key and anchors of its own,
    so a bench run never writes into the local ``.data/audit``."""
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    return {
        "DATABASE_URL": database_url,
        "COPILOT_DATA_DIR": str(work),
        "COPILOT_ENVIRONMENT": "local",
        "COPILOT_AUDIT_HMAC_KEYS": f"bench:{key}",
        "COPILOT_AUDIT_ANCHOR_FILE": str(work / "audit" / "anchors.jsonl"),
        "COPILOT_MODEL": "offline",
        "COPILOT_FALLBACK_MODELS": "",
        "CRM_MCP_URL": sandbox.mcp_url,
        "GRAPH_BASE_URL": sandbox.graph_base_url,
        "ENTRA_AUTHORITY": sandbox.idp_base_url,
        "ENTRA_CA_BUNDLE": str(sandbox.ca_cert_path),
    }


@asynccontextmanager
async def bench_environment(progress: Progress, rep: str) -> AsyncIterator[BenchEnvironment]:
    """Start the sandbox, create and migrate a database, sign ``rep`` in and find the records
    the scenarios use (as ``rep``, over MCP); undo it all after."""
    work = Path(tempfile.mkdtemp(prefix="copilot-bench-"))
    try:
        base = Settings()
        progress("bench: starting the sandbox")
        sandbox = await start_sandbox(work / "sandbox")
        try:
            progress("bench: creating and migrating a fresh database")
            async with fresh_database(base, app_role=base.db_app_role) as url:
                variables = bench_variables(url, sandbox, work)
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
