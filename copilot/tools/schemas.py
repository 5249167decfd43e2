"""Pydantic argument schemas of the copilot's own (write and preference) tools.

Each field's ``title`` is its label wherever a rep reads it (cards, answers).

These are what the model fills in, what a rep edits in a card, and what the write
guard re-validates: one schema per tool, ``extra="forbid"`` so an unknown field is an
error, not silently dropped. Fields the rep may not change (owner, commission,
probability) are simply not here.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator
from pydantic.json_schema import DEFAULT_REF_TEMPLATE, GenerateJsonSchema, JsonSchemaMode

from copilot.posting import MAX_LEAD_MINUTES, MIN_LEAD_MINUTES, parse_clock
from copilot.vocabulary import (
    REFERENCE_STAGES,
    REFERENCE_VOCABULARY,
    ReferenceActivityType,
    ReferenceStage,
    Vocabulary,
)

Stage = ReferenceStage
"""The reference CRM's stages: the static schema's; a CRM's own come from its vocabulary
(:func:`vocabulary_schemas`)."""
STAGES: tuple[str, ...] = REFERENCE_STAGES
ActivityType = ReferenceActivityType
EmailTone = Literal["friendly", "formal", "concise"]

MAX_ACTIVITY_CONTACTS = 20
"""The most contacts one activity names: a call or meeting, not a mailing list."""
TASK_TYPE = "task"
"""The activity type that has a due date (every CRM vocabulary here has it by this name)."""

MAX_AMOUNT = 1e12
"""The largest amount the CRM stores; bounded here so a bad edit is refused while the
proposal is still open, not by the CRM after the approval was used up."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    _json_schemas: ClassVar[dict[tuple[Any, ...], dict[str, Any]]] = {}

    @classmethod
    def model_json_schema(
        cls,
        by_alias: bool | None = None,
        ref_template: str = DEFAULT_REF_TEMPLATE,
        schema_generator: type[GenerateJsonSchema] = GenerateJsonSchema,
        mode: JsonSchemaMode = "validation",
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Pydantic's JSON schema, generated once per class and options (a copy each call).

        Every tool's schema goes out with every model call (``bind_tools`` converts each
        tool again each time), and generating one costs milliseconds: about a fifth of a
        worker's CPU per turn went here. A class's schema never changes, so it is cached.
        """
        key = (cls, by_alias, ref_template, schema_generator, mode, tuple(sorted(kwargs.items())))
        cached = _Args._json_schemas.get(key)
        if cached is None:
            cached = super().model_json_schema(by_alias, ref_template, schema_generator, mode, **kwargs)
            _Args._json_schemas[key] = cached
        return copy.deepcopy(cached)


class LogActivityArgs(_Args):
    """Log a call, meeting, email or task against an account and/or opportunity."""

    type: ActivityType = Field(title="Type", description="call, meeting, email or task")
    subject: str = Field(title="Subject", min_length=1, max_length=200, description="One-line summary")
    notes: str = Field(
        default="", title="Notes", max_length=4000, description="What was discussed, next steps"
    )
    account_id: str | None = Field(
        default=None, title="Account", description="Account record id (as a tool result returned it)"
    )
    opportunity_id: str | None = Field(default=None, title="Opportunity", description="Opportunity record id")
    occurred_at: dt.datetime | None = Field(
        default=None, title="When", description="When it happened (ISO); default now"
    )
    contact_ids: list[str] = Field(
        default_factory=list,
        title="Contacts",
        max_length=MAX_ACTIVITY_CONTACTS,
        description="Contact record ids of the people taking part (as a tool result returned them)",
    )
    due_date: dt.date | None = Field(
        default=None, title="Due", description="A task's due date (ISO date); only for a task"
    )

    @model_validator(mode="after")
    def _regarding_something(self) -> LogActivityArgs:
        if not self.account_id and not self.opportunity_id:
            raise ValueError("an activity needs an account_id or an opportunity_id")
        if self.due_date is not None and self.type != TASK_TYPE:
            raise ValueError(f"only a {TASK_TYPE} has a due date (this is a {self.type})")
        # The same contact twice is one party: kept once, in the order given.
        self.contact_ids = list(dict.fromkeys(c.strip() for c in self.contact_ids if c.strip()))
        return self


class UpdateOpportunityArgs(_Args):
    """Change an opportunity's stage, close date, amount and/or next step."""

    opportunity_id: str = Field(min_length=1, title="Opportunity", description="Opportunity record id")
    stage: Stage | None = Field(default=None, title="Stage", description="New stage")
    close_date: dt.date | None = Field(
        default=None, title="Close date", description="New close date (ISO date)"
    )
    amount: float | None = Field(
        default=None,
        title="Amount",
        ge=0,
        le=MAX_AMOUNT,
        allow_inf_nan=False,
        description="New amount in the opportunity's currency",
    )
    next_step: str | None = Field(
        default=None, title="Next step", max_length=500, description="New next step"
    )

    @model_validator(mode="after")
    def _changes_something(self) -> UpdateOpportunityArgs:
        if not self.changes():
            raise ValueError("nothing to change: give stage, close_date, amount or next_step")
        return self

    def changes(self) -> dict[str, object]:
        """The fields to change, as the CRM expects them (JSON-ready)."""
        data = self.model_dump(mode="json", exclude={"opportunity_id"}, exclude_none=True)
        return data


