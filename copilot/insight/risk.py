"""Deals at risk: computed from the rep's own CRM reads, never guessed, every signal cited.

A deal is at risk when at least one of these signals holds (thresholds: :class:`RiskSettings`):

* ``close_date_passed``: its close date has passed while it is still open;
* ``closing_quiet``: it closes within ``closing_within_days`` and nothing was logged regarding
  it in the last ``quiet_days``;
* ``close_date_pushed``: its close date was moved later ``close_date_pushes`` times or more;
* ``stage_stalled``: it has been in its stage longer than the stage's usual time;
* ``amount_lowered``: its amount was lowered.

The last three read the CRM's change history (:meth:`copilot.crm.reads.CrmReads.history`); where
the CRM keeps none (or refuses it), they are skipped and the report says so. The sixth,
``notes_concern`` (the latest activity notes mention a slip, a competitor, or a budget or
champion loss), needs a language model reading the notes (:mod:`copilot.insight.notes`): only
with a real model given; otherwise it is not computed and the report says so
(:data:`NOTES_SKIPPED`).

Composition is pure (:func:`assess`, :func:`report_text`); :func:`deal_risks` reads, as the rep,
through :class:`~copilot.evidence.Evidence`, so the text passes the answers' citation
check like a brief.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from copilot.cited_text import amount_text, plain, with_citations
from copilot.crm.reads import Record
from copilot.errors import CrmCallError
from copilot.evidence import Evidence
from copilot.insight.notes import CONCERN_WORDS, read_concerns

SignalKind = Literal[
    "close_date_passed",
    "closing_quiet",
    "close_date_pushed",
    "stage_stalled",
    "amount_lowered",
    "notes_concern",
]
SIGNAL_KINDS: tuple[SignalKind, ...] = (
    "close_date_passed",
    "closing_quiet",
    "close_date_pushed",
    "stage_stalled",
    "amount_lowered",
    "notes_concern",
)
HISTORY_SIGNALS: frozenset[SignalKind] = frozenset({"close_date_pushed", "stage_stalled", "amount_lowered"})
NOTES_SKIPPED = (
    "Activity notes were not read for slips, competitors or budget or champion loss: that needs a "
    "language model, and this list is computed without one."
)
MAX_DEALS = 200
NOTES_PER_DEAL = 3
"""How many of a deal's newest activities' notes the model reads."""


class RiskSettings(BaseSettings):
    """The thresholds (``COPILOT_RISK_*``; ``COPILOT_RISK_STAGE_DAYS`` is a JSON object)."""

    model_config = SettingsConfigDict(env_prefix="COPILOT_RISK_", extra="ignore", frozen=True)

    closing_within_days: int = Field(default=30, ge=1, le=365)
    """N: a deal closing within this many days…"""
    quiet_days: int = Field(default=14, ge=1, le=365)
    """M: …with no activity regarding it in this many days."""
    close_date_pushes: int = Field(default=2, ge=1, le=20)
    """How many times a close date moved later makes a deal risky."""
    stage_days: dict[str, int] = Field(
        default_factory=lambda: {"Prospecting": 90, "Qualification": 60, "Proposal": 45, "Negotiation": 30}
    )
    """A stage's usual time, in days (by the stage's label as the CRM gives it)."""
    default_stage_days: int = Field(default=45, ge=1, le=3650)
    """The usual time of a stage not named in :attr:`stage_days`."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Signal(_Frozen):
    """One reason a deal is at risk, with the ids of the records behind it."""

    kind: SignalKind
    reason: str
    """The reason in words."""
    text: str
    """The reason with its ``[id]`` citations at the end."""
    cited: tuple[str, ...] = Field(min_length=1)


class DealRisk(_Frozen):
    """An at-risk deal and its signals."""

    id: str
    name: str
    stage: str = ""
    close_date: str = ""
    amount: str = ""
    signals: tuple[Signal, ...] = Field(min_length=1)


class RiskReport(_Frozen):
    """Which of the deals looked at are at risk, as of ``today``."""

    today: date
    checked: int
    """How many open deals were looked at."""
    deals: tuple[DealRisk, ...]
    skipped: tuple[str, ...] = ()
    """Signals not computed, and why (no change history, no model for the notes)."""

    @property
    def cited(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(i for d in self.deals for s in d.signals for i in s.cited))


# --- pure ---------------------------------------------------------------------------------------


