"""The copilot's settings: one pydantic object built at the edge and passed in."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent


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

    @property
    def embedded_pgdata(self) -> Path:
        return self.data_dir / "postgres"
