"""The copilot's error hierarchy: every error carries structured fields, not just text."""

from __future__ import annotations

from typing import Any


class CopilotError(Exception):
    """Base of every error the copilot raises on purpose."""

    code: str = "copilot_error"

    def __init__(self, message: str, **fields: Any):
        super().__init__(message)
        self.message = message
        self.fields: dict[str, Any] = fields

    def __str__(self) -> str:
        return self.message


class ConfigurationError(CopilotError):
    """Settings are missing or inconsistent; raised at start-up, before any request."""

    code = "configuration"


class DatabaseError(CopilotError):
    """The database could not be reached, started or migrated."""

    code = "database"


class MigrationError(DatabaseError):
    """A migration failed or the schema is ahead of this code."""

    code = "migration"
