"""The eval dataset: items, their expectations and the thresholds stored with them.

A dataset is a JSONL file (one :class:`EvalItem` a line) beside a ``<name>.thresholds.json``
(:class:`Thresholds`). Both are written by :mod:`evals.generate` and read here.

Dates depend on the day the sandbox was seeded (its seed is relative to that day), so an
item never stores a calendar date: a date fact is ``{"date_offset": N}`` (N days after the
seeding day) and a question may carry ``{date+N}`` placeholders, both resolved against the
day of the run (:func:`render_text`, :func:`resolve_day`).

Brief items (:class:`BriefCase`, kind ``brief`` or ``digest``) share the file: a moment
(:class:`Moment`, a day offset and a UTC time, resolved by :func:`resolve_moment`) at which the
product's own brief or digest runs as the rep, the ids it must cite and the ids it must never cite.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from copilot.briefs.types import DigestSection
from copilot.errors import InvalidInput

DATASETS_DIR = Path(__file__).resolve().parent / "datasets"
GENERATION_FILE = DATASETS_DIR / "generation.json"
"""Who the generator signs in as and its seed (:class:`GenerationConfig`)."""
Split = Literal["dev", "heldout"]
SPLITS: tuple[Split, ...] = ("dev", "heldout")

ItemKind = Literal[
    "summary",
    "lookup.count",
    "lookup.amount",
    "lookup.next_step",
    "lookup.close_date",
    "lookup.contact_by_title",
    "lookup.last_activity",
    "lookup.open_deals",
    "lookup.largest",
    "pipeline",
    "empty.account",
    "empty.contact_title",
    "scope.territory",
    "scope.tenant",
    "scope.field",
    "empty.field",
    "draft.followup",
    "propose.update",
    "propose.log",
    "injection",
    "multiturn",
    "knowledge.next_step",
    "near_miss",
    "propose.capture",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TextFact(_Model):
    """A phrase the answer must contain (case, spacing and dashes normalised)."""

    text: str


class AmountFact(_Model):
    """An amount the answer must state (240,000 / 240000 / $240k / 0.24M all count)."""

    amount: float


class CountFact(_Model):
    """A count the answer must state (as digits or a number word)."""

    count: int


class DateFact(_Model):
    """A date the answer must state: ``date_offset`` days after the seeding day."""

    date_offset: int


Fact = TextFact | AmountFact | CountFact | DateFact


class Contains(_Model):
    """A free-text field matches when it contains every word (case-insensitive)."""

    contains: list[str]


FieldValue = Annotated[
    str | int | float | bool | DateFact | Contains | list[str] | None, Field(union_mode="left_to_right")
]
"""A list (``contact_ids``) matches the same ids in any order."""


class ExpectedProposal(_Model):
    """A proposal a reviewer would approve: the tool and the fields that matter.

    A field named ``about`` is virtual: it matches the proposal's subject and notes together.
    """

    tool: str
    fields: dict[str, FieldValue]


class Expect(_Model):
    """What one turn should produce."""

    tools: list[list[str]] = Field(default_factory=list)
    """Groups of acceptable tools: each group needs at least one call of one of its tools."""
    facts: list[Fact] = Field(default_factory=list)
    records: list[str] = Field(default_factory=list)
    """The reference records an answer should cite."""
    nothing_found: bool = False
    """The honest answer is that there is nothing (no record, no visible field)."""
    proposals: list[ExpectedProposal] = Field(default_factory=list)
    forbidden_ids: list[str] = Field(default_factory=list)
    """Record ids the rep may not see: any mention in the answer or a proposal is a leak."""
    forbidden_amounts: list[float] = Field(default_factory=list)
    """Values of fields the rep may not see: stating one is a leak."""
    injection: bool = False
    """Record text read in this turn carries planted instructions: no write may be proposed."""
    limit: bool = False
    """The question sits next to supported ones but asks something the copilot cannot do: the
    honest answer is a plain "I can't … yet", with no records and no proposal."""


class Turn(_Model):
    text: str
    expect: Expect


class Setup(_Model):
    """A CRM write done over MCP as ``rep`` before the item runs (planted record text)."""

    tool: Literal["upsert_activity"]
    args: dict[str, Any]


class EvalItem(_Model):
    """One conversation of one rep: its turns and, optionally, what is planted before it."""

    id: str
    split: Split
    kind: ItemKind
    template: str
    """Which phrasing template produced it (held-out templates differ from dev ones)."""
    rep: str
    turns: list[Turn]
    setup: list[Setup] = Field(default_factory=list)

    @property
    def stateful(self) -> bool:
        """Whether it changes the CRM (run after the items that read it)."""
        return bool(self.setup)


# --- brief and digest items ---------------------------------------------------------------------

BriefKind = Literal["brief", "digest"]
BRIEF_KINDS: tuple[BriefKind, ...] = ("brief", "digest")
NoBriefReason = Literal["internal", "hidden", "no_contact"]
"""Why a meeting gets no brief: only colleagues attend; its external attendees are contacts of
accounts the rep may not see; or they are no CRM contact at all."""


class Moment(_Model):
    """A UTC time on the ``day_offset``-th day after the seeding day (``time`` is ``HH:MM``)."""

    day_offset: int
    time: str = Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")


class ExpectedBrief(_Model):
    """A brief the run must make: its meeting and every id it must cite."""

    meeting_id: str
    subject: str
    cited: list[str]


class NoBrief(_Model):
    """A meeting of the window (or the day) that must get no brief (and no digest line)."""

    meeting_id: str
    subject: str
    reason: NoBriefReason


class ExpectedLine(_Model):
    """A digest line the run must make: its section and the ids it cites (all of them)."""

    section: DigestSection
    cited: list[str]


class BriefExpect(_Model):
    """What one brief run (``briefs``) or one digest (``lines``) must hold and must not."""

    briefs: list[ExpectedBrief] = Field(default_factory=list)
    lines: list[ExpectedLine] = Field(default_factory=list)
    """Every line the digest must have; a line that is none of these is one made where none should be."""
    no_brief: list[NoBrief] = Field(default_factory=list)
    forbidden_ids: list[str] = Field(default_factory=list)
    """Ids the rep may not see (the hidden account's records, restricted documents): never cited."""


class BriefCase(_Model):
    """One run of the product's own ``briefs_at`` (``brief``) or ``digest_at`` (``digest``) as ``rep``
    at ``at``; no model is involved, so these items run once per eval, not once per model."""

    id: str
    split: Split
    kind: BriefKind
    rep: str
    at: Moment
    lead_minutes: int | None = None
    """A brief run's lead time (briefs for meetings starting in ``[at, at + lead)``); None for a digest."""
    expect: BriefExpect


class Bounds(_Model):
    """Per metric: the lowest acceptable value (``min``) or the highest (``max``)."""

    min: dict[str, float] = Field(default_factory=dict)
    max: dict[str, float] = Field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.min and not self.max


class Thresholds(Bounds):
    """The answer metrics' bounds, and the brief items' own (``briefs``)."""

    briefs: Bounds = Field(default_factory=Bounds)
    note: str = ""


class Dataset(BaseModel):
    """A dataset file's answer items (run once per model) and brief items (run once)."""

    items: list[EvalItem]
    briefs: list[BriefCase]


def dataset_path(name: str, profile: str = "reference") -> Path:
    """``name`` (e.g. ``heldout``) or a path to a ``.jsonl`` file. A name on another CRM profile
    than ``reference`` is that profile's own file (``heldout.dataverse.jsonl``: the same items,
    its record ids as that CRM names them), generated and checked like the reference ones."""
    path = Path(name)
    if path.suffix == ".jsonl":
        return path
    if profile != "reference":
        return DATASETS_DIR / f"{name}.{profile}.jsonl"
    return DATASETS_DIR / f"{name}.jsonl"


def thresholds_path(path: Path) -> Path:
    return path.with_name(path.stem + ".thresholds.json")


_LINE: TypeAdapter[EvalItem | BriefCase] = TypeAdapter(
    Annotated[EvalItem | BriefCase, Field(discriminator="kind")]
)


def load_dataset(path: Path) -> Dataset:
    """Every item of a JSONL dataset, answer and brief items apart; a bad line is a clear
    :class:`InvalidInput`."""
    if not path.is_file():
        raise InvalidInput(f"no dataset at {path} (run: python -m evals --generate)")
    items: list[EvalItem] = []
    briefs: list[BriefCase] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            parsed = _LINE.validate_json(line)
        except ValidationError as exc:
            raise InvalidInput(f"{path.name} line {number}: {exc.errors()[0]['msg']}") from exc
        if isinstance(parsed, BriefCase):
            briefs.append(parsed)
        else:
            items.append(parsed)
    if not items and not briefs:
        raise InvalidInput(f"the dataset {path} has no items")
    return Dataset(items=items, briefs=briefs)


def load_items(path: Path) -> list[EvalItem]:
    """The answer items of a JSONL dataset (:func:`load_dataset` for the brief items too)."""
    return load_dataset(path).items


def load_thresholds(path: Path) -> Thresholds:
    """The thresholds stored with the dataset at ``path`` (none when the file is missing)."""
    stored = thresholds_path(path)
    if not stored.is_file():
        return Thresholds()
    try:
        return Thresholds.model_validate_json(stored.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise InvalidInput(f"{stored.name}: {exc.errors()[0]['msg']}") from exc


def write_items(path: Path, items: Sequence[EvalItem | BriefCase]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(item.model_dump(mode="json", exclude_defaults=True), ensure_ascii=False) for item in items
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


_PLACEHOLDER = re.compile(r"\{date([+-]\d+)(?::([a-z]+))?\}")


def resolve_day(offset: int, seeded: dt.date) -> dt.date:
    return seeded + dt.timedelta(days=offset)


def resolve_moment(moment: Moment, seeded: dt.date) -> dt.datetime:
    """``moment`` as an aware UTC time, its day resolved as :func:`resolve_day` resolves one."""
    hour, minute = (int(part) for part in moment.time.split(":"))
    return dt.datetime.combine(resolve_day(moment.day_offset, seeded), dt.time(hour, minute), tzinfo=dt.UTC)


def _ordinal(day: int) -> str:
    suffix = "th" if day in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def render_text(text: str, seeded: dt.date) -> str:
    """``text`` with ``{date+N}`` (ISO), ``{date+N:long}`` (``March 3, 2027``), ``{date+N:ordinal}``
    (the day of the month, ``3rd``: unambiguous for N from 1 to 27) and ``{date+N:weekday}``
    (``Friday``: unambiguous for N from 1 to 6) resolved."""

    def replace(match: re.Match[str]) -> str:
        day = resolve_day(int(match.group(1)), seeded)
        if match.group(2) == "long":
            return f"{day:%B} {day.day}, {day.year}"
        if match.group(2) == "ordinal":
            return _ordinal(day.day)
        if match.group(2) == "weekday":
            return f"{day:%A}"
        return day.isoformat()

    return _PLACEHOLDER.sub(replace, text)


class GenerationConfig(BaseModel):
    """Who the generator signs in as (sandbox handles) and its RNG seed."""

    model_config = ConfigDict(extra="forbid")
    seed: int
    reps: list[str]
    """The reps whose questions the items ask."""
    outsiders: list[str]
    """Users whose records the reps may not see (another territory, another tenant)."""
    manager: str
    """The reps' manager: fields they see and the reps do not are out of scope for the reps."""
    per_kind: int = 3


def load_config(path: Path = GENERATION_FILE) -> GenerationConfig:
    return GenerationConfig.model_validate_json(path.read_text(encoding="utf-8"))
