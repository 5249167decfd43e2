"""Eval items for deal risk and "what changed", scored against truth computed from the sandbox.

The items (``evals/datasets/insight.jsonl``, both splits) name a rep and what to ask: ``risk`` (the
rep's open deals at risk) or ``changes`` (what changed in the rep's book in the last N days). The
truth is computed here from the sandbox's own export (its records, activities and change
history, and its permission rules), independently of the product's code: only the thresholds
(:class:`copilot.insight.risk.RiskSettings`) are shared. The product's answer is read as the rep,
on either CRM profile (Dataverse ids are mapped back to the sandbox's by ``guid_for``).

Scores per item: precision and recall of the at-risk set (deal, signal) and of the change list
(record, field / ``activity`` / ``created``); citation precision (every cited id is a record the
truth names for that item, or the record behind one: :func:`supporting`); leaks (cited ids the rep may not read). :func:`table` prints them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from copilot.insight.catchup import CatchUpItem
from copilot.insight.risk import RiskReport, RiskSettings

DATASET = Path(__file__).resolve().parent / "datasets" / "insight.jsonl"
OPEN = ("Prospecting", "Qualification", "Proposal", "Negotiation")
Kind = Literal["risk", "changes", "follow"]
Fact = tuple[str, str]
"""(sandbox record id, what: a signal kind, a field, ``activity`` or ``created``)."""


@dataclass(frozen=True)
class InsightItem:
    id: str
    split: Literal["dev", "heldout"]
    kind: Kind
    rep: str
    """The rep's handle."""
    days: int = 7
    """``changes``: the window, in days before the item's moment."""
    at_minutes: int | None = None
    """``follow``: the moment, in minutes after midnight (UTC) of the seeded day."""


