"""The copilot's own typed CRM reads: what briefs, the digest and team analytics read, by meaning.

The agent's read tools are the CRM's own MCP tools, discovered at run time; but briefs, the
digest and the stats card read the CRM in code, without a model, and must not know a CRM's tool
names or columns. They ask :class:`CrmReads` instead, and each connector answers it its own
way (:class:`copilot.crm.reference.ReferenceReads`: the reference CRM's MCP tools;
:class:`copilot.crm.dataverse_reads.DataverseReads`: the Dataverse Web API), always as the
signed-in rep, so the CRM decides what the rep may see.

Every answer is a plain dict (or a list of them) in the copilot's field names, the reference
CRM's, which is what :mod:`copilot.briefs.compose` and the cards consume:

* a CRM user (:meth:`CrmReads.me`): ``id``, ``name``, ``role``, ``aad_object_id``, ``manager``
  (a user or None) and ``direct_reports`` (users);
* an account: ``id``, ``name`` and, where the CRM has them, ``industry``, ``city``, ``version``;
* a contact: ``id``, ``name``, ``title``, ``email``, ``account_id`` (the address is for matching
  meeting attendees in code only, never for a model or a brief) and ``created_at`` (ISO 8601,
  when the contact was added; None or absent when the CRM does not say);
* an opportunity: ``id``, ``name``, ``stage`` (the stage's label; a deal won or lost reads as
  :data:`~copilot.vocabulary.WON_STAGE` / :data:`~copilot.vocabulary.LOST_STAGE` on every CRM),
  ``amount``, ``currency``, ``close_date``, ``next_step``, ``probability``, ``owner``
  (``{"id": …}``), ``version``; a closed one (:meth:`CrmReads.closed_opportunities`) also
  ``closed_at`` (ISO 8601 when it closed, a date where the CRM keeps only the day; None when the
  CRM does not say);
* an activity: ``id``, ``type`` (the copilot's activity type), ``subject``, ``notes`` (for the
  risk signal a model reads, :mod:`copilot.insight.notes`; never put in a brief), ``occurred_at``
  (ISO 8601), ``contacts`` (the contacts taking part that the rep can read, each ``{"id",
  "name"}``), newest first;
* a version of a record (:meth:`CrmReads.history`): ``record_id``, ``at`` (ISO 8601), ``by``
  (``{"id", "name"}``), ``operation`` (``create`` / ``update``) and ``changes`` (each
  ``{"field", "old", "new"}`` in the copilot's field names), oldest first.

Ids are the CRM's own (the reference CRM's record ids, GUIDs on Dataverse): a brief cites
them as read. Refusals raise :class:`~copilot.errors.CrmCallError` (``not_found``,
``permission_denied``), outages :class:`~copilot.errors.CrmUnavailable`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from copilot.crm.types import TargetKind

Record = dict[str, Any]


class CrmReads(Protocol):
    """One rep's reads of the CRM for the copilot's own code (never shared across reps)."""

    async def me(self) -> Record:
        """The signed-in rep's own CRM user, with their manager and direct reports."""
        ...

    async def accounts(self) -> list[Record]:
        """Every account the CRM lets the rep see."""
        ...

    async def contacts(self, account_id: str) -> list[Record]:
        """The contacts of one account the rep can see (with their addresses: for matching only)."""
        ...

    async def account(self, account_id: str) -> Record:
        """One account."""
        ...

    async def open_opportunities(self, *, account_id: str | None = None, mine: bool = False) -> list[Record]:
        """Open opportunities the rep can see, soonest close first: of one account, and/or only
        the rep's own (``mine``)."""
        ...

    async def closed_opportunities(
        self, *, since: datetime, account_id: str | None = None, mine: bool = False
    ) -> list[Record]:
        """Opportunities won or lost that the rep can see, of one account and/or only the rep's own
        (``mine``), closed at or after ``since``: at least those (a CRM that keeps only the day a
        deal closed, or filters by its last change, may also return one closed earlier that day or
        changed since), each with ``closed_at``."""
        ...

    async def activities(
        self,
        *,
        account_id: str | None = None,
        opportunity_id: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
    ) -> list[Record]:
        """The newest ``limit`` activities (not voided) regarding an account (and its deals) or
        one opportunity, that happened at or after ``since``; newest first."""
        ...

    async def record(self, kind: TargetKind, record_id: str) -> Record:
        """One account, opportunity or contact by id."""
        ...

    async def history(self, kind: TargetKind, record_id: str) -> list[Record]:
        """The record's kept versions (who changed which field from what to what, and when),
        oldest first. Raises :class:`~copilot.errors.CrmCallError` when the CRM keeps none for
        it (``not_supported``: no change history, or auditing off) or refuses the read."""
        ...
