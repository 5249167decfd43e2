"""The types every write tool shares: the proposal snapshot, the plan, the outcome (pure).

A write's :class:`WriteOutcome` is typed from the executor to the rep: the write guard
builds it, stores it under the idempotency key, hands it to the agent as the tool
message's artifact, and the runner, the bot and the CLI read that artifact. Nobody
parses a write's result back out of text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

Backend = Literal["crm", "mailbox", "store"]
"""Where a write lands, and so which token and session it needs."""

UNRESOLVED = "unresolved"
"""A snapshot ``error`` code: the proposal names something that resolves to no one or to more
than one (a colleague "Megan"). Such a call is answered with the snapshot's message, a question
for the model to ask, and never put to the rep (:mod:`copilot.middleware.approval`)."""


class Target(TypedDict):
    type: str
    id: str | None
    name: str


class ProposalRecord(TypedDict, total=False):
    """The snapshot kept in state under ``proposals[tool_call_id]``."""

    tool: str
    target: Target
    version: int | None
    current: dict[str, Any]
    proposed: dict[str, Any]
    preview: str | None
    error: dict[str, str] | None
    taken_at: str
    restored: dict[str, Any]
    """For an undo: the values it puts back (``current`` holds the values now)."""
    summary: str
    """One line saying what approving does, when there are no fields to show (an undo)."""
    contacts: dict[str, str]
    """The contacts an activity names: id → name as the rep reads it ("" if it cannot)."""


@dataclass(frozen=True)
class WritePlan:
    """What the write guard decided for one approved call: handed to the executor as is."""

    tool: str
    key: str
    """Idempotency key (``thread_id:tool_call_id``), passed to the backend as external id."""
    args: BaseModel
    expected_version: int | None = None
    target: dict[str, Any] = field(default_factory=dict)
    undoes_audit_id: int | None = None
    """For an undo: the audit id of the write it reverses (its own audit row links it)."""
    recovering: bool = False
    """Finishes an attempt that may have reached the backend: the executor asks the backend for
    the write by its key before writing (and before any version check)."""


OutcomeStatus = Literal["done", "conflict", "refused", "failed"]


class WriteOutcome(BaseModel):
    """What one approved write came to.

    ``done`` (with ``audit_id`` once audited), ``conflict`` (nothing written; ``current``
    holds the record's values now), ``refused`` (the backend or a check said no: a
    permission, validation or idempotency ``code``) or ``failed`` (it could not be
    carried out, e.g. the mailbox refused the draft).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: OutcomeStatus
    code: str | None = None
    message: str = ""
    audit_id: int | None = None
    current: dict[str, Any] | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    """The backend's own answer (the activity, the opportunity and its previous values, the draft)."""
    replayed: bool = False
    """Returned from the idempotency record: the write had already been carried out."""
    applied: dict[str, Any] | None = None
    """For ``done``: the arguments it was carried out with, the rep's edits included."""

    @classmethod
    def done(cls, data: Mapping[str, Any], message: str = "") -> WriteOutcome:
        return cls(status="done", data=dict(data), message=message)

    @classmethod
    def conflict(cls, message: str, current: Mapping[str, Any] | None) -> WriteOutcome:
        return cls(status="conflict", message=message, current=dict(current or {}))

    @classmethod
    def refused(cls, code: str, message: str) -> WriteOutcome:
        return cls(status="refused", code=code, message=message)

    @classmethod
    def failed(cls, code: str, message: str) -> WriteOutcome:
        return cls(status="failed", code=code, message=message)

    @property
    def is_error(self) -> bool:
        return self.status in ("refused", "failed")

    def to_json(self) -> dict[str, Any]:
        """The flat JSON the model reads and ``--json`` prints (status ``done``/``conflict``/``error``)."""
        out: dict[str, Any] = {"status": "error" if self.is_error else self.status}
        if self.code is not None:
            out["code"] = self.code
        if self.message:
            out["message"] = self.message
        if self.current is not None:
            out["current"] = self.current
        out.update(self.data)
        if self.audit_id is not None:
            out["audit_id"] = self.audit_id
        if self.replayed:
            out["replayed"] = True
        if self.applied is not None:
            out["applied"] = self.applied
        return out

    @classmethod
    def from_stored(cls, value: Mapping[str, Any]) -> WriteOutcome:
        """An outcome as stored (``model_dump``) or, for rows written before typed outcomes,
        as the flat JSON of :meth:`to_json`."""
        if "data" in value and value.get("status") in ("done", "conflict", "refused", "failed"):
            return cls.model_validate(dict(value))
        flat = dict(value)
        status = flat.pop("status", "failed")
        code = flat.pop("code", None)
        message = str(flat.pop("message", ""))
        current = flat.pop("current", None)
        audit_id = flat.pop("audit_id", None)
        replayed = bool(flat.pop("replayed", False))
        applied = flat.pop("applied", None)
        typed: OutcomeStatus = (
            status if status in ("done", "conflict") else ("refused" if code != "mailbox" else "failed")
        )
        return cls(
            status=typed,
            code=code,
            message=message,
            current=current,
            audit_id=audit_id,
            data=flat,
            replayed=replayed,
            applied=applied if isinstance(applied, dict) else None,
        )
