"""A copilot wired to real PostgreSQL and the real sandbox, for integration tests."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from copilot.auth.tokens import OboTokenBroker, dev_sign_in, identity_from_assertion
from copilot.clock import Clock
from copilot.identity import RepIdentity
from copilot.middleware.write_guard import WriteGuardMiddleware
from copilot.persistence.checkpoint import setup_langgraph
from copilot.persistence.database import connect
from copilot.persistence.migrations import migrate
from copilot.runner import CopilotService, open_service
from copilot.settings import Settings
from tests.support.sandbox_process import SandboxProcess


@dataclass
class Rep:
    identity: RepIdentity
    broker: OboTokenBroker = field(repr=False)

    def issued_tokens(self) -> list[str]:
        """Every delegated token the broker obtained (to prove none leaked anywhere)."""
        return [token for token, _ in self.broker._cache.values()]


def copilot_settings(database_url: str, sandbox: SandboxProcess, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "DATABASE_URL": database_url,
        "CRM_MCP_URL": sandbox.settings.mcp_url,
        "GRAPH_BASE_URL": f"{sandbox.settings.http_base_url}/v1.0",
        "ENTRA_AUTHORITY": sandbox.settings.idp_base_url,
        "ENTRA_CA_BUNDLE": sandbox.settings.ca_cert_path,
        "COPILOT_TOOL_RETRY_INITIAL_DELAY": 0.01,
        "COPILOT_TOOL_RETRY_MAX_DELAY": 0.05,
        "COPILOT_BREAKER_RESET_SECONDS": 0.3,
    }
    values.update(overrides)
    return Settings(**values)


async def prepare_database(settings: Settings) -> None:
    """What ``python -m copilot db migrate`` does."""
    async with connect(settings) as conn:
        await migrate(conn)
    assert settings.database_url is not None
    await setup_langgraph(settings.database_url.get_secret_value())


async def sign_in(settings: Settings, handle: str) -> Rep:
    """The local sign-in + on-behalf-of path the CLI uses."""
    assertion = await dev_sign_in(settings, handle)
    identity = identity_from_assertion(assertion)
    return Rep(identity, OboTokenBroker(settings, identity, assertion))


@asynccontextmanager
async def service(
    settings: Settings,
    model: BaseChatModel | None = None,
    *,
    after_commit_hook: Any = None,
    clock: Clock | None = None,
) -> AsyncIterator[CopilotService]:
    """A running service; ``clock`` pins its "now" (see ``tests/support/moments.py``)."""
    async with open_service(
        settings,
        model=model,
        write_guard_factory=lambda: WriteGuardMiddleware(after_commit_hook=after_commit_hook),
    ) as svc:
        if clock is not None:
            svc.clock = clock
        yield svc


def bot_environment(database_url: str, sandbox: SandboxProcess, data_dir: Path) -> dict[str, str]:
    """The environment of the copilot CLI and the bot: the same settings the integration tests use."""
    settings = copilot_settings(database_url, sandbox)
    assert settings.database_url is not None
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("MicrosoftApp", "COPILOT_", "CRM_", "GRAPH_", "ENTRA_", "BOT_"))
    }
    env.update(
        {
            "DATABASE_URL": settings.database_url.get_secret_value(),
            "CRM_MCP_URL": settings.crm_mcp_url,
            "GRAPH_BASE_URL": settings.graph_base_url,
            "ENTRA_AUTHORITY": settings.entra_authority,
            "ENTRA_CA_BUNDLE": str(settings.entra_ca_bundle),
            "COPILOT_TOOL_RETRY_INITIAL_DELAY": str(settings.tool_retry_initial_delay),
            "COPILOT_TOOL_RETRY_MAX_DELAY": str(settings.tool_retry_max_delay),
            "COPILOT_DATA_DIR": str(data_dir),
            "MicrosoftAppId": "",  # local development mode: what the Playground talks to
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env
