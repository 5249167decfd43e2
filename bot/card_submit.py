"""What Teams sends back when a rep presses a decision button, turned into a runner decision.

Teams delivers an ``Action.Submit`` as the button's ``data`` merged with the values of
the card's inputs (``{**data, **inputs}``), every input value a string, plus keys of its
own. :func:`parse_submission` checks our part strictly and collects the inputs
(``edit.<field>``, ``reject.reason``); :func:`to_decision` checks the submission against
the proposal that is actually pending (same tool, same arguments, by digest) and builds
the decision dict ``CopilotService.resume`` takes. Pure: no I/O.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bot.cards.approval import EDIT_PREFIX, REJECT_REASON_ID, REJECT_REASON_MAX, shown_value
from bot.cards.blocks import COMMAND_KIND, SUBMIT_KIND, SUBMIT_VERSION
from bot.cards.digest import (
    DIGEST_FEEDBACK_KIND,
    DIGEST_FEEDBACK_VERSION,
    SNOOZE_INPUT_ID,
    DigestFeedbackKind,
)
from bot.cards.fields import EDITABLE_FIELDS, FieldSpec, field_spec
from bot.cards.outcome import UNDO_KIND
from bot.cards.suggestions import DECLINE_SUGGESTION_KIND
from copilot.briefs.types import SuggestionKind
from copilot.errors import CopilotError
from copilot.turns import args_digest

if TYPE_CHECKING:
    from copilot.turns import Proposal

__all__ = [
    "CardSubmission",
    "DigestFeedback",
    "InvalidSubmission",
    "args_digest",
    "command_text",
    "declined_suggestion",
    "parse_digest_feedback",
    "parse_submission",
    "to_decision",
]

STALE_MESSAGE = "This card is out of date or was altered; nothing was changed."
REASON_REQUIRED = "Please give a reason for rejecting this proposal; it is still waiting for your decision."

InputValue = str | int | float | bool | None


class InvalidSubmission(CopilotError):
    """A card submission that cannot be acted on; the message is safe to show the rep."""

    code = "invalid_submission"


class CardSubmission(BaseModel):
    """A decision button's data plus the inputs Teams merged into it.

    Keys Teams adds are ignored; ours are checked strictly (no coercion: ``v`` must be
    the number 1, ids must be non-empty strings, the digest 64 hex digits).
    """

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    copilot: Literal["decision"]
    v: Literal[1]
    thread_id: str = Field(min_length=1, max_length=200)
    tool_call_id: str = Field(min_length=1, max_length=200)
    tool: str = Field(min_length=1, max_length=100)
    action: Literal["approve", "edit", "reject"]
    args_digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    edits: dict[str, InputValue] = Field(default_factory=dict)
    """Submitted ``edit.<field>`` inputs, keyed by field name (as sent: usually strings)."""
    reason: str | None = Field(default=None, max_length=REJECT_REASON_MAX)
    """The ``reject.reason`` input, stripped; ``None`` when empty or absent."""

    @model_validator(mode="before")
    @classmethod
    def _collect_inputs(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        data = {k: v for k, v in raw.items() if not k.startswith(EDIT_PREFIX) and k != REJECT_REASON_ID}
        if "edits" not in raw:
            data["edits"] = {k[len(EDIT_PREFIX) :]: v for k, v in raw.items() if k.startswith(EDIT_PREFIX)}
        if "reason" not in raw:
            reason = raw.get(REJECT_REASON_ID)
            data["reason"] = reason.strip() or None if isinstance(reason, str) else reason
        return data


_FIELD_NAMES = {
    "copilot": "card type",
    "v": "card version",
    "thread_id": "conversation",
    "tool_call_id": "proposal id",
    "tool": "tool",
    "action": "button",
    "args_digest": "proposal fingerprint",
    "reason": "reason",
}


def parse_submission(value: Any) -> CardSubmission:
    """Parse ``activity.value`` of a card submit; :class:`InvalidSubmission` if it is not usable.

    Refused (with a message for the rep): anything that is not from a copilot decision
    button, missing or malformed fields, an unknown card version, a rejection without a
    reason.
    """
    if not isinstance(value, dict) or value.get("copilot") != SUBMIT_KIND:
        raise InvalidSubmission("That button isn't a decision on a copilot proposal, so nothing was done.")
    version = value.get("v")
    if type(version) is not int or version != SUBMIT_VERSION:
        raise InvalidSubmission(
            "This card comes from a different version of the copilot; ask again for a fresh card."
        )
    try:
        submission = CardSubmission.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"][0] if first["loc"] else "card"
        if loc == "reason":
            raise InvalidSubmission(
                f"The reason is too long (at most {REJECT_REASON_MAX} characters); nothing was changed."
            ) from exc
        if loc == "edits":
            raise InvalidSubmission("The edited values could not be read; nothing was changed.") from exc
        what = _FIELD_NAMES.get(str(loc), str(loc))
        problem = "is missing" if first["type"] == "missing" else "is not valid"
        raise InvalidSubmission(f"This card's {what} {problem}; nothing was changed.") from exc
    if submission.action == "reject" and not submission.reason:
        raise InvalidSubmission(REASON_REQUIRED)
    return submission


def undo_audit_id(value: Any) -> int | None:
    """The audit id of an Undo button's submission (``{"copilot": "undo", "audit_id": n}``), else ``None``."""
    if isinstance(value, dict) and value.get("copilot") == UNDO_KIND:
        audit_id = value.get("audit_id")
        if isinstance(audit_id, int) and not isinstance(audit_id, bool) and audit_id > 0:
            return audit_id
    return None


