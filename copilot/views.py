"""What a read tool computed, kept whole for a client that shows it as a card (pure).

The deals-at-risk, catch-up and rep's-desk tools answer the model with JSON text; beside it, as
the tool message's artifact, they keep a typed view: the report itself (:class:`RiskView`,
:class:`CatchUpView`, :class:`BriefView`, :class:`StatsView`), or which of the client's own cards shows what the
tool read (:class:`DeskView`: the waiting approvals, the delegations, the digest, which the
Teams bot composes from its own records). The artifact is checkpointed with
the message, never shown to the model. :func:`views_in` reads a turn's back, so the Teams bot
posts the card whichever words the rep used and whichever model chose the tool; a client that
shows no cards (the terminal chat) shows the answer's text, which says the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from langchain_core.messages import BaseMessage, ToolMessage
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from copilot.analytics.team import ApprovalStats
from copilot.briefs.types import Brief
from copilot.insight.catchup import CatchUp
from copilot.insight.risk import RiskReport


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RiskView(_View):
    """A deals-at-risk report, as the tool computed it."""

    view: Literal["risk"] = "risk"
    report: RiskReport


class CatchUpView(_View):
    """A catch-up, as the tool computed it."""

    view: Literal["catch_up"] = "catch_up"
    catch_up: CatchUp


class BriefView(_View):
    """The brief of the rep's next customer meeting, as the tool composed it."""

    view: Literal["brief"] = "brief"
    brief: Brief


class StatsView(_View):
    """The rep's (or their reports') approval stats, as the tool read them."""

    view: Literal["stats"] = "stats"
    stats: ApprovalStats


DeskCard = Literal["approvals", "delegations", "digest"]
"""The rep's-desk cards a client composes from its own records (who decides which card, the
snoozed digest items): the tool says which one its answer is."""


class DeskView(_View):
    """Which of the client's desk cards shows what the tool read."""

    view: Literal["desk"] = "desk"
    card: DeskCard


View = RiskView | CatchUpView | BriefView | StatsView | DeskView
_VIEW: TypeAdapter[View] = TypeAdapter(Annotated[View, Field(discriminator="view")])


def view_artifact(view: View) -> dict[str, Any]:
    """The view as a tool message's artifact (JSON-safe, so any checkpointer keeps it)."""
    return view.model_dump(mode="json")


def view_of(artifact: Any) -> View | None:
    """The view a tool message's artifact holds, else None (a write's outcome, say)."""
    if not isinstance(artifact, dict) or "view" not in artifact:
        return None
    try:
        return _VIEW.validate_python(artifact)
    except ValidationError:
        return None  # kept by an older build: the answer's text still says it


def views_in(messages: Sequence[BaseMessage]) -> list[View]:
    """The views of ``messages``' tool results (the caller passes one run's), in order."""
    return [
        view
        for message in messages
        if isinstance(message, ToolMessage) and (view := view_of(message.artifact)) is not None
    ]


def view_ids(view: View) -> set[str] | None:
    """Every record id a view's card cites; None for a desk card (composed by the client, it
    cites what the client reads, so the answer's text is not checked against it)."""
    if isinstance(view, RiskView):
        return {i for deal in view.report.deals for s in deal.signals for i in (*s.cited, deal.id)}
    if isinstance(view, CatchUpView):
        return set(view.catch_up.cited)
    if isinstance(view, BriefView):
        return set(view.brief.citations) | {section.account_id for section in view.brief.accounts}
    if isinstance(view, StatsView):
        return set()
    return None
