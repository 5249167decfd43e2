"""Sandbox settings: one object, built from ``SANDBOX_*`` environment variables."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class SandboxSettings(BaseSettings):
    """Where the sandbox keeps its state and how it is reached.

    One ASGI app serves the CRM MCP endpoint (``/mcp``), the identity provider and the
    drafts mailbox; it listens on plain HTTP (``http_port``) and on HTTPS
    (``https_port``, certificate from the sandbox's own CA) because OAuth clients such
    as azure-identity insist on an https authority.
    """

    model_config = SettingsConfigDict(env_prefix="SANDBOX_", extra="ignore")

    data_dir: Path = Field(default=PROJECT_ROOT / ".data" / "sandbox")
    host: str = "127.0.0.1"
    http_port: int = 8765
    https_port: int = 8766

    crm_audience: str = "api://sandbox-crm"
    graph_audience: str = "https://graph.sandbox.example"
    bot_app_id: str = "11111111-2222-4333-8444-555555555555"
    bot_client_secret: str = "sandbox-bot-secret"
    token_lifetime_seconds: int = 3600
    bot_connector_audience: str = "https://api.botframework.com"
    """Audience of the bot's app-only tokens for replying through the Bot Connector."""
    sso_connection_name: str = "copilot-sso"
    """The bot's OAuth connection at the token service stand-in (``COPILOT_SSO_CONNECTION``)."""
    dev_user_password: str = "sandbox-dev-password"
    """Every sandbox user's password for the local-development password (ROPC) sign-in."""
    seed_date: dt.date | None = None
    """``SANDBOX_SEED_DATE``: the day the seeded records and meetings follow, and the CRM's
    "today" for its own defaults (this quarter, the last 30 days). Unset = today (UTC); a
    time-sensitive test pins it, with the service's clock, so it runs the same on any day."""

    def today(self) -> dt.date:
        """The sandbox's today: :attr:`seed_date` when pinned, else the UTC date."""
        return self.seed_date or dt.datetime.now(dt.UTC).date()

    dataverse_org_url: str | None = None
    """The Dataverse organisation URL (token audience of ``/api/data/v9.2`` and ``/api/mcp``);
    unset = this sandbox's own HTTPS base, ``https://127.0.0.1:<https_port>``."""
    dataverse_activity_key: str = "new_copilotkey"
    """Logical name of the activities' alternate-key column (the copilot's idempotency key)."""
    dataverse_mcp_row_cap: int = Field(default=50, ge=1, le=5000)
    """Most rows one Dataverse MCP ``read_query`` or ``search_data`` call returns (no paging)."""

    @property
    def bot_app_id_uri(self) -> str:
        """Audience of Teams-SSO-like user tokens (the bot's Application ID URI)."""
        return f"api://localhost/{self.bot_app_id}"

    @property
    def org_url(self) -> str:
        """The Dataverse org URL: the audience its tokens carry, and the base of its surfaces."""
        return (self.dataverse_org_url or f"https://127.0.0.1:{self.https_port}").rstrip("/")

    @property
    def db_path(self) -> Path:
        return self.data_dir / "crm.sqlite3"

    @property
    def ca_cert_path(self) -> Path:
        return self.data_dir / "ca.pem"

    @property
    def ca_key_path(self) -> Path:
        return self.data_dir / "ca-key.pem"

    @property
    def server_cert_path(self) -> Path:
        return self.data_dir / "server.pem"

    @property
    def server_key_path(self) -> Path:
        return self.data_dir / "server-key.pem"

    @property
    def signing_key_path(self) -> Path:
        return self.data_dir / "signing-key.pem"

    @property
    def idp_base_url(self) -> str:
        return f"https://localhost:{self.https_port}"

    @property
    def http_base_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.http_base_url}/mcp"

    def issuer(self, tenant_id: str) -> str:
        """The token issuer for one tenant, shaped like Entra ID's v2.0 issuer."""
        return f"{self.idp_base_url}/{tenant_id}/v2.0"
