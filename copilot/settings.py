"""The copilot's settings: one pydantic object built at the edge and passed in."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from copilot.errors import ConfigurationError

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# The local sandbox's app registration and sign-in password: defaults in local development
# only (a deployment must set its own, see ``_deployed_has_no_sandbox_defaults``).
LOCAL_APP_ID = "11111111-2222-4333-8444-555555555555"
_SANDBOX_APP_SECRET = SecretStr("sandbox-bot-secret")
_SANDBOX_DEV_PASSWORD = SecretStr("sandbox-dev-password")

_DEPLOYED_REQUIRED = {
    "app_client_id": "MicrosoftAppId",
    "app_client_secret": "MicrosoftAppPassword",
    "crm_mcp_url": "CRM_MCP_URL",
    "graph_base_url": "GRAPH_BASE_URL",
    "entra_authority": "ENTRA_AUTHORITY",
}
"""Settings whose defaults point at the local sandbox: a deployment must give each."""


DEFAULT_RETENTION_DAYS = 30
"""Days a thread may stay idle before retention deletes it: ``COPILOT_RETENTION_DAYS``'s
default (read by the bot's settings, which run the retention timer, and the capacity model)."""

OFFLINE_MODEL = "offline"
"""The project's deterministic local model: the default for demo, tests and evals, never deployed."""


def is_offline_model(name: str) -> bool:
    """Whether a ``COPILOT_MODEL`` / ``COPILOT_FALLBACK_MODELS`` entry names the offline model."""
    return name.strip().lower() == OFFLINE_MODEL


def _given(value: object) -> bool:
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    return bool(str(value).strip())


class Settings(BaseSettings):
    """Configuration from environment variables (see README, "Configuration")."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    database_url: SecretStr | None = Field(default=None, alias="DATABASE_URL")
    """PostgreSQL connection string; unset = embedded PostgreSQL under ``data_dir``."""

    data_dir: Path = Field(default=PROJECT_ROOT / ".data", alias="COPILOT_DATA_DIR")
    """Where embedded services keep their state (embedded PostgreSQL in ``postgres/``)."""

    db_pool_min_size: int = Field(default=1, ge=0, alias="COPILOT_DB_POOL_MIN")
    db_pool_max_size: int = Field(default=10, ge=1, alias="COPILOT_DB_POOL_MAX")
    db_pool_max_lifetime_seconds: float = Field(default=1800.0, gt=0, alias="COPILOT_DB_POOL_MAX_LIFETIME")
    db_pool_max_idle_seconds: float = Field(default=300.0, gt=0, alias="COPILOT_DB_POOL_MAX_IDLE")
    db_app_role: str = Field(default="copilot_app", alias="COPILOT_DB_APP_ROLE")
    """Role each pooled connection switches to (``SET ROLE``); empty = stay the login user."""

    # --- audit log (invariant 6) --------------------------------------------------------
    environment: str = Field(default="local", pattern="^(local|deployed)$", alias="COPILOT_ENVIRONMENT")
    """``deployed`` refuses local-development fallbacks (a generated audit key, a default anchor file)."""
    db_app_login: str = Field(default="copilot_app_login", alias="COPILOT_DB_APP_LOGIN")
    """Login the pool switches to when ``DATABASE_URL`` is a superuser or the audit log's owner."""
    db_app_password: SecretStr | None = Field(default=None, alias="COPILOT_DB_APP_PASSWORD")
    """Password of ``db_app_login``; unset = none (servers that trust local logins, e.g. embedded)."""
    audit_hmac_keys: SecretStr | None = Field(default=None, alias="COPILOT_AUDIT_HMAC_KEYS")
    """``kid:base64key`` list, newest first; unset (local only) = a key generated under ``data_dir``."""
    audit_anchor_file: Path | None = Field(default=None, alias="COPILOT_AUDIT_ANCHOR_FILE")
    """Append-only JSONL of signed chain-head anchors; unset (local only) = ``data_dir/audit/anchors.jsonl``."""
    audit_anchor_every: int = Field(default=1, ge=0, alias="COPILOT_AUDIT_ANCHOR_EVERY")
    """Anchor the committed head every N appends (per process); 0 = only ``audit verify``/``anchor``."""
    undo_window_hours: float = Field(default=24.0, ge=0, le=24 * 90, alias="COPILOT_UNDO_WINDOW_HOURS")
    """How long after a write its rep may still undo it (``undo_write``); 0 = no undo."""
    retention_days: int = Field(default=DEFAULT_RETENTION_DAYS, ge=1, alias="COPILOT_RETENTION_DAYS")
    """Days a thread may stay idle before ``retention run`` (and the bot's daily timer) deletes it."""

    # --- model -------------------------------------------------------------------------
    copilot_model: str = Field(default=OFFLINE_MODEL, alias="COPILOT_MODEL")
    """``provider:model`` for ``init_chat_model`` (e.g. ``azure_openai:gpt-4.1``) or ``offline``
    (the default; local development only)."""
    copilot_embeddings: str | None = Field(default=None, alias="COPILOT_EMBEDDINGS")
    """``provider:model`` for ``init_embeddings`` (e.g. ``azure_openai:text-embedding-3-small``):
    adds vector similarity to knowledge search; unset = full-text search only."""
    knowledge_results: int = Field(default=4, ge=1, le=20, alias="COPILOT_KNOWLEDGE_RESULTS")
    """How many knowledge chunks one ``search_knowledge`` call returns."""
    fallback_models: str = Field(default="", alias="COPILOT_FALLBACK_MODELS")
    """Comma-separated ``provider:model`` list tried in order when the primary model fails."""
    model_call_run_limit: int = Field(default=12, ge=1, alias="COPILOT_MODEL_CALL_RUN_LIMIT")
    model_call_thread_limit: int = Field(default=200, ge=1, alias="COPILOT_MODEL_CALL_THREAD_LIMIT")
    summarization_trigger_tokens: int = Field(default=4000, ge=500, alias="COPILOT_SUMMARY_TRIGGER_TOKENS")
    summarization_keep_messages: int = Field(default=20, ge=2, alias="COPILOT_SUMMARY_KEEP_MESSAGES")
    phone_region: str = Field(default="US", alias="COPILOT_PHONE_REGION")
    """Default region for national phone formats (ISO 3166 alpha-2), the tenant's home country."""

    # --- LangSmith tracing (copilot/tracing/) ----------------------------------------------
    langsmith_tracing: bool = Field(default=False, alias="LANGSMITH_TRACING")
    """Send traces of every turn and decision to LangSmith; off = nothing is sent, nothing is built."""
    langsmith_endpoint: str = Field(default="https://api.smith.langchain.com", alias="LANGSMITH_ENDPOINT")
    langsmith_api_key: SecretStr | None = Field(default=None, alias="LANGSMITH_API_KEY")
    langsmith_project: str = Field(default="crm-copilot", min_length=1, alias="LANGSMITH_PROJECT")
    langsmith_workspace_id: str | None = Field(default=None, alias="LANGSMITH_WORKSPACE_ID")
    langsmith_web_url: str | None = Field(default=None, alias="LANGSMITH_WEB_URL")
    """The LangSmith UI that trace links in audit rows point at; unset = derived from the endpoint."""
    trace_pseudonym_key: SecretStr | None = Field(default=None, alias="COPILOT_TRACE_PSEUDONYM_KEY")
    """HMAC key of the reps' pseudonyms in traces (base64, 32+ bytes); unset (local only) = a key
    generated under ``data_dir``. Required when deployed with tracing on."""

    # --- CRM (MCP) ------------------------------------------------------------------------
    crm_mcp_url: str = Field(default="http://127.0.0.1:8765/mcp", alias="CRM_MCP_URL")
    """The CRM's MCP endpoint (streamable HTTP). Default: the local sandbox."""
    crm_resource: str = Field(default="api://sandbox-crm", alias="CRM_RESOURCE")
    """The CRM's OAuth resource (audience); scopes are ``<resource>/crm.read`` and ``/crm.write``."""
    crm_timeout_seconds: float = Field(default=15.0, gt=0, alias="CRM_TIMEOUT_SECONDS")
    tool_max_retries: int = Field(default=2, ge=0, le=5, alias="COPILOT_TOOL_MAX_RETRIES")
    tool_retry_initial_delay: float = Field(default=0.5, ge=0, alias="COPILOT_TOOL_RETRY_INITIAL_DELAY")
    tool_retry_max_delay: float = Field(default=8.0, ge=0, alias="COPILOT_TOOL_RETRY_MAX_DELAY")
    breaker_failure_threshold: int = Field(default=3, ge=1, alias="COPILOT_BREAKER_FAILURES")
    breaker_reset_seconds: float = Field(default=30.0, gt=0, alias="COPILOT_BREAKER_RESET_SECONDS")

    # --- Graph (drafts) ---------------------------------------------------------------------
    graph_base_url: str = Field(default="http://127.0.0.1:8765/v1.0", alias="GRAPH_BASE_URL")
    graph_resource: str = Field(default="https://graph.sandbox.example", alias="GRAPH_RESOURCE")

    # --- Entra ID (on-behalf-of) ------------------------------------------------------------
    entra_authority: str = Field(default="https://localhost:8766", alias="ENTRA_AUTHORITY")
    entra_ca_bundle: Path | None = Field(default=None, alias="ENTRA_CA_BUNDLE")
    """CA file for a private identity provider; unset = the system trust store (and, in local
    development only, the sandbox's CA when it exists)."""
    app_client_id: str = Field(default="", alias="MicrosoftAppId")
    """The bot's Entra app registration: the app Teams signs reps in to, and the client of the
    on-behalf-of exchange (one setting, read by the bot too). Unset = the sandbox's (local only)."""
    app_client_secret: SecretStr = Field(default=SecretStr(""), alias="MicrosoftAppPassword")
    """That app's client secret. Unset = the sandbox's (local only)."""
    dev_sign_in_password_setting: SecretStr | None = Field(default=None, alias="COPILOT_DEV_SIGN_IN_PASSWORD")
    """Local development only: the CLI signs a rep in with this (ROPC) to get a user assertion;
    unset = the sandbox's. Refused when deployed."""

    @model_validator(mode="after")
    def _deployed_has_no_sandbox_defaults(self) -> Settings:
        """A deployment names every endpoint and secret itself: no sandbox default applies."""
        if self.environment != "deployed":
            return self
        missing = [
            alias
            for name, alias in _DEPLOYED_REQUIRED.items()
            if name not in self.model_fields_set or not _given(getattr(self, name))
        ]
        if missing:
            raise ConfigurationError(
                f"COPILOT_ENVIRONMENT=deployed needs {', '.join(missing)} set (the local sandbox's "
                "defaults never apply to a deployment)"
            )
        if self.langsmith_tracing and (
            self.trace_pseudonym_key is None or not self.trace_pseudonym_key.get_secret_value().strip()
        ):
            raise ConfigurationError(
                "LANGSMITH_TRACING is on: a deployment must set COPILOT_TRACE_PSEUDONYM_KEY (the key of "
                "the reps' pseudonyms in traces, e.g. a Key Vault reference)"
            )
        if self.dev_sign_in_password_setting is not None:
            raise ConfigurationError(
                "COPILOT_DEV_SIGN_IN_PASSWORD is for local development only: unset it in a deployment"
            )
        if is_offline_model(self.copilot_model):
            raise ConfigurationError(
                "COPILOT_ENVIRONMENT=deployed refuses COPILOT_MODEL=offline (its default when unset): the "
                "offline model is for local demos, tests and evals. Set a real model, e.g. "
                "COPILOT_MODEL=azure_openai:<deployment> (README, 'Real models')"
            )
        if any(is_offline_model(name) for name in self.fallback_model_names()):
            raise ConfigurationError(
                "COPILOT_ENVIRONMENT=deployed refuses 'offline' in COPILOT_FALLBACK_MODELS: the offline "
                "model is for local demos, tests and evals; a deployment's fallbacks are real models "
                "(provider:model)"
            )
        return self

    @property
    def embedded_pgdata(self) -> Path:
        return self.data_dir / "postgres"

    @property
    def local(self) -> bool:
        """Local development (``COPILOT_ENVIRONMENT=local``): the sandbox's defaults apply."""
        return self.environment == "local"

    @property
    def ca_bundle(self) -> Path | None:
        """The identity provider's CA: explicit, else (local only) the sandbox's if it exists."""
        if self.entra_ca_bundle is not None:
            return self.entra_ca_bundle
        sandbox_ca = self.data_dir / "sandbox" / "ca.pem"
        return sandbox_ca if self.local and sandbox_ca.exists() else None

    @property
    def obo_client_id(self) -> str:
        """The on-behalf-of client: ``MicrosoftAppId``, else (local only) the sandbox's app."""
        return self.app_client_id or LOCAL_APP_ID

    @property
    def obo_client_secret(self) -> SecretStr:
        """The on-behalf-of client's secret: ``MicrosoftAppPassword``, else (local only) the sandbox's."""
        return self.app_client_secret if self.app_client_secret.get_secret_value() else _SANDBOX_APP_SECRET

    @property
    def dev_sign_in_password(self) -> SecretStr | None:
        """The local sign-in password (``None`` = local sign-in is off, as always when deployed)."""
        if not self.local:
            return None
        return self.dev_sign_in_password_setting or _SANDBOX_DEV_PASSWORD

    def crm_scopes(self, *, write: bool) -> list[str]:
        """Delegated CRM scopes: read always, write only for an approved write."""
        scopes = [f"{self.crm_resource}/crm.read"]
        if write:
            scopes.append(f"{self.crm_resource}/crm.write")
        return scopes

    def fallback_model_names(self) -> list[str]:
        """``COPILOT_FALLBACK_MODELS`` as a list, in the order they are tried."""
        return [name.strip() for name in self.fallback_models.split(",") if name.strip()]
