"""Everything an eval run needs: the sandbox over HTTP, a fresh migrated database, settings
per model, and reps signed in through the sandbox identity provider.

On the ``dataverse`` profile (``CRM_KIND=dataverse``) the copilot's settings point at the same
sandbox's Dataverse face (``CRM_URL`` = its org URL, ``CRM_CA_BUNDLE`` = its CA), as
``scripts/crm_profile.sh`` does for demo and chat; :meth:`EvalEnvironment.settings` with
``profile="reference"`` still reaches the sandbox's own CRM tools (the generator's reads and an
item's planted record text, a CRM user's own edit, which shows on both faces).

Built from the bench's pieces (:mod:`bench.sandbox`, :mod:`bench.database`,
:func:`bench.environment.bench_variables`), so an eval run touches neither the local
``.data`` database nor its audit anchors, and reaches the sandbox only over the network.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.database import fresh_database
from bench.environment import bench_variables
from bench.sandbox import SandboxServer, start_sandbox, stop_sandbox
from copilot.auth.tokens import OboTokenBroker, dev_sign_in, identity_from_assertion
from copilot.identity import RepIdentity
from copilot.settings import CrmKind, Settings

Progress = Callable[[str], None]


@dataclass
class SignedInRep:
    """A rep signed in through the sandbox identity provider, with their own token broker."""

    handle: str
    identity: RepIdentity
    broker: OboTokenBroker = field(repr=False)
    assertion: str = field(default="", repr=False)


@dataclass
class EvalEnvironment:
    """The run's sandbox, database URL and base variables."""

    sandbox: SandboxServer
    variables: dict[str, str] = field(repr=False)
    work: Path
    profile: CrmKind = "reference"
    """The CRM profile the copilot runs on."""

    def settings(self, model: str | None = None, *, profile: CrmKind | None = None) -> Settings:
        """Settings on the run's database and sandbox, with ``model`` as the only model (no
        fallbacks: each model is measured on its own), on the run's CRM profile unless
        ``profile`` names another."""
        values: dict[str, Any] = dict(self.variables)
        if model is not None:
            values["COPILOT_MODEL"] = model
        values["COPILOT_FALLBACK_MODELS"] = ""
        # Set either way: the profile is the run's, not the calling shell's CRM_KIND / CRM_URL.
        if (profile or self.profile) == "dataverse":
            values.update(dataverse_variables(self.sandbox))
        else:
            values.update(CRM_KIND="reference", CRM_URL=None, CRM_CA_BUNDLE=None)
        return Settings(**values)

    async def sign_in(self, handle: str, *, profile: CrmKind | None = None) -> SignedInRep:
        """``handle`` signed in (the local sign-in + on-behalf-of path the CLI uses); its broker
        exchanges for the ``profile``'s CRM tokens (the run's profile by default)."""
        settings = self.settings(profile=profile)
        assertion = await dev_sign_in(settings, handle)
        identity = identity_from_assertion(assertion)
        return SignedInRep(handle, identity, OboTokenBroker(settings, identity, assertion), assertion)

    def on_reference(self, rep: SignedInRep) -> SignedInRep:
        """``rep`` with a broker for the sandbox's own CRM tools (same sign-in)."""
        settings = self.settings(profile="reference")
        return SignedInRep(rep.handle, rep.identity, OboTokenBroker(settings, rep.identity, rep.assertion))


def dataverse_variables(sandbox: SandboxServer) -> dict[str, str]:
    """``CRM_KIND=dataverse`` on the sandbox's Dataverse face: its org URL (the HTTPS listener,
    unless ``SANDBOX_DATAVERSE_ORG_URL`` names another, as the sandbox itself reads it), the MCP
    endpoint derived from it, and its CA."""
    org = (os.environ.get("SANDBOX_DATAVERSE_ORG_URL") or f"https://127.0.0.1:{sandbox.https_port}").rstrip(
        "/"
    )
    return {
        "CRM_KIND": "dataverse",
        "CRM_URL": org,
        "CRM_MCP_URL": f"{org}/api/mcp",
        "CRM_CA_BUNDLE": str(sandbox.ca_cert_path),
    }


async def _ingest_knowledge(env: EvalEnvironment, progress: Progress) -> None:
    """The sandbox's document library into knowledge search, read as the configured manager
    (the knowledge items expect its playbooks; restricted ones must stay unseen)."""
    from copilot.knowledge.library import ingest_library, library_token
    from copilot.persistence.database import connect
    from evals.dataset import load_config

    progress("eval: ingesting the sandbox's document library")
    manager = await env.sign_in(load_config().manager)
    settings = env.settings()
    token = await library_token(settings, manager.broker)
    async with connect(settings) as conn:
        await ingest_library(conn, settings, token, manager.identity.tenant_id)


@asynccontextmanager
async def sandbox_environment(
    progress: Progress, profile: CrmKind = "reference"
) -> AsyncIterator[EvalEnvironment]:
    """A freshly seeded sandbox and reps signed in to it, without a database (enough to read
    the CRM as a rep: the dataset generator); removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix="copilot-eval-"))
    try:
        progress("eval: starting the sandbox")
        sandbox = await start_sandbox(work / "sandbox")
        try:
            variables = bench_variables("", sandbox, work)
            del variables["DATABASE_URL"]
            yield EvalEnvironment(sandbox, variables, work, profile)
        finally:
            await stop_sandbox(sandbox)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@asynccontextmanager
async def eval_environment(
    progress: Progress, profile: CrmKind = "reference"
) -> AsyncIterator[EvalEnvironment]:
    """Start a freshly seeded sandbox, create and migrate a database; undo it all after."""
    work = Path(tempfile.mkdtemp(prefix="copilot-eval-"))
    try:
        base = Settings()
        progress("eval: starting the sandbox")
        sandbox = await start_sandbox(work / "sandbox")
        try:
            progress("eval: creating and migrating a fresh database")
            async with fresh_database(base, app_role=base.db_app_role) as url:
                env = EvalEnvironment(sandbox, bench_variables(url, sandbox, work), work, profile)
                await _ingest_knowledge(env, progress)
                yield env
        finally:
            await stop_sandbox(sandbox)
    finally:
        shutil.rmtree(work, ignore_errors=True)