def _literal(values: tuple[str, ...]) -> Any:
    """``Literal[values]`` built at run time: the card reads a field's choices from it."""
    return Literal.__getitem__(values)


def vocabulary_schemas(vocabulary: Vocabulary) -> tuple[type[LogActivityArgs], type[UpdateOpportunityArgs]]:
    """The CRM write tools' schemas in a CRM's words: its activity types and stages.

    The reference vocabulary gives the static classes themselves; any other gives subclasses
    (so code that checks ``isinstance`` still holds) whose ``type`` and ``stage`` take exactly
    the CRM's values, which the model is offered, the card lists and the write guard checks.
    """
    if vocabulary.same_words(REFERENCE_VOCABULARY):
        return LogActivityArgs, UpdateOpportunityArgs
    types = ", ".join(vocabulary.activity_types)
    log = create_model(
        "LogActivityArgs",
        __base__=LogActivityArgs,
        __doc__=LogActivityArgs.__doc__,
        type=(_literal(vocabulary.activity_types), Field(title="Type", description=types)),
    )
    update = create_model(
        "UpdateOpportunityArgs",
        __base__=UpdateOpportunityArgs,
        __doc__=UpdateOpportunityArgs.__doc__,
        stage=(
            _literal(vocabulary.stages) | None,
            Field(default=None, title="Stage", description="New stage"),
        ),
    )
    return log, update


class DraftFollowupEmailArgs(_Args):
    """Save a follow-up email to the rep's Outlook drafts (never sent)."""

    contact_id: str = Field(
        min_length=1, title="Contact", description="Contact record id; the address is looked up in the CRM"
    )
    subject: str = Field(title="Subject", min_length=1, max_length=200)
    body: str = Field(
        title="Message",
        min_length=1,
        max_length=8000,
        description="The message text, without greeting/signature",
    )
    account_id: str | None = Field(default=None, title="Account", description="Account the email is about")
    opportunity_id: str | None = Field(
        default=None, title="Opportunity", description="Opportunity the email is about"
    )


class UpdatePreferencesArgs(_Args):
    """Change (or reset) the rep's own drafting preferences."""

    email_tone: EmailTone | None = Field(default=None, title="Email tone")
    signature: str | None = Field(default=None, title="Signature", max_length=500)
    followup_cadence_days: int | None = Field(default=None, title="Follow-up cadence (days)", ge=1, le=90)
    reset: bool = Field(
        default=False,
        title="Reset to defaults",
        description="Restore the defaults (ignores the other fields)",
    )

    @model_validator(mode="after")
    def _changes_something(self) -> UpdatePreferencesArgs:
        fields = (self.email_tone, self.signature, self.followup_cadence_days)
        if not self.reset and all(f is None for f in fields):
            raise ValueError("nothing to change: give email_tone, signature, followup_cadence_days or reset")
        return self


class ChangeBriefsAndDigestArgs(_Args):
    """Turn the rep's meeting prep briefs or daily digest on or off, or change when they come."""

    briefs: bool | None = Field(
        default=None, title="Brief", description="Meeting prep briefs on (true) or off"
    )
    lead_minutes: int | None = Field(
        default=None,
        title="Brief, minutes before",
        description="How many minutes before each meeting the brief comes (turns briefs on)",
        ge=MIN_LEAD_MINUTES,
        le=MAX_LEAD_MINUTES,
    )
    digest: bool | None = Field(default=None, title="Digest", description="The daily digest on (true) or off")
    digest_time: str | None = Field(
        default=None,
        title="Digest at",
        description="The rep's local time of day for the digest, HH:MM (turns the digest on)",
        json_schema_extra={"format": "time"},
    )

    @field_validator("digest_time")
    @classmethod
    def _clock(cls, value: str | None) -> str | None:
        return None if value is None else f"{parse_clock(value):%H:%M}"

    @model_validator(mode="after")
    def _changes_something(self) -> ChangeBriefsAndDigestArgs:
        if all(f is None for f in (self.briefs, self.lead_minutes, self.digest, self.digest_time)):
            raise ValueError("nothing to change: give briefs, lead_minutes, digest or digest_time")
        return self


class NoArgs(_Args):
    """A tool without arguments."""


class DelegateApprovalsArgs(_Args):
    """Let a colleague approve or reject the rep's CRM proposals until a day."""

    colleague: str = Field(
        min_length=1,
        max_length=200,
        title="Colleague",
        description="The colleague, as the rep named them: full name, first name or email",
    )
    until: dt.date = Field(title="Until", description="The last day they may approve (ISO date)")


class RevokeDelegationArgs(_Args):
    """End the rep's approval delegations: to one colleague, or all of them."""

    colleague: str | None = Field(
        default=None,
        max_length=200,
        title="Colleague",
        description="Whose delegation to end (full name, first name or email); empty = every one",
    )


class UndoWriteArgs(_Args):
    """Undo one executed write (by its audit id) with the compensating change."""

    audit_id: int = Field(
        ge=1,
        title="Change",
        description="The audit id of the executed write to undo (from recent_writes or a write's result)",
    )