def command_text(value: Any) -> str | None:
    """The text of a command button (``{"copilot": "command", "text": ...}``), else ``None``."""
    if isinstance(value, dict) and value.get("copilot") == COMMAND_KIND:
        text = value.get("text")
        if isinstance(text, str) and text.strip():
            return text.strip()
    return None


class DeclinedSuggestion(BaseModel):
    """A suggestion's "Not now": which suggestion, at the record version it was made at."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    copilot: Literal["decline_suggestion"]
    v: Literal[1]
    kind: SuggestionKind
    record_id: str = Field(min_length=1, max_length=200)
    record_version: int = Field(ge=1)


def declined_suggestion(value: Any) -> DeclinedSuggestion | None:
    """The suggestion a "Not now" button declines (:func:`bot.cards.decline_suggestion_data`),
    else ``None`` (not that button, or data that is not its own)."""
    if not isinstance(value, dict) or value.get("copilot") != DECLINE_SUGGESTION_KIND:
        return None
    try:
        return DeclinedSuggestion.model_validate(value)
    except ValidationError:
        return None


MAX_SNOOZED = 50
"""More records than a digest could list in one Snooze submission is not a real submission."""


class DigestFeedback(BaseModel):
    """A digest card's "Not useful" or "Snooze" submission (the day's digest, the snoozed records)."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    copilot: Literal["digest_feedback"]
    v: Literal[1]
    kind: DigestFeedbackKind
    day: dt.date
    records: tuple[str, ...] = ()


def parse_digest_feedback(value: Any) -> DigestFeedback:
    """Parse a digest card's feedback submission; :class:`InvalidSubmission` if it is not usable.

    A Snooze carries the panel's ChoiceSet (comma-separated record ids); none picked is refused.
    """
    if not isinstance(value, dict) or value.get("copilot") != DIGEST_FEEDBACK_KIND:
        raise InvalidSubmission("That button isn't a digest's feedback, so nothing was done.")
    if value.get("v") != DIGEST_FEEDBACK_VERSION or type(value.get("v")) is not int:
        raise InvalidSubmission(
            "This digest comes from a different version of the copilot; nothing was stored."
        )
    raw = value.get(SNOOZE_INPUT_ID)
    picked = [r.strip() for r in raw.split(",") if r.strip()] if isinstance(raw, str) else []
    if any(len(r) > 200 for r in picked) or len(picked) > MAX_SNOOZED:
        raise InvalidSubmission("The snoozed lines could not be read; nothing was stored.")
    try:
        day = dt.date.fromisoformat(str(value.get("day")))
        feedback = DigestFeedback.model_validate(
            {
                "copilot": value.get("copilot"),
                "v": value.get("v"),
                "kind": value.get("kind"),
                "day": day,
                "records": tuple(picked),
            }
        )
    except (ValueError, ValidationError) as exc:
        raise InvalidSubmission("This digest's button is not valid; nothing was stored.") from exc
    if feedback.kind == "snooze" and not feedback.records:
        raise InvalidSubmission("Pick at least one line to snooze; nothing was stored.")
    return feedback


# --- edits ----------------------------------------------------------------------------------------


def _empty(raw: InputValue) -> bool:
    return raw is None or (isinstance(raw, str) and not raw.strip())


