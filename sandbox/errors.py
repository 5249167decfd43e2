"""The CRM's error vocabulary: stable machine-readable codes a client can branch on."""

from __future__ import annotations

import json
from typing import Any, Literal

ErrorCode = Literal[
    "permission_denied",
    "not_found",
    "conflict",
    "validation",
    "idempotency_mismatch",
    "rate_limited",
    "unavailable",
]


class CrmError(Exception):
    """A CRM call refused or failed; ``code`` is stable, ``details`` is structured context."""

    def __init__(self, code: ErrorCode, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.details: dict[str, Any] = details or {}

    def to_payload(self) -> dict[str, Any]:
        """The wire shape of the error, as MCP tool errors and HTTP bodies carry it."""
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}

    def to_json(self) -> str:
        return json.dumps(self.to_payload(), default=str)
