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


class AuthError(CopilotError):
    """Signing in or getting a delegated token failed; ``no_access`` = the rep lacks CRM access."""

    code = "auth"

    def __init__(self, message: str, *, no_access: bool = False, **fields: object):
        super().__init__(message, no_access=no_access, **fields)
        self.no_access = no_access


UNAVAILABLE_MESSAGE = (
    "Live CRM data is unavailable right now; nothing was read or written. Please try again shortly."
)
"""What the rep is told when the CRM cannot be reached (:class:`CrmUnavailable`)."""


class CrmUnavailable(CopilotError):
    """The CRM cannot be reached (down, timing out, throttling, circuit open): transient.

    ``retry_after`` is the CRM's own hint (HTTP ``Retry-After``, seconds) when it sent one;
    the retry middleware never retries sooner (copilot/middleware/resilience.py).
    """

    code = "crm_unavailable"

    def __init__(self, message: str, *, retry_after: float | None = None, **fields: Any):
        super().__init__(message, retry_after=retry_after, **fields)
        self.retry_after = retry_after


class CrmCallError(CopilotError):
    """The CRM answered and refused a call; ``crm_code`` is the copilot's stable code for it.

    Codes: ``permission_denied`` (the rep's role or sharing does not allow it), ``not_found``,
    ``validation`` (the CRM rejected the values), ``conflict`` (a version mismatch, for a
    caller that has no typed conflict result), or a CRM's own code passed through.
    """

    code = "crm_error"

    def __init__(self, crm_code: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message, crm_code=crm_code, details=details or {})
        self.crm_code = crm_code
        self.details: dict[str, Any] = details or {}


class MailboxUnavailable(CopilotError):
    """The rep's mailbox (Microsoft Graph) cannot be reached; a draft waits, nothing is lost."""

    code = "mailbox_unavailable"


class CalendarUnavailable(CopilotError):
    """The rep's calendar (Microsoft Graph) cannot be reached or answered something unreadable."""

    code = "calendar_unavailable"


class MailboxSettingsUnavailable(CopilotError):
    """The rep's mailbox settings (Microsoft Graph) cannot be read; the schedule falls back."""

    code = "mailbox_settings_unavailable"


class DirectoryUnavailable(CopilotError):
    """The organisation's directory (Microsoft Graph users) cannot be reached; nothing changed."""

    code = "directory_unavailable"


class InvalidDecision(CopilotError):
    """A decision on a proposal is malformed, stale or not the caller's to make; nothing ran."""

    code = "invalid_decision"


class ProposalNotPending(InvalidDecision):
    """A decision for a proposal that is not waiting for one (decided already, or unknown)."""

    code = "proposal_not_pending"

    def __init__(self, tool_call_id: str):
        super().__init__(
            f"proposal {tool_call_id} is not waiting for a decision "
            "(already decided, or not part of this conversation)",
            tool_call_id=tool_call_id,
        )
        self.tool_call_id = tool_call_id


class ThreadNotFound(CopilotError):
    """No conversation thread has this id (never created, or expired by retention)."""

    code = "thread_not_found"


class ThreadBusy(CopilotError):
    """Another run on the same thread did not finish in time; nothing was done (try again)."""

    code = "thread_busy"


class ThreadAccessDenied(CopilotError):
    """The thread exists but the caller neither owns it nor holds a delegation for it."""

    code = "thread_access_denied"


class IdempotencyMismatch(CopilotError):
    """An idempotency key was reused with different arguments: refused, never a second write."""

    code = "idempotency_mismatch"


class AuditTamperDetected(CopilotError):
    """The audit log's hash chain does not verify: a row was altered, removed or inserted."""

    code = "audit_tampered"


class AnchorStoreError(CopilotError):
    """The anchor store could not be read or appended to."""

    code = "audit_anchor_store"


class AnchorStoreAltered(AnchorStoreError):
    """The store itself shows it was tampered with (a record blob missing or replaced):
    :func:`~copilot.persistence.audit.verify` reports it as a failure, not an outage."""

    code = "audit_anchor_store_altered"


class InvalidInput(CopilotError):
    """The caller's input (a command-line argument, a question, a file) is malformed or names
    no one that exists; nothing ran."""

    code = "invalid_input"


class SourceUnavailable(CopilotError):
    """A document source (a URL, a drive) could not be reached; nothing was ingested from it."""

    code = "source_unavailable"


class ProactivePostFailed(CopilotError):
    """A proactive message (a brief, a digest) did not reach the rep's chat: its claim is given
    back so the next timer run posts it."""

    code = "proactive_post_failed"
