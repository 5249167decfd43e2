"""What an insight read computed, kept whole for a client that shows it (pure).

The deals-at-risk and catch-up tools answer the model with JSON text; beside it, as the tool
message's artifact, they keep the typed result (:class:`RiskView`, :class:`CatchUpView`). The
artifact is checkpointed with the message, never shown to the model. :func:`views_in` reads
this turn's back, so the Teams bot can post the compact card of a risk report or a catch-up
whichever words the rep used and whichever model chose the tool, instead of the answer's text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from langchain_core.messages import BaseMessage, ToolMessage
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from copilot.insight.catchup import CatchUp
from copilot.insight.risk import RiskReport


class RiskView(BaseModel):
    """A deals-at-risk report, as the tool computed it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    view: Literal["risk"] = "risk"
    report: RiskReport


class CatchUpView(BaseModel):
    """A catch-up, as the tool computed it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    view: Literal["catch_up"] = "catch_up"
    catch_up: CatchUp


InsightView = Annotated[RiskView | CatchUpView, Field(discriminator="view")]
_VIEW: TypeAdapter[RiskView | CatchUpView] = TypeAdapter(InsightView)


def view_artifact(view: RiskView | CatchUpView) -> dict[str, Any]:
    """The view as a tool message's artifact (JSON-safe, so any checkpointer keeps it)."""
    return view.model_dump(mode="json")


def view_of(artifact: Any) -> RiskView | CatchUpView | None:
    """The view a tool message's artifact holds, else None (a write's outcome, say)."""
    if not isinstance(artifact, dict) or "view" not in artifact:
        return None
    try:
        return _VIEW.validate_python(artifact)
    except ValidationError:
        return None  # kept by an older build: the answer's text still says it


def views_in(messages: Sequence[BaseMessage]) -> list[RiskView | CatchUpView]:
    """The views of ``messages``' tool results (the caller passes one run's), in order."""
    return [
        view
        for message in messages
        if isinstance(message, ToolMessage) and (view := view_of(message.artifact)) is not None
    ]


def view_ids(view: RiskView | CatchUpView) -> set[str]:
    """Every record id a view cites."""
    if isinstance(view, RiskView):
        return {i for deal in view.report.deals for s in deal.signals for i in (*s.cited, deal.id)}
    return set(view.catch_up.cited)
