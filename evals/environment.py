"""Everything an eval run needs: the sandbox over HTTP, a fresh migrated database, settings
per model, and reps signed in through the sandbox identity provider.

Built from the bench's pieces (:mod:`bench.sandbox`, :mod:`bench.database`,
:func:`bench.environment.bench_variables`), so an eval run touches neither the local
``.data`` database nor its audit anchors, and reaches the sandbox only over the network.
"""

from __future__ import annotations

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
from copilot.settings import Settings

Progress = Callable[[str], None]


@dataclass
class SignedInRep:
    """A rep signed in through the sandbox identity provider, with their own token broker."""

    handle: str
    identity: RepIdentity
    broker: OboTokenBroker = field(repr=False)


@dataclass
class EvalEnvironment:
    """The run's sandbox, database URL and base variables."""

    sandbox: SandboxServer
    variables: dict[str, str] = field(repr=False)
    work: Path

    def settings(self, model: str | None = None) -> Settings:
        """Settings on the run's database and sandbox, with ``model`` as the only model (no
        fallbacks: each model is measured on its own)."""
        values: dict[str, Any] = dict(self.variables)
        if model is not None:
            values["COPILOT_MODEL"] = model
        values["COPILOT_FALLBACK_MODELS"] = ""
        return Settings(**values)

    async def sign_in(self, handle: str) -> SignedInRep:
        """``handle`` signed in (the local sign-in + on-behalf-of path the CLI uses)."""
        settings = self.settings()
        assertion = await dev_sign_in(settings, handle)
        identity = identity_from_assertion(assertion)
        return SignedInRep(handle, identity, OboTokenBroker(settings, identity, assertion))


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
async def sandbox_environment(progress: Progress) -> AsyncIterator[EvalEnvironment]:
    """A freshly seeded sandbox and reps signed in to it, without a database (enough to read
    the CRM as a rep: the dataset generator); removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix="copilot-eval-"))
    try:
        progress("eval: starting the sandbox")
        sandbox = await start_sandbox(work / "sandbox")
        try:
            variables = bench_variables("", sandbox, work)
            del variables["DATABASE_URL"]
            yield EvalEnvironment(sandbox, variables, work)
        finally:
            await stop_sandbox(sandbox)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@asynccontextmanager
async def eval_environment(progress: Progress) -> AsyncIterator[EvalEnvironment]:
    """Start a freshly seeded sandbox, create and migrate a database; undo it all after."""
    work = Path(tempfile.mkdtemp(prefix="copilot-eval-"))
    try:
        base = Settings()
        progress("eval: starting the sandbox")
        sandbox = await start_sandbox(work / "sandbox")
        try:
            progress("eval: creating and migrating a fresh database")
            async with fresh_database(base, app_role=base.db_app_role) as url:
                env = EvalEnvironment(sandbox, bench_variables(url, sandbox, work), work)
                await _ingest_knowledge(env, progress)
                yield env
        finally:
            await stop_sandbox(sandbox)
    finally:
        shutil.rmtree(work, ignore_errors=True)