def load_items(path: Path = DATASET) -> list[InsightItem]:
    """The items, in file order."""
    return [InsightItem(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _at(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# --- the sandbox's truth -------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    """The sandbox's export, indexed."""

    export: Mapping[str, list[dict[str, Any]]]

    def user(self, handle: str) -> dict[str, Any]:
        return next(u for u in self.export["users"] if u["handle"] == handle)

    def open_deals(self, user_id: str) -> list[dict[str, Any]]:
        return [o for o in self.export["opportunities"] if o["owner_id"] == user_id and o["stage"] in OPEN]

    def history(self, deal_id: str) -> list[dict[str, Any]]:
        rows = [h for h in self.export["record_history"] if h["record_id"] == deal_id]
        return sorted(rows, key=lambda h: (h["changed_at"], h["id"]))

    def readable(self, handle: str) -> set[str]:
        """Every account, opportunity, contact and activity id the rep may read (the sandbox's rules:
        owner, same territory, the owner's manager, or shared; records follow their account)."""
        user = self.user(handle)
        shared = {s["record_id"] for s in self.export["shares"] if s["user_id"] == user["id"]}
        reports = {u["id"] for u in self.export["users"] if u["manager_id"] == user["id"]}
        accounts = {
            a["id"]
            for a in self.export["accounts"]
            if a["tenant_id"] == user["tenant_id"]
            and (
                a["owner_id"] == user["id"]
                or a["territory"] == user["territory"]
                or a["owner_id"] in reports
                or a["id"] in shared
            )
        }
        deals = {
            o["id"]
            for o in self.export["opportunities"]
            if o["tenant_id"] == user["tenant_id"]
            and (o["account_id"] in accounts or o["owner_id"] == user["id"] or o["owner_id"] in reports)
        }
        contacts = {c["id"] for c in self.export["contacts"] if c["account_id"] in accounts}
        activities = {
            a["id"]
            for a in self.export["activities"]
            if a["tenant_id"] == user["tenant_id"]
            and (a["account_id"] in accounts or a["opportunity_id"] in deals)
        }
        return accounts | deals | contacts | activities


def _updates(history: Iterable[Mapping[str, Any]], name: str) -> list[tuple[str, Any, Any]]:
    return [
        (h["changed_at"], h["changes"][name][0], h["changes"][name][1])
        for h in history
        if h["operation"] == "update" and name in h["changes"]
    ]


def risk_truth(world: World, handle: str, now: datetime, today: date, settings: RiskSettings) -> set[Fact]:
    """(deal, signal) for every signal that holds on the rep's own open deals."""
    user = world.user(handle)
    facts: set[Fact] = set()
    for deal in world.open_deals(user["id"]):
        deal_id, close = deal["id"], date.fromisoformat(deal["close_date"])
        if close < today:
            facts.add((deal_id, "close_date_passed"))
        if today <= close <= today + timedelta(days=settings.closing_within_days):
            recent = [
                a
                for a in world.export["activities"]
                if a["opportunity_id"] == deal_id
                and a["voided_at"] is None
                and now - timedelta(days=settings.quiet_days) <= _at(a["occurred_at"]) <= now
            ]
            if not recent:
                facts.add((deal_id, "closing_quiet"))
        history = world.history(deal_id)
        pushes = [1 for _, old, new in _updates(history, "close_date") if new > old]
        if len(pushes) >= settings.close_date_pushes:
            facts.add((deal_id, "close_date_pushed"))
        into = [at for at, _, new in _updates(history, "stage") if new == deal["stage"]]
        created = [h["changed_at"] for h in history if h["operation"] == "create"]
        entered = into[-1] if into else (created[0] if created else None)
        usual = settings.stage_days.get(deal["stage"], settings.default_stage_days)
        if entered is not None and (now - _at(entered)).days > usual:
            facts.add((deal_id, "stage_stalled"))
        if any(new < old for _, old, new in _updates(history, "amount")):
            facts.add((deal_id, "amount_lowered"))
    return facts


def closed_in(world: World, user_id: str, since: datetime, until: datetime) -> list[dict[str, Any]]:
    """The user's deals won or lost in the window: the last change of their stage into the closed
    stage they have now is in it (without one in their history, their last modification)."""
    found = []
    for deal in world.export["opportunities"]:
        if deal["owner_id"] != user_id or deal["stage"] in OPEN:
            continue
        closes = [
            at for at, old, new in _updates(world.history(deal["id"]), "stage") if new == deal["stage"] != old
        ]
        if since <= _at(closes[-1] if closes else deal["modified_at"]) <= until:
            found.append(deal)
    return found


def change_truth(world: World, handle: str, since: datetime, until: datetime) -> set[Fact]:
    """(record, field / ``created`` / ``activity`` / ``contact``) for every change in the rep's book
    in the window: their open deals' history and that of their deals won or lost in the window (the
    close is a ``stage`` change), and the activities and new contacts of the open deals' accounts."""
    user = world.user(handle)
    deals = world.open_deals(user["id"])
    facts: set[Fact] = set()
    for deal in [*deals, *closed_in(world, user["id"], since, until)]:
        for h in world.history(deal["id"]):
            if not since <= _at(h["changed_at"]) <= until:
                continue
            if h["operation"] == "create":
                facts.add((deal["id"], "created"))
            else:
                facts |= {(deal["id"], name) for name in h["changes"] if name != "commission"}
    accounts = {d["account_id"] for d in deals}
    facts |= {
        (a["id"], "activity")
        for a in world.export["activities"]
        if a["account_id"] in accounts and a["voided_at"] is None and since <= _at(a["occurred_at"]) <= until
    }
    facts |= {
        (c["id"], "contact")
        for c in world.export["contacts"]
        if c["account_id"] in accounts and c["created_at"] and since <= _at(c["created_at"]) <= until
    }
    return facts


def supporting(world: World, handle: str, kind: Kind, expected: set[Fact]) -> set[str]:
    """The records an answer may cite for ``expected``: each fact's record, and the record behind
    it (the latest activity of a deal closing quietly; the open deal an activity regards)."""
    records = {record for record, _ in expected}
    live = [a for a in world.export["activities"] if a["voided_at"] is None]
    if kind == "follow":
        out = set()
        for meeting_id, deal_id in expected:
            event = next(e for e in world.export["events"] if e["id"] == meeting_id)
            emails = {str(a["address"]).lower() for a in event["attendees"]}
            out |= {deal_id} - {"none"}
            out |= {c["id"] for c in world.export["contacts"] if c["email"].lower() in emails}
            out |= {c["account_id"] for c in world.export["contacts"] if c["email"].lower() in emails}
        return out
    if kind == "risk":
        for deal_id, what in expected:
            if what == "closing_quiet":
                done = sorted(
                    (a for a in live if a["opportunity_id"] == deal_id), key=lambda a: a["occurred_at"]
                )
                records |= {done[-1]["id"]} if done else set()
        return records
    deals = {d["id"] for d in world.open_deals(world.user(handle)["id"])}
    regarding = {a["id"]: a["opportunity_id"] for a in live}
    account_of = {c["id"]: c["account_id"] for c in world.export["contacts"]}
    return (
        records
        | {
            regarding[record]
            for record, what in expected
            if what == "activity" and regarding.get(record) in deals
        }
        | {account_of[record] for record, what in expected if what == "contact" and record in account_of}
    )


_WORD = re.compile(r"[a-z0-9]+")
_NOISE = frozenset(
    {"the", "a", "an", "and", "of", "for", "with", "on", "to", "in", "review", "call", "meeting"}
)


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _NOISE and len(w) > 2}


def follow_truth(world: World, handle: str, at: datetime, window_minutes: int = 60) -> set[Fact]:
    """(meeting, deal or ``none``) of every meeting of the rep that ended in the window with an
    external attendee who is a contact of an account the rep may read: the meeting's first such
    contact's account, and its open deal (the only one, else the one sharing the most words with
    the subject, none on a tie)."""
    user = world.user(handle)
    domain = user["email"].rpartition("@")[2].lower()
    readable = world.readable(handle)
    contacts = {
        c["email"].lower(): c for c in world.export["contacts"] if c["account_id"] in readable and c["email"]
    }
    facts: set[Fact] = set()
    for event in world.export["events"]:
        attendees = [str(a["address"]).lower() for a in event["attendees"]]
        mine = event["organizer_id"] == user["id"] or user["email"].lower() in attendees
        ends = _at(event["end_at"])
        if (
            event["tenant_id"] != user["tenant_id"]
            or not mine
            or not at - timedelta(minutes=window_minutes) < ends <= at
        ):
            continue
        matched = [contacts[a] for a in attendees if a.rpartition("@")[2] != domain and a in contacts]
        if not matched:
            continue
        account = matched[0]["account_id"]
        deals = [
            o for o in world.export["opportunities"] if o["account_id"] == account and o["stage"] in OPEN
        ]
        deal: dict[str, Any] | None = deals[0] if len(deals) == 1 else None
        if len(deals) > 1:
            said = _words(event["subject"])
            scored = sorted(((len(said & _words(d["name"])), d["id"]) for d in deals), reverse=True)
            if scored[0][0] and scored[0][0] != scored[1][0]:
                deal = next(d for d in deals if d["id"] == scored[0][1])
        facts.add((event["id"], deal["id"] if deal else "none"))
    return facts


def follow_facts(
    found: Sequence[Any], to_sandbox: Callable[[str], str | None]
) -> tuple[set[Fact], list[str]]:
    """(meeting, deal or ``none``) of each follow-through, and every id its suggestions cite."""
    facts = {(f.meeting_id, (to_sandbox(f.deal_id) or f.deal_id) if f.deal_id else "none") for f in found}
    return facts, [i for f in found for s in f.suggestions for i in s.cited]


# --- the product's answer ------------------------------------------------------------------------


def risk_facts(report: RiskReport, to_sandbox: Callable[[str], str | None]) -> tuple[set[Fact], list[str]]:
    """The (deal, signal) pairs the report gives, and every id it cites."""
    facts: set[Fact] = {(to_sandbox(d.id) or d.id, str(s.kind)) for d in report.deals for s in d.signals}
    return facts, [i for d in report.deals for s in d.signals for i in s.cited]


def change_facts(
    items: Sequence[CatchUpItem], to_sandbox: Callable[[str], str | None]
) -> tuple[set[Fact], list[str]]:
    """The (record, what) pairs the catch-up gives, and every id it cites."""
    facts: set[Fact] = set()
    for item in items:
        record = to_sandbox(item.cited[0]) or item.cited[0]
        what = {"activity": "activity", "new_deal": "created", "new_contact": "contact"}.get(
            item.kind, item.field
        )
        facts.add((record, what))
    return facts, [i for item in items for i in item.cited]


# --- scoring -------------------------------------------------------------------------------------


@dataclass
class Score:
    """Totals over items of one split and kind."""

    items: int = 0
    true_positives: int = 0
    made: int = 0
    expected: int = 0
    cited: int = 0
    cited_ok: int = 0
    leaks: list[str] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)

    def add(
        self,
        item: InsightItem,
        made: set[Fact],
        expected: set[Fact],
        cited: Sequence[str],
        to_sandbox: Callable[[str], str | None],
        readable: set[str],
        relevant: set[str],
    ) -> None:
        self.items += 1
        self.true_positives += len(made & expected)
        self.made += len(made)
        self.expected += len(expected)
        for cite in cited:
            record = to_sandbox(cite) or cite
            self.cited += 1
            self.cited_ok += record in relevant
            if record not in readable:
                self.leaks.append(f"{item.id}: {cite}")
        self.misses += [f"{item.id}: extra {f}" for f in sorted(made - expected)]
        self.misses += [f"{item.id}: missed {f}" for f in sorted(expected - made)]

    @property
    def precision(self) -> float:
        return self.true_positives / self.made if self.made else 1.0

    @property
    def recall(self) -> float:
        return self.true_positives / self.expected if self.expected else 1.0

    @property
    def citation_precision(self) -> float:
        return self.cited_ok / self.cited if self.cited else 1.0


def table(rows: Mapping[tuple[str, str, str], Score]) -> str:
    """A Markdown table: profile, split, kind, items, facts, precision, recall, citation precision, leaks."""
    lines = [
        "| profile | split | kind | items | facts | precision | recall | citation precision | leaks |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (profile, split, kind), s in sorted(rows.items()):
        lines.append(
            f"| {profile} | {split} | {kind} | {s.items} | {s.expected} | {s.precision:.3f} | {s.recall:.3f} "
            f"| {s.citation_precision:.3f} | {len(s.leaks)} |"
        )
    return "\n".join(lines)