def _instant(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _day(value: Any) -> date | None:
    if not isinstance(value, str) or len(value) < 10:
        return None
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        return None


def _who(version: Mapping[str, Any]) -> str:
    by = version.get("by")
    name = plain(by.get("name")) if isinstance(by, Mapping) else ""
    return f" by {name}" if name else ""


def _when(version: Mapping[str, Any]) -> str:
    moment = _instant(version.get("at"))
    return f" on {moment:%Y-%m-%d}" if moment else ""


def _changes(history: Sequence[Mapping[str, Any]], field: str) -> list[tuple[Mapping[str, Any], Any, Any]]:
    """Each update of ``field``: (the version, old value, new value), oldest first."""
    found = []
    for version in history:
        if version.get("operation") == "create":
            continue
        for change in version.get("changes") or []:
            if isinstance(change, Mapping) and change.get("field") == field:
                found.append((version, change.get("old"), change.get("new")))
    return found


def _money(value: Any, deal: Mapping[str, Any]) -> str:
    return amount_text({**deal, "amount": value}) or plain(value)


def stage_since(history: Sequence[Mapping[str, Any]], stage: str) -> datetime | None:
    """When the deal entered ``stage``: its last move into it, else its creation (if kept)."""
    moves = [v for v, _old, new in _changes(history, "stage") if new == stage]
    if moves:
        return _instant(moves[-1].get("at"))
    for version in history:
        if version.get("operation") == "create":
            return _instant(version.get("at"))
    return None


def assess(
    deal: Mapping[str, Any],
    activities: Sequence[Mapping[str, Any]],
    history: Sequence[Mapping[str, Any]] | None,
    settings: RiskSettings,
    now: datetime,
    today: date,
) -> tuple[Signal, ...]:
    """The signals that hold for one open deal (``history`` None: the CRM keeps none for it)."""
    deal_id = str(deal["id"])
    signals: list[Signal] = []

    def signal(kind: SignalKind, text: str, *ids: str) -> None:
        cited, cites = with_citations(text, deal_id, *ids)
        signals.append(Signal(kind=kind, reason=text, text=cited, cited=cites))

    closes = _day(deal.get("close_date"))
    if closes is not None and closes < today:
        late = (today - closes).days
        signal("close_date_passed", f"close date {closes} passed {late} day{'s' if late != 1 else ''} ago")
    if closes is not None and today <= closes <= today + timedelta(days=settings.closing_within_days):
        recent = [
            a
            for a in activities
            if (m := _instant(a.get("occurred_at"))) is not None
            and now - timedelta(days=settings.quiet_days) <= m <= now
        ]
        if not recent:
            last = next((a for a in activities if _instant(a.get("occurred_at")) is not None), None)
            before = ""
            if last is not None:
                moment = _instant(last.get("occurred_at"))
                assert moment is not None
                before = f" (last: {plain(last.get('subject')) or 'an activity'} on {moment:%Y-%m-%d})"
            signal(
                "closing_quiet",
                f"closes {closes} (within {settings.closing_within_days} days) with no activity in "
                f"{settings.quiet_days} days{before}",
                *([str(last["id"])] if last is not None and last.get("id") else []),
            )
    if history is None:
        return tuple(signals)
    pushes = [
        (v, old, new)
        for v, old, new in _changes(history, "close_date")
        if (o := _day(old)) is not None and (n := _day(new)) is not None and n > o
    ]
    if len(pushes) >= settings.close_date_pushes:
        moves = "; ".join(
            f"{plain(old)[:10]} → {plain(new)[:10]}{_when(v)}{_who(v)}" for v, old, new in pushes
        )
        signal("close_date_pushed", f"close date moved later {len(pushes)} times ({moves})")
    stage = plain(deal.get("stage"))
    entered = stage_since(history, stage) if stage else None
    if entered is not None:
        usual = settings.stage_days.get(stage, settings.default_stage_days)
        days = (now - entered).days
        if days > usual:
            signal(
                "stage_stalled", f"in {stage} for {days} days since {entered:%Y-%m-%d} (usual: {usual} days)"
            )
    lowered = [
        (v, old, new)
        for v, old, new in _changes(history, "amount")
        if isinstance(old, int | float) and isinstance(new, int | float) and new < old
    ]
    if lowered:
        version, old, new = lowered[-1]
        signal(
            "amount_lowered",
            f"amount lowered from {_money(old, deal)} to {_money(new, deal)}{_when(version)}{_who(version)}",
        )
    return tuple(signals)


def deal_risk(deal: Mapping[str, Any], signals: Sequence[Signal]) -> DealRisk:
    """An at-risk deal as the report lists it."""
    return DealRisk(
        id=str(deal["id"]),
        name=plain(deal.get("name")),
        stage=plain(deal.get("stage")),
        close_date=plain(deal.get("close_date"))[:10],
        amount=amount_text(deal),
        signals=tuple(signals),
    )


def report_text(report: RiskReport) -> str:
    """The report as text: each at-risk deal and its cited signals, then what was skipped."""
    if not report.deals:
        lines = [f"None of the {report.checked} open deals I looked at shows a risk signal."]
    else:
        lines = [f"{len(report.deals)} of {report.checked} open deals are at risk:"]
        for deal in report.deals:
            facts = ", ".join(p for p in (deal.stage, deal.amount, f"closes {deal.close_date}") if p)
            lines.append(f"- {deal.name} ({facts}) [{deal.id}]")
            lines.extend(f"  - {s.text}" for s in deal.signals)
    lines.extend(f"({note})" for note in report.skipped)
    return "\n".join(lines)


# --- reading (as the rep) -----------------------------------------------------------------------


async def history_of(evidence: Evidence, deal_id: str) -> list[Record] | None:
    """The deal's kept versions, or None when the CRM keeps none or refuses it to the rep."""
    try:
        return await evidence.history("opportunity", deal_id)
    except CrmCallError:
        return None


async def deal_risks(
    evidence: Evidence,
    settings: RiskSettings,
    now: datetime,
    *,
    today: date | None = None,
    account_id: str | None = None,
    opportunity_id: str | None = None,
    notes_model: BaseChatModel | None = None,
) -> RiskReport:
    """The rep's open deals at risk: their own book, one account's open deals, or one deal.

    ``notes_model``: a real language model to read each deal's newest activity notes for a slip, a
    competitor, or a budget or champion loss (:mod:`copilot.insight.notes`); None skips that
    signal, and the report says so."""
    day = today or now.astimezone(UTC).date()
    if opportunity_id is not None:
        one = await evidence.record_of("opportunity", opportunity_id)
        deals = [one] if not str(one.get("stage") or "").lower().startswith("closed") else []
    elif account_id is not None:
        deals = await evidence.open_opportunities(account_id=account_id)
    else:
        deals = await evidence.open_opportunities(mine=True)
    deals = deals[:MAX_DEALS]
    signals: dict[str, list[Signal]] = {}
    newest: dict[str, list[Record]] = {}
    without_history = 0
    for deal in deals:
        deal_id = str(deal["id"])
        activities = await evidence.activities(opportunity_id=deal_id, limit=20)
        newest[deal_id] = activities[:NOTES_PER_DEAL]
        history = await history_of(evidence, deal_id)
        without_history += history is None
        signals[deal_id] = list(assess(deal, activities, history, settings, now, day))
    skipped = []
    if without_history:
        skipped.append(
            f"The CRM gave no change history for {without_history} of {len(deals)} deals: close-date "
            "moves, time in stage and lowered amounts were not checked for them."
        )
    if notes_model is None:
        skipped.append(NOTES_SKIPPED)
    else:
        try:
            concerns = await read_concerns(notes_model, newest)
        except Exception:  # noqa: BLE001 - a model outage leaves the computed signals standing
            concerns = {}
            skipped.append("The activity notes could not be read by the language model this time.")
        for deal_id, found_here in concerns.items():
            for concern in found_here:
                text = f"latest notes say {CONCERN_WORDS[concern.kind]}: “{plain(concern.quote)}”"
                cited, cites = with_citations(text, deal_id, concern.activity_id)
                signals[deal_id].append(Signal(kind="notes_concern", reason=text, text=cited, cited=cites))
    found = [deal_risk(d, signals[str(d["id"])]) for d in deals if signals[str(d["id"])]]
    order = {k: i for i, k in enumerate(SIGNAL_KINDS)}
    found.sort(key=lambda d: (min(order[s.kind] for s in d.signals), d.close_date, d.id))
    return RiskReport(today=day, checked=len(deals), deals=tuple(found), skipped=tuple(skipped))
