"""The bench's scenarios: what the scripted rep asks and which sandbox records the scripted
model reads and writes.

These ids are **bench data**, not product knowledge: they name records of the sandbox's
seed (the local stand-in for the CRM) so that the bench's scripted model can make the same
tool calls on both sides. No product code path reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

BENCH_REP = "alex"
"""The sandbox user the bench signs in (a West-territory rep)."""


@dataclass(frozen=True)
class ReadScenario:
    """Two parallel CRM reads, then an answer citing the records they returned."""

    name: str
    question: str
    account_id: str
    opportunity_id: str

    @property
    def answer(self) -> str:
        return (
            f"Acme Corporation [{self.account_id}] has an open renewal, "
            f"Renewal 2027 [{self.opportunity_id}], in the pipeline."
        )


@dataclass(frozen=True)
class WriteScenario:
    """The model proposes logging one call; the rep approves it."""

    name: str
    question: str
    account_id: str
    subject: str
    notes: str
    answer: str = "Done: the call is logged."


TURN = ReadScenario(
    name="turn",
    question="bench: summarise Acme",
    account_id="acc-acme",
    opportunity_id="opp-acme-renewal",
)

APPROVE_CLICK = WriteScenario(
    name="approve_click",
    question="bench: log a call with Acme about the renewal",
    account_id="acc-acme",
    subject="Bench: renewal call",
    notes="Discussed the renewal (bench run).",
)


BOT_QUESTION = "summarise Acme"
"""What each rep asks the bot dev server (its offline model answers with CRM reads and
citations) and what the HTTP-trigger ack posts carry."""
