"""What a turn of the copilot gives back (pure types): the answer, its sources, the proposals
waiting for the rep's decision, and why a result is not (only) an answer.

A leaf below the runner, so that everything that shows a turn (the CLI, the bot's cards, the
digest's buttons) reads these types without importing the runner that produces them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from copilot.citations import CitedRecord
from copilot.writes.types import ProposalRecord, WriteOutcome

if TYPE_CHECKING:
    from copilot.views import View


def args_digest(args: dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of a proposal's arguments: what the rep was shown.

    Sorted keys, no whitespace, UTF-8: the same arguments always give the same digest.
    A decision that carries it (every card button, the terminal chat, ``--decisions``
    entries with ``digest``) is bound to exactly those arguments: a proposal that changed,
    or another one under the same id, is refused instead of executed.
    """
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def waiting_line(n: int) -> str:
    """The one line under an answer given while proposals wait (their cards stay as they are)."""
    if n == 1:
        return "1 proposal still waits for your decision on its card."
    return f"{n} proposals still wait for your decision on their cards."


def also_waiting_line(n: int) -> str:
    """The line under a new proposal made while others wait: each is decided on its own card."""
    earlier = "1 earlier proposal still waits" if n == 1 else f"{n} earlier proposals still wait"
    return f"{earlier} for your decision on its own card; decide each on its own."


Notice = Literal[
    "limit_reached",
    "proposals_pending",
    "crm_unavailable",
    "mailbox_unavailable",
    "auth",
    "no_crm_access",
    "ungrounded",
]
"""Why a result is not (only) an answer; ``None`` when it is one."""


@dataclass(frozen=True)
class Proposal:
    """A write waiting for the rep's decision."""

    tool_call_id: str
    tool: str
    args: dict[str, Any]
    record: ProposalRecord | None
    description: str
    interrupt_id: str
    thread_id: str = ""
    """The thread whose run waits on it, so its decision resumes that thread ("" if unknown: the
    result's). A proposal made while others wait has a thread of its own."""


@dataclass
class TurnResult:
    """What one turn (or resume) produced."""

    thread_id: str
    answer: str | None = None
    citations: list[str] = field(default_factory=list)
    unverified_citations: list[str] = field(default_factory=list)
    proposals: list[Proposal] = field(default_factory=list)
    notice: Notice | None = None
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    """Results of the writes decided in this call, as JSON (``--json``'s ``outcomes``)."""
    writes: dict[str, WriteOutcome] = field(default_factory=dict)
    """The same results, typed, by tool call id (rejections have none)."""
    decided: dict[str, Proposal] = field(default_factory=dict)
    """The proposals decided in this call, as they were when decided, by tool call id."""
    sources: dict[str, CitedRecord] = field(default_factory=dict)
    """The cited records as this run's tool results describe them (name, kind, facts), by id:
    what Teams shows when a rep hovers over a citation."""
    views: list[View] = field(default_factory=list)
    """What this turn's reads computed, for a client that shows them as cards (a risk report,
    a catch-up, a brief, or which desk card); the answer's text says the same for one that
    does not (:mod:`copilot.views`)."""
    run_id: str | None = None
    """The LangSmith root run of this turn or decision (``Tracing.record_feedback`` takes it);
    ``None`` when tracing is off."""

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` shape documented in the README."""
        return {
            "thread_id": self.thread_id,
            "answer": self.answer,
            "citations": self.citations,
            "unverified_citations": self.unverified_citations,
            "proposals": [
                {
                    "tool_call_id": p.tool_call_id,
                    "tool": p.tool,
                    "args": p.args,
                    "record": p.record,
                    "description": p.description,
                    "digest": args_digest(p.args),
                    "thread_id": p.thread_id or self.thread_id,
                }
                for p in self.proposals
            ],
            "outcomes": self.outcomes,
            "notice": self.notice,
        }


def dumps(result: TurnResult) -> str:
    """``result`` as the CLI's JSON."""
    return json.dumps(result.to_json(), indent=2, default=str)
