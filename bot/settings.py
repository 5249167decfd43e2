"""The Teams bot's settings: Bot Framework channel auth, queue, SSO, rendering."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from bot import DEFAULT_TURN_QUEUE
from copilot.settings import DEFAULT_RETENTION_DAYS

AnswerSources = Literal["auto", "entities", "card"]
"""How an answer shows its sources: Teams citation entities, a card's Sources list, or
``auto`` (entities where the Teams client shows them; see ``bot.ai_entities.answer_style``)."""


class BotSettings(BaseSettings):
    """Bot Framework and hosting configuration (environment variables, see README)."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    microsoft_app_id: str = Field(default="", alias="MicrosoftAppId")
    """The bot's app id. Empty = local development mode (no auth), for the Agents Playground only."""
    microsoft_app_password: SecretStr = Field(default=SecretStr(""), alias="MicrosoftAppPassword")
    microsoft_app_tenant_id: str = Field(default="", alias="MicrosoftAppTenantId")
    microsoft_app_type: str = Field(default="MultiTenant", alias="MicrosoftAppType")
    openid_metadata_url: str | None = Field(
        default="https://login.botframework.com/v1/.well-known/openidconfiguration",
        alias="TO_BOT_FROM_CHANNEL_OPENID_METADATA_URL",
    )
    """Where channel token signing keys are published (Bot Framework's by default)."""
    channel_token_issuer: str | None = Field(
        default="https://api.botframework.com", alias="TO_BOT_FROM_CHANNEL_TOKEN_ISSUER"
    )
    """botbuilder takes its parameterised path (TO_CHANNEL_FROM_BOT_OAUTH_SCOPE is always
    set), which has no built-in defaults: unset, every channel token would be refused."""
    connector_authority: str = Field(
        default="https://login.microsoftonline.com", alias="BOT_CONNECTOR_AUTHORITY"
    )
    connector_tenant: str = Field(default="botframework.com", alias="BOT_CONNECTOR_TENANT")
    connector_scope: str = Field(default="https://api.botframework.com", alias="BOT_CONNECTOR_SCOPE")
    connector_ca_bundle: str | None = Field(default=None, alias="BOT_CONNECTOR_CA_BUNDLE")

    queue_connection: str = Field(default="UseDevelopmentStorage=true", alias="AzureWebJobsStorage")
    """A connection string (Azurite, or storage with shared keys); ignored when
    ``AzureWebJobsStorage__queueServiceUri`` is set."""
    queue_service_uri: str | None = Field(
        default=None, pattern=r"^https://\S+$", alias="AzureWebJobsStorage__queueServiceUri"
    )
    """Identity-based storage, as the Functions host's own triggers use it when shared keys
    are off: the turn queue is reached at this URI with the managed identity."""
    storage_client_id: str | None = Field(default=None, alias="AzureWebJobsStorage__clientId")
    """The user-assigned managed identity for that storage (the system identity if unset)."""
    queue_name: str = Field(default=DEFAULT_TURN_QUEUE, alias="COPILOT_TURN_QUEUE")

    token_encryption_key: SecretStr | None = Field(default=None, alias="COPILOT_TOKEN_ENCRYPTION_KEY")
    """Fernet key for cached delegated tokens; required in deployments (SSO)."""
    sso_connection_name: str = Field(default="", alias="COPILOT_SSO_CONNECTION")
    """The Azure Bot resource's OAuth connection: Teams SSO's, and where the timers ask the Bot
    Framework token service for a rep's token (``bot.proactive_reps``)."""
    oauth_url: str = Field(default="https://token.botframework.com", alias="OAUTH_URL")
    """The Bot Framework token service (botbuilder's ``OAUTH_URL``; its default is this one)."""
    bot_domain: str = Field(default="localhost", alias="BOT_DOMAIN")
    record_url_template: str | None = Field(default=None, alias="CRM_RECORD_URL_TEMPLATE")
    """E.g. ``https://contoso.crm.dynamics.com/main.aspx?id={id}``: citations become links."""
    retention_days: int = Field(default=DEFAULT_RETENTION_DAYS, ge=1, alias="COPILOT_RETENTION_DAYS")
    answer_sources: AnswerSources = Field(default="auto", alias="COPILOT_ANSWER_SOURCES")
    brief_lead_minutes: int = Field(default=60, ge=1, le=10080, alias="COPILOT_BRIEF_LEAD_MINUTES")
    proactive_claim_lease_seconds: int = Field(
        default=600, ge=1, le=86400, alias="COPILOT_PROACTIVE_CLAIM_LEASE_SECONDS"
    )
    """How old a brief's or digest's claim whose post never completed must be before another
    instance may take it over (its instance was killed mid-post); longer than a post takes."""
    """How long before a meeting its brief is posted (the admin's setting; the default is
    ``copilot.briefs.service.DEFAULT_LEAD_MINUTES``, a unit test keeps them equal: importing it
    here would load the brief service into the HTTP edge)."""
    group_answers: bool = Field(default=False, alias="COPILOT_GROUP_ANSWERS")
    """Answer CRM questions in group chats and channels too. Off by default: an answer is read
    with the asking rep's permissions, and everyone in the chat would see it."""

    @property
    def dev_mode(self) -> bool:
        """No app credentials: requests are not authenticated (local development only)."""
        return not self.microsoft_app_id

    def botbuilder_configuration(self) -> object:
        """The attribute-style configuration object botbuilder's auth classes read."""
        password = self.microsoft_app_password.get_secret_value()

        class _Config:
            APP_ID = self.microsoft_app_id or None
            APP_PASSWORD = password or None
            APP_TENANTID = self.microsoft_app_tenant_id or None
            APP_TYPE = self.microsoft_app_type
            TO_BOT_FROM_CHANNEL_OPENID_METADATA_URL = self.openid_metadata_url
            TO_BOT_FROM_CHANNEL_TOKEN_ISSUER = self.channel_token_issuer
            TO_CHANNEL_FROM_BOT_OAUTH_SCOPE = self.connector_scope
            OAUTH_URL = self.oauth_url

        return _Config()
