"""Dataverse's error vocabulary: ``{"error": {"code": "0x...", "message": "..."}}`` with its status."""

from __future__ import annotations

from typing import Any

# Fault codes as Dataverse reports them (reference §3.4, §3.9, §3.10). PrivilegeDenied's hex
# code is seen only in third-party code; the others are in Microsoft's documentation.
OBJECT_DOES_NOT_EXIST = "0x80040217"
PRIVILEGE_DENIED = "0x80040220"
CONCURRENCY_VERSION_MISMATCH = "0x80060882"
DUPLICATE_RECORD = "0x80040237"
INVALID_ARGUMENT = "0x80040203"
THROTTLED_REQUESTS = "0x80072322"
UNAUTHORIZED = "0x80072560"

VERSION_MISMATCH_MESSAGE = (
    "The version of the existing record doesn't match the RowVersion property provided."
)
DUPLICATE_KEY_MESSAGE = "A record with matching key values already exists."


class DataverseError(Exception):
    """A refused Web API or MCP request, carrying Dataverse's status, hex code and message."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers: dict[str, str] = headers or {}

    def payload(self) -> dict[str, Any]:
        """The wire body: exactly Dataverse's shape."""
        return {"error": {"code": self.code, "message": self.message}}


def bad_request(message: str) -> DataverseError:
    """400 for a malformed request (bad query option, unknown column, invalid value)."""
    return DataverseError(400, INVALID_ARGUMENT, message)


def not_found(entity: str, record_id: str) -> DataverseError:
    """404 as Dataverse words it: ``<entity> With Id = <guid> Does Not Exist``."""
    return DataverseError(404, OBJECT_DOES_NOT_EXIST, f"{entity} With Id = {record_id} Does Not Exist")


def privilege_denied(message: str) -> DataverseError:
    """403: the caller's roles, sharing or field security do not allow this."""
    return DataverseError(403, PRIVILEGE_DENIED, message)


def version_mismatch() -> DataverseError:
    """412: a stale ``If-Match`` ETag (ConcurrencyVersionMismatch)."""
    return DataverseError(412, CONCURRENCY_VERSION_MISMATCH, VERSION_MISMATCH_MESSAGE)


def duplicate_key() -> DataverseError:
    """412: ``If-None-Match: *`` on a row that exists (create-only upsert)."""
    return DataverseError(412, DUPLICATE_RECORD, DUPLICATE_KEY_MESSAGE)


def throttled(limit: int, window_seconds: int, retry_after: int) -> DataverseError:
    """429 with ``Retry-After`` in seconds (service protection: number of requests)."""
    return DataverseError(
        429,
        THROTTLED_REQUESTS,
        f"Number of requests exceeded the limit of {limit} over time window of {window_seconds} seconds.",
        {"Retry-After": str(retry_after)},
    )
