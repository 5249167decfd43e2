"""Text cited to the rep's reads (pure): how a line carries its ``[id]`` citations, and the check.

Briefs, the digest, deal risk, the catch-up and the meeting follow-through all write lines
from the rep's own reads (:class:`copilot.evidence.Evidence`) and check them with the answers'
citation check; this is the one definition they share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.messages import BaseMessage
from pydantic import BaseModel, ConfigDict

from copilot.citations import cited_ids, ids_in_tool_results


class CitationCheck(BaseModel):
    """The citation check answers pass: every cited id appeared in a read of this run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cited: tuple[str, ...]
    unverified: tuple[str, ...]


def plain(value: Any) -> str:
    """Free text of a record as one line, without square brackets."""
    # Square brackets are the citation form: free text (a subject "[External] …") keeps
    # none, so only a line's own citations are ever read as one.
    return " ".join(str(value or "").split()).replace("[", "(").replace("]", ")")


def with_citations(text: str, *ids: str) -> tuple[str, tuple[str, ...]]:
    """``text`` followed by its ``[id]`` citations (each once, empty ids left out), and those ids."""
    cites = tuple(dict.fromkeys(i for i in ids if i))
    return " ".join([text, *(f"[{i}]" for i in cites)]), cites


def amount_text(record: Mapping[str, Any]) -> str:
    """A record's ``amount`` with its currency ("" if it has none)."""
    value = record.get("amount")
    if not isinstance(value, int | float) or isinstance(value, bool):
        return ""
    number = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
    currency = record.get("currency")
    return f"{currency} {number}" if isinstance(currency, str) and currency else number


def check_citations(text: str, reads: Iterable[BaseMessage]) -> CitationCheck:
    """The answers' citation check: which cited ids appeared in a read of this run."""
    seen = ids_in_tool_results(reads)
    cited = cited_ids(text)
    return CitationCheck(
        cited=tuple(i for i in cited if i in seen), unverified=tuple(i for i in cited if i not in seen)
    )