def _convert(spec: FieldSpec, raw: InputValue) -> Any:
    """A submitted input value as the schema's type; ``None`` = cleared (optional fields)."""
    if _empty(raw):
        if spec.kind == "toggle":
            return False
        if spec.required:
            raise InvalidSubmission(f"{spec.label} can't be empty; nothing was changed.")
        if not spec.optional:
            return spec.default  # e.g. notes: an empty text, not "no value"
        return None
    if spec.kind == "toggle":
        if isinstance(raw, bool):
            return raw
        return str(raw).strip().lower() == "true"
    if spec.kind in ("number", "integer"):
        if isinstance(raw, bool):
            raise InvalidSubmission(f"{spec.label} must be a number; nothing was changed.")
        try:
            number = float(str(raw).strip().replace(",", "")) if isinstance(raw, str) else float(raw)  # type: ignore[arg-type]
        except ValueError:
            raise InvalidSubmission(
                f"{spec.label} must be a number (got {raw!r}); nothing was changed."
            ) from None
        if not math.isfinite(number):
            raise InvalidSubmission(f"{spec.label} must be a number (got {raw!r}); nothing was changed.")
        if spec.kind == "integer":
            if not number.is_integer():
                raise InvalidSubmission(f"{spec.label} must be a whole number; nothing was changed.")
            return int(number)
        return number
    text = str(raw).strip()
    if spec.kind == "ids":
        return [part.strip() for part in text.split(",") if part.strip()]
    if spec.kind == "date":
        try:
            return dt.date.fromisoformat(text[:10]).isoformat()
        except ValueError:
            raise InvalidSubmission(
                f"{spec.label} must be a date like 2026-12-15 (got {text!r}); nothing was changed."
            ) from None
    if spec.kind == "choice" and text not in spec.choices:
        raise InvalidSubmission(
            f"{spec.label} must be one of {', '.join(spec.choices)} (got {text!r}); nothing was changed."
        )
    return text


def _proposed(spec: FieldSpec, proposal: Proposal) -> Any:
    """The value the Edit panel showed in a field (the proposed one, else the record's now),
    normalised like a submitted one for comparison."""
    value = shown_value(proposal, spec.name)
    if value is None:
        return False if spec.kind == "toggle" else spec.default
    if spec.kind == "date":
        return str(value)[:10]
    if spec.kind == "ids":
        return [str(v).strip() for v in value] if isinstance(value, list) else value
    if spec.kind in ("number", "integer") and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        return value.strip()
    return value


def changed_args(sub: CardSubmission, proposal: Proposal) -> dict[str, Any]:
    """The editable fields whose submitted value differs from what the Edit panel showed (the
    proposal's value, else the record's), typed per schema.

    An input missing from the submission leaves its field as proposed; an empty one clears
    an optional field (``None``). Fields the card does not offer for editing are ignored.
    """
    changes: dict[str, Any] = {}
    for name in EDITABLE_FIELDS.get(proposal.tool, ()):
        if name not in sub.edits:
            continue
        spec = field_spec(proposal.tool, name)
        value = _convert(spec, sub.edits[name])
        if value != _proposed(spec, proposal):
            changes[name] = value
    return changes


def to_decision(sub: CardSubmission, proposal: Proposal) -> dict[str, Any]:
    """The runner's decision for ``proposal`` from a card submission (pure).

    Refuses (:class:`InvalidSubmission`) a card for another proposal or tool, or whose
    arguments digest does not match the pending proposal's (a stale or altered card).
    An edit carries only the changed fields; an edit that changes nothing is an approval.
    """
    if (
        sub.tool_call_id != proposal.tool_call_id
        or sub.tool != proposal.tool
        or sub.args_digest != args_digest(proposal.args)
    ):
        raise InvalidSubmission(STALE_MESSAGE)
    # The digest travels on to the runner, which checks it against the proposal it
    # resumes: the card's binding to the exact arguments holds end to end.
    bound = {"tool_call_id": proposal.tool_call_id, "digest": sub.args_digest}
    if sub.action == "reject":
        if not sub.reason:
            raise InvalidSubmission(REASON_REQUIRED)
        return {**bound, "type": "reject", "reason": sub.reason}
    if sub.action == "edit":
        changes = changed_args(sub, proposal)
        if changes:
            return {**bound, "type": "edit", "args": changes}
    return {**bound, "type": "approve"}
