"""The copilot's settings: one pydantic object built at the edge and passed in."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, assert_never

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


DEFAULT_AUDIT_RETENTION_DAYS = 2557
"""Seven years (``COPILOT_AUDIT_RETENTION_DAYS``' default): how long an audit row, the evidence of
who approved which CRM change, is kept. The basis is in docs/ADMIN.md ("Data lifecycle")."""

DEFAULT_RETENTION_DAYS = 30
"""Days a thread may stay idle before retention deletes it: ``COPILOT_RETENTION_DAYS``'s
default (read by the bot's settings, which run the retention timer, and the capacity model)."""

AnchorStoreKind = Literal["file", "blob"]
"""The audit anchor stores ``COPILOT_AUDIT_ANCHOR_STORE`` selects (copilot/persistence/audit_anchor.py)."""

CrmKind = Literal["reference", "dataverse"]
"""The CRM connectors ``CRM_KIND`` selects (copilot/crm/)."""

DATAVERSE_ENTITY_SETS: dict[str, str] = {
    "account": "accounts",
    "opportunity": "opportunities",
    "contact": "contacts",
    "phonecall": "phonecalls",
    "task": "tasks",
    "appointment": "appointments",
}
"""Dataverse's out-of-the-box entity set names (``CRM_DATAVERSE_ENTITY_SETS`` overrides)."""
DATAVERSE_ACTIVITY_TABLES: dict[str, str] = {"call": "phonecall", "meeting": "appointment", "task": "task"}
"""Which Dataverse activity table each activity type is logged as. No ``email``: a Dataverse
email row is a message the CRM may send, and the copilot never sends."""
DATAVERSE_CANCELED_STATUS: dict[str, int] = {"phonecall": 3, "task": 6, "appointment": 4}
"""The Canceled ``statuscode`` of each activity table (``statecode`` 2), per Dataverse's defaults."""

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
    database_entra_auth: bool = Field(default=False, alias="COPILOT_DATABASE_ENTRA_AUTH")
    """Log in to Azure Database for PostgreSQL with an Entra token of the managed identity
    (``AZURE_CLIENT_ID``) instead of a password: ``DATABASE_URL`` names the identity's role."""

    data_dir: Path = Field(default=PROJECT_ROOT / ".data", alias="COPILOT_DATA_DIR")
    """Where embedded services keep their state (embedded PostgreSQL in ``postgres/``)."""

    db_pool_min_size: int = Field(default=1, ge=0, alias="COPILOT_DB_POOL_MIN")
    db_pool_max_size: int = Field(default=10, ge=1, alias="COPILOT_DB_POOL_MAX")
    db_pool_max_lifetime_seconds: float = Field(default=1800.0, gt=0, alias="COPILOT_DB_POOL_MAX_LIFETIME")
    db_pool_max_idle_seconds: float = Field(default=300.0, gt=0, alias="COPILOT_DB_POOL_MAX_IDLE")
    db_max_instances: int = Field(default=1, ge=1, alias="COPILOT_DB_MAX_INSTANCES")
    """How many worker processes may hold pools at once (the Function App's
    ``maximumInstanceCount``): the doctor's ``database.connections`` ceiling multiplies by it."""
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
    audit_anchor_store: AnchorStoreKind = Field(default="file", alias="COPILOT_AUDIT_ANCHOR_STORE")
    """Where signed chain-head anchors go: ``file`` (``COPILOT_AUDIT_ANCHOR_FILE``) or ``blob``
    (Azure Blob Storage append blobs: ``COPILOT_AUDIT_ANCHOR_ACCOUNT_URL`` / ``_CONTAINER``)."""
    audit_anchor_file: Path | None = Field(default=None, alias="COPILOT_AUDIT_ANCHOR_FILE")
    """Append-only JSONL of signed chain-head anchors; unset (local only) = ``data_dir/audit/anchors.jsonl``."""
    audit_anchor_account_url: str | None = Field(
        default=None, pattern=r"^https?://\S+$", alias="COPILOT_AUDIT_ANCHOR_ACCOUNT_URL"
    )
    """The blob store's account endpoint, ``https://<account>.blob.core.windows.net``."""
    audit_anchor_container: str = Field(
        default="audit-anchors",
        pattern=r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$",
        alias="COPILOT_AUDIT_ANCHOR_CONTAINER",
    )
    """The blob store's container (created by the deployment, with an immutability policy)."""
    audit_anchor_client_id: str | None = Field(default=None, alias="COPILOT_AUDIT_ANCHOR_CLIENT_ID")
    """Client id of the user-assigned managed identity the blob store signs in as; unset =
    ``DefaultAzureCredential``."""
    audit_anchor_connection: SecretStr | None = Field(default=None, alias="COPILOT_AUDIT_ANCHOR_CONNECTION")
    """A connection string for the blob store instead of an identity: Azurite only (refused when deployed)."""
    audit_anchor_every: int = Field(default=1, ge=0, alias="COPILOT_AUDIT_ANCHOR_EVERY")
    """Anchor the committed head after every N appends (per process); 0 = only the seal timer,
    ``audit verify`` and ``audit anchor``."""
    undo_window_hours: float = Field(default=24.0, ge=0, le=24 * 90, alias="COPILOT_UNDO_WINDOW_HOURS")
    """How long after a write its rep may still undo it (``undo_write``); 0 = no undo."""
    retention_days: int = Field(default=DEFAULT_RETENTION_DAYS, ge=1, alias="COPILOT_RETENTION_DAYS")
    """Days a thread may stay idle before ``retention run`` (and the bot's daily timer) deletes it."""
    audit_retention_days: int = Field(
        default=DEFAULT_AUDIT_RETENTION_DAYS, ge=1, le=36500, alias="COPILOT_AUDIT_RETENTION_DAYS"
    )
    """Days an audit row is kept after its write (``data delete`` keeps a rep's rows this long and
    says until when). Rows past it are not yet removed automatically (docs/ADMIN.md)."""

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
    tool_selection: Literal["rules", "llm", "all"] = Field(default="rules", alias="COPILOT_TOOL_SELECTION")
    """Which tools each model call is offered: ``rules`` (by the conversation's words, no model
    call; :mod:`copilot.middleware.tool_selection`), ``llm`` (LangChain's
    ``LLMToolSelectorMiddleware``: one extra model call a turn) or ``all``."""
    """Comma-separated ``provider:model`` list tried in order when the primary model fails."""
    model_call_run_limit: int = Field(default=12, ge=1, alias="COPILOT_MODEL_CALL_RUN_LIMIT")
    model_call_thread_limit: int = Field(default=200, ge=1, alias="COPILOT_MODEL_CALL_THREAD_LIMIT")
    thread_idle_rotate_hours: float = Field(default=8.0, gt=0, alias="COPILOT_THREAD_IDLE_ROTATE_HOURS")
    """A Teams conversation's next question after this long idle opens a new thread for it,
    carrying a hand-off (``copilot/rotation.py``); so does one that could take its thread
    past the model-call limit."""
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

    # --- CRM (the connector, copilot/crm/) --------------------------------------------------
    crm_ca_bundle: Path | None = Field(default=None, alias="CRM_CA_BUNDLE")
    """A private CA bundle the CRM's TLS certificate chains to (a TLS-inspecting proxy, the
    local sandbox's Dataverse face); unset = the system's trust, right for Dynamics 365."""
    crm_kind: CrmKind = Field(default="reference", alias="CRM_KIND")
    """Which CRM connector: ``reference`` (the sandbox CRM's own MCP write tools) or ``dataverse``
    (Dynamics 365 Sales: reads over its MCP server, writes over the Web API v9.2)."""
    crm_url: str | None = Field(default=None, pattern=r"^https?://[^/\s]+$", alias="CRM_URL")
    """The CRM environment's URL, ``https://<org>.crm.dynamics.com`` (no trailing slash); needed
    for ``dataverse``, from which the MCP endpoint and the OAuth resource derive."""
    crm_mcp_url: str = Field(default="http://127.0.0.1:8765/mcp", alias="CRM_MCP_URL")
    """The CRM's MCP endpoint (streamable HTTP). Default: the local sandbox; for ``dataverse``,
    ``<CRM_URL>/api/mcp``."""
    crm_resource: str = Field(default="api://sandbox-crm", alias="CRM_RESOURCE")
    """The CRM's OAuth resource (audience). ``reference``: scopes ``<resource>/crm.read`` and
    ``/crm.write``; ``dataverse``: ``<CRM_URL>`` with ``/user_impersonation`` and ``/mcp.tools``."""
    crm_dataverse_key_column: str = Field(
        default="new_copilotkey", pattern=r"^[a-z][a-z0-9_]{0,99}$", alias="CRM_DATAVERSE_KEY_COLUMN"
    )
    """``dataverse``: the string column holding a write's idempotency key: an alternate key on
    each activity table (exactly-once creates), and on ``opportunity`` the key of the last
    copilot update (found again by key after a crash)."""
    crm_dataverse_entity_sets: dict[str, str] = Field(
        default_factory=lambda: dict(DATAVERSE_ENTITY_SETS), alias="CRM_DATAVERSE_ENTITY_SETS"
    )
    """``dataverse``: logical name → Web API entity set name (JSON object; merged over the defaults)."""
    crm_dataverse_activity_tables: dict[str, str] = Field(
        default_factory=lambda: dict(DATAVERSE_ACTIVITY_TABLES), alias="CRM_DATAVERSE_ACTIVITY_TABLES"
    )
    """``dataverse``: the copilot's activity type → the activity table it is logged as (JSON
    object, replaces the default); its keys are the activity types reps may log."""
    crm_dataverse_opportunity_columns: dict[str, str] = Field(
        default_factory=dict, alias="CRM_DATAVERSE_OPPORTUNITY_COLUMNS"
    )
    """``dataverse``: the copilot's opportunity fields → this tenant's columns (JSON object, merged
    over the defaults: name, salesstage, estimatedclosedate, estimatedvalue, description for the
    next step, closeprobability)."""
    crm_dataverse_stage_attribute: str = Field(
        default="salesstage", pattern=r"^[a-z][a-z0-9_]{0,99}$", alias="CRM_DATAVERSE_STAGE_ATTRIBUTE"
    )
    """``dataverse``: the opportunity's option-set column whose options are the stages."""
    crm_dataverse_canceled_status: dict[str, int] = Field(
        default_factory=lambda: dict(DATAVERSE_CANCELED_STATUS), alias="CRM_DATAVERSE_CANCELED_STATUS"
    )
    """``dataverse``: activity table → the ``statuscode`` of its Canceled state (``statecode`` 2),
    used to void an activity (JSON object, merged over the defaults)."""
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
    def _crm_endpoints(self) -> Settings:
        """``dataverse`` derives its MCP endpoint and OAuth resource from ``CRM_URL`` (unless
        ``CRM_MCP_URL`` / ``CRM_RESOURCE`` say otherwise); ``reference`` keeps the sandbox's."""
        if self.crm_kind == "reference":
            return self
        if self.crm_url is None:
            raise ConfigurationError(
                "CRM_KIND=dataverse needs CRM_URL, the environment's URL (https://<org>.crm.dynamics.com)"
            )
        if "crm_mcp_url" not in self.model_fields_set:
            self.crm_mcp_url = f"{self.crm_url}/api/mcp"
        if "crm_resource" not in self.model_fields_set:
            self.crm_resource = self.crm_url
        # Overrides merge over the defaults (a tenant renames one set, not all of them).
        self.crm_dataverse_entity_sets = {**DATAVERSE_ENTITY_SETS, **self.crm_dataverse_entity_sets}
        self.crm_dataverse_canceled_status = {
            **DATAVERSE_CANCELED_STATUS,
            **self.crm_dataverse_canceled_status,
        }
        return self

    @model_validator(mode="after")
    def _deployed_has_no_sandbox_defaults(self) -> Settings:
        """A deployment names every endpoint and secret itself: no sandbox default applies."""
        if self.environment != "deployed":
            return self
        # For ``dataverse``, CRM_URL names the CRM's endpoints (checked above).
        derived = {"crm_mcp_url"} if self.crm_kind == "dataverse" else set()
        missing = [
            alias
            for name, alias in _DEPLOYED_REQUIRED.items()
            if name not in derived and (name not in self.model_fields_set or not _given(getattr(self, name)))
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
    def crm_ca_file(self) -> str | None:
        """:attr:`crm_ca_bundle` as the string ``copilot.tls.ssl_context`` takes."""
        return str(self.crm_ca_bundle) if self.crm_ca_bundle is not None else None

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
        """Delegated CRM scopes: read always, write only for an approved write.

        Dataverse has no read-only delegated permission: both tokens carry ``user_impersonation``
        (the Web API: versioned reads for proposals, writes) and ``mcp.tools`` (its MCP server).
        The split is then the copilot's own: the model gets only tools the CRM declares
        read-only, and only the write guard's executors call the Web API's writes.
        """
        match self.crm_kind:
            case "reference":
                scopes = [f"{self.crm_resource}/crm.read"]
                if write:
                    scopes.append(f"{self.crm_resource}/crm.write")
                return scopes
            case "dataverse":
                return [f"{self.crm_resource}/user_impersonation", f"{self.crm_resource}/mcp.tools"]
            case _:
                assert_never(self.crm_kind)

    def fallback_model_names(self) -> list[str]:
        """``COPILOT_FALLBACK_MODELS`` as a list, in the order they are tried."""
        return [name.strip() for name in self.fallback_models.split(",") if name.strip()]
