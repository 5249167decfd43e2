"""A rep's data outside the database: what ``data delete`` reaches there, and what it cannot.

The database holds most of what the copilot keeps about a rep (:mod:`copilot.persistence.rep_data`).
Two more places hold some, and only the layers above the copilot know them:

* the Bot Framework token service keeps the rep's sign-in at the bot's OAuth connection (the
  bot signs them out there with botbuilder's ``UserTokenClient.sign_out_user``: ``bot/``);
* the turn queue and its poison queue (Azure Storage) may hold the rep's own messages, waiting
  or failed (``functions/``).

Each is an :class:`OutsideEraser`, handed to ``data delete`` by the top layer (the CLI reaches
``functions.rep_data`` lazily, as it reaches the doctor's checks), so this layer imports
neither. Others the copilot cannot reach at all: :data:`NOT_REACHED` says where an admin acts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from psycopg import AsyncConnection

Status = Literal["done", "would", "not_configured", "failed"]
"""``done``: reached and cleared; ``would``: a dry run's plan; ``not_configured``: this
environment names no such place (e.g. local development has no token service), nothing was
tried; ``failed``: it could not be cleared (the detail says why and what to do)."""


@dataclass(frozen=True)
class OutsideStep:
    """What one eraser did (or would do) for the rep."""

    place: str
    status: Status
    detail: str
    count: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"place": self.place, "status": self.status, "count": self.count, "detail": self.detail}


class OutsideEraser(Protocol):
    """Clears the rep's data in one place outside the database.

    Runs *before* the database rows go: ``conn`` (the command's owner connection) still holds
    what the eraser may need to find the rep there (e.g. the Teams user id in a stored
    conversation reference). Never raises for the place being unreachable: it says so.
    """

    async def __call__(
        self, conn: AsyncConnection[Any], *, rep: str, tenant: str | None, dry_run: bool
    ) -> OutsideStep: ...


@dataclass(frozen=True)
class NotReached:
    """A place that may hold the rep's data which the copilot cannot clear, and where to act."""

    place: str
    holds: str
    act: str

    def to_json(self) -> dict[str, str]:
        return {"place": self.place, "holds": self.holds, "act": self.act}


NOT_REACHED: tuple[NotReached, ...] = (
    NotReached(
        "Application Insights (the Function App's logs, in its Log Analytics workspace)",
        "request and trace logs of the rep's turns (the ids the app logs: conversation, thread, "
        "rep; tokens are never logged)",
        "they expire with the workspace's retention (30 days: infra/modules/monitoring.bicep "
        "`retentionInDays`); to remove them sooner, an owner of the workspace runs the Log "
        "Analytics purge API (`POST .../workspaces/log-<baseName>/purge`, filtering on the rep's "
        "AAD object id); Azure portal → the workspace → Logs shows first what it would match",
    ),
    NotReached(
        "LangSmith (only when LANGSMITH_TRACING is on)",
        "traces of the rep's runs (questions and answers with emails and phone numbers masked), "
        "tagged with the rep's pseudonym, never their AAD object id",
        "traces expire with the LangSmith project's trace retention (base 14 days, extended 400 "
        "days); to remove them sooner, an admin of the LangSmith workspace deletes the runs whose "
        "metadata carries the rep's pseudonym (shown here when COPILOT_TRACE_PSEUDONYM_KEY and "
        "--tenant are given) in the LangSmith UI or with its API",
    ),
)
"""Where the rep's data may also be, that ``data delete`` lists but cannot clear."""
