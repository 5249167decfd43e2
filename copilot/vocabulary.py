"""The CRM's vocabulary: its opportunity stages, the activity types reps log, the opportunity
fields a rep may change. It comes from the CRM (each connector reads it, once per process), and
the write tools' schemas and the approval card's choice lists are built from it.

The literals below are the reference CRM's (the sandbox's), and the fallback only where a CRM
says nothing: one definition, read by the schemas (:mod:`copilot.tools.schemas`), the offline
model's tooling and the evals.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

ReferenceStage = Literal[
    "Prospecting", "Qualification", "Proposal", "Negotiation", "Closed Won", "Closed Lost"
]
"""The reference CRM's stages, in pipeline order (the last two close a deal)."""
REFERENCE_STAGES: tuple[str, ...] = get_args(ReferenceStage)
WON_STAGE: Final[ReferenceStage] = "Closed Won"
LOST_STAGE: Final[ReferenceStage] = "Closed Lost"
CLOSED_STAGES: tuple[str, ...] = (WON_STAGE, LOST_STAGE)
"""What the copilot calls a deal won or lost, on every CRM: the reference stages that close a
deal (a CRM that closes deals with a state rather than a stage, as Dataverse's ``statecode`` does,
reads them under these names)."""
ReferenceActivityType = Literal["call", "meeting", "email", "task"]
"""The activity types the reference CRM logs."""
REFERENCE_ACTIVITY_TYPES: tuple[str, ...] = get_args(ReferenceActivityType)
EDITABLE_OPPORTUNITY_FIELDS: tuple[str, ...] = ("stage", "close_date", "amount", "next_step")
"""Every opportunity field the copilot's ``update_opportunity`` can write; a CRM may allow fewer."""


class Vocabulary(BaseModel):
    """What a CRM calls things, as read from it (or its fallback)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stages: tuple[str, ...] = Field(min_length=1)
    """Stage labels, in the CRM's order."""
    stage_codes: dict[str, int] = Field(default_factory=dict)
    """Label → the CRM's option value, for CRMs that store a stage as a number (Dataverse's
    ``salesstage``); empty when the CRM takes the label itself."""
    activity_types: tuple[str, ...] = Field(min_length=1)
    """Activity types a rep may log."""
    opportunity_fields: tuple[str, ...] = EDITABLE_OPPORTUNITY_FIELDS
    """The opportunity fields a rep may change (a subset of :data:`EDITABLE_OPPORTUNITY_FIELDS`)."""
    source: str = "fallback"
    """Where it was read: a tool schema, a metadata endpoint, or the fallback (for ``doctor``)."""

    @model_validator(mode="after")
    def _consistent(self) -> Vocabulary:
        if len(set(self.stages)) != len(self.stages) or len(set(self.activity_types)) != len(
            self.activity_types
        ):
            raise ValueError("a CRM vocabulary lists each stage and activity type once")
        if self.stage_codes and set(self.stage_codes) != set(self.stages):
            raise ValueError("stage codes must name exactly the stages")
        if unknown := set(self.opportunity_fields) - set(EDITABLE_OPPORTUNITY_FIELDS):
            raise ValueError(f"opportunity fields the copilot cannot write: {sorted(unknown)}")
        return self

    def same_words(self, other: Vocabulary) -> bool:
        """Whether both say the same to a rep and the model (codes and source aside)."""
        return (self.stages, self.activity_types, self.opportunity_fields) == (
            other.stages,
            other.activity_types,
            other.opportunity_fields,
        )


REFERENCE_VOCABULARY = Vocabulary(
    stages=REFERENCE_STAGES, activity_types=REFERENCE_ACTIVITY_TYPES, source="fallback"
)
"""The fallback: the reference CRM's words, used wherever the CRM says nothing."""


_current: Vocabulary | None = None
_current_crm: str | None = None
"""Which CRM ``_current`` was read from (:func:`crm_identity`)."""


def current_vocabulary() -> Vocabulary:
    """The process's CRM vocabulary: as loaded from the CRM, else the fallback."""
    return _current or REFERENCE_VOCABULARY


def install_vocabulary(vocabulary: Vocabulary | None, crm: str | None = None) -> None:
    """Keep ``vocabulary`` (read from ``crm``) as the process's, loaded when an agent is first
    compiled; None forgets it (tests)."""
    global _current, _current_crm
    _current = vocabulary
    _current_crm = crm if vocabulary is not None else None


def vocabulary_loaded(crm: str) -> bool:
    """Whether the process holds the vocabulary of ``crm`` (a deployment serves one CRM; a
    process that starts a service on another, as the tests do, reads that one's)."""
    return _current is not None and _current_crm == crm


def crm_identity(kind: str, url: str | None) -> str:
    """The key a vocabulary is kept under: the connector kind and the CRM's URL."""
    return f"{kind}:{url or ''}"
