"""What crosses the CRM writer's interface: typed requests and results, and the interface itself.

Record values use the copilot's field names (``name``, ``stage``, ``close_date``, ``amount``,
``currency``, ``next_step``, ``probability``; ``name``, ``email``, ``title`` for a contact); each
connector translates them to and from its CRM's columns. A record's version is an integer that
grows with every change (the reference CRM's ``version``, Dataverse's row version inside its
weak ETag ``W/"<n>"``).

Refusals are raised (:class:`~copilot.errors.CrmCallError`: ``permission_denied``,
``not_found``, ``validation``) and so are outages (:class:`~copilot.errors.CrmUnavailable`,
with the CRM's retry-after hint when it sent one); a version conflict is a typed result,
because the caller shows its current values to the rep.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

TargetKind = Literal["account", "opportunity", "contact"]
"""The records a write reads as its target."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RecordAccess(_Model):
    """What the rep may do with a record, when the CRM says (None = it does not say: the CRM
    itself decides at the write, answering ``permission_denied``)."""

    edit: bool | None = None
    log_activity: bool | None = None


class CrmRecord(_Model):
    """One record as the rep may read it, with its version."""

    kind: TargetKind
    id: str
    name: str = ""
    version: int | None = None
    """None when the CRM keeps no version of this record."""
    values: dict[str, Any] = Field(default_factory=dict)
    """The record's fields in the copilot's names (``id`` and ``version`` included)."""
    access: RecordAccess = RecordAccess()


class ActivityRequest(_Model):
    """Log one activity, exactly once per ``key``."""

    key: str = Field(min_length=1, max_length=200)
    """The idempotency key, ``thread_id:tool_call_id``."""
    type: str = Field(min_length=1)
    """An activity type of the CRM's vocabulary."""
    subject: str
    notes: str = ""
    occurred_at: dt.datetime | None = None
    account_id: str | None = None
    opportunity_id: str | None = None
    """What it regards: the opportunity if given, else the account."""
    contact_ids: tuple[str, ...] = ()
    """Contacts taking part (activity parties)."""
    due: dt.date | None = None
    """A task's due date."""


class ActivityResult(_Model):
    """The activity as stored; ``created`` is False when the key had been written already."""

    activity: dict[str, Any]
    created: bool


class ActivityRef(_Model):
    """An activity to void: its id, and its type when known (a CRM with a table per type needs it)."""

    id: str = Field(min_length=1)
    type: str | None = None


class OpportunityUpdate(_Model):
    """Change an opportunity, only if it is still at ``expected_version``."""

    key: str = Field(min_length=1, max_length=200)
    opportunity_id: str = Field(min_length=1)
    expected_version: int
    changes: dict[str, Any] = Field(min_length=1)
    """Copilot field names → JSON values (``UpdateOpportunityArgs.changes()``)."""
    previous: dict[str, Any] | None = None
    """The changed fields' values at ``expected_version``, as the caller read them: reported
    back as :attr:`Updated.previous` by a CRM that does not report its own."""


class Updated(_Model):
    """The update was applied (now, or by an earlier attempt with the same key: ``replayed``)."""

    status: Literal["updated"] = "updated"
    opportunity: dict[str, Any]
    previous: dict[str, Any] | None = None
    """The changed fields' values before, when the CRM reports them."""
    replayed: bool = False


class Conflict(_Model):
    """Nothing was written: the opportunity changed since ``expected_version``."""

    status: Literal["conflict"] = "conflict"
    current: dict[str, Any] | None = None
    """Its values now, to show the rep next to the proposal."""


UpdateResult = Annotated[Updated | Conflict, Field(discriminator="status")]


class CrmWriter(Protocol):
    """One rep's typed access to the CRM for the copilot's own writes (and their reads).

    Built per run with the rep's delegated token (read or write); never shared across reps.
    """

    async def read(self, kind: TargetKind, record_id: str) -> CrmRecord:
        """The record with its version and the rep's access."""
        ...

    async def create_activity(self, request: ActivityRequest) -> ActivityResult:
        """Create the activity once: a repeat of ``request.key`` returns the stored one."""
        ...

    async def update_opportunity(self, request: OpportunityUpdate) -> Updated | Conflict:
        """Apply ``changes`` under the version check; a conflict carries the current values.

        An update this key already applied is :class:`Updated` with ``replayed``, never a conflict.
        """
        ...

    async def void_activity(self, activity: ActivityRef, reason: str) -> dict[str, Any]:
        """Cancel (void) the activity; voiding a voided one is harmless. Returns it as stored."""
        ...

    async def find_activity(self, key: str, activity_type: str) -> ActivityResult | None:
        """The activity an earlier attempt created under ``key``; None if it created none."""
        ...

    async def find_update(self, key: str, opportunity_id: str) -> Updated | None:
        """The opportunity as an earlier attempt with ``key`` left it, if that attempt applied
        (and nothing changed it since); None otherwise. Asked before any version check."""
        ...
