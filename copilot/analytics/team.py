"""Approval analytics for one person in Teams ("copilot stats"): a manager's reports, or a rep's own.

Whose decisions count comes from the CRM's own manager hierarchy, read as the asker (their
CRM read token, the connector's typed reads, :meth:`copilot.crm.reads.CrmReads.me`: the caller,
their role and their direct reports, each with the Entra object id the CRM links the user to;
the reference CRM's ``get_me``, Dataverse's ``WhoAmI`` and ``systemuser.parentsystemuserid`` /
``azureactivedirectoryobjectid``), never from a local list: someone who stops managing a team in the CRM stops seeing its figures at once.
Someone with direct reports gets their reports' figures; anyone else their own.

The figures are counts, rates and field names only (no record values, no edit deltas).
Rejection reasons are the reps' own free text and may quote a record, so a manager gets
only the grouped reasons' counts; a rep sees their own reasons.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any, Literal

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, ConfigDict, ValidationError

from copilot.analytics.queries import Filters, fetch
from copilot.analytics.report import AnalyticsReport, summarise
from copilot.auth.tokens import TokenBroker
from copilot.crm import connector
from copilot.errors import UNAVAILABLE_MESSAGE, AuthError, CrmUnavailable
from copilot.identity import RepIdentity
from copilot.settings import Settings
from copilot.tools.crm_client import CrmCallError

StatsScope = Literal["team", "own"]
"""``team``: a manager's direct reports (not the manager); ``own``: the asker alone."""

NO_HIERARCHY = (
    "I couldn't read who reports to you from the CRM, so I can't show approval stats right now. "
    "Nothing was read from the approval history."
)


class CrmPerson(BaseModel):
    """A CRM user as the hierarchy names them."""

    model_config = ConfigDict(extra="ignore")

    id: str
    name: str
    role: str = ""
    aad_object_id: str | None = None
    """The Entra object id the CRM links this user to (None: not linked)."""


class CrmMe(CrmPerson):
    """The caller in the CRM, with their direct reports."""

    direct_reports: list[CrmPerson] = []


class ApprovalStats(BaseModel):
    """What the stats card shows: whose figures, and the figures."""

    scope: StatsScope
    covers: list[str]
    """The names whose decisions are counted (the reports, or the asker)."""
    not_linked: list[str]
    """Reports the CRM links to no Entra user: nothing of theirs can be counted."""
    report: AnalyticsReport
    reason_counts: list[int]
    """The grouped rejection reasons' counts, most frequent first (their text is in
    ``report.top_rejection_reasons`` only for ``own``)."""


class StatsUnavailable(BaseModel):
    """Why there are no stats to show (sign-in, CRM outage, no hierarchy)."""

    message: str


def scope_of(me: CrmMe, identity: RepIdentity) -> tuple[StatsScope, frozenset[str], list[str], list[str]]:
    """Whose decisions count for ``me`` (pure): scope, Entra object ids, names, unlinked names."""
    if me.direct_reports:
        linked = [p for p in me.direct_reports if p.aad_object_id]
        return (
            "team",
            frozenset(str(p.aad_object_id) for p in linked),
            [p.name for p in linked],
            [p.name for p in me.direct_reports if not p.aad_object_id],
        )
    # The asker's own rows are keyed on the object id they signed in with.
    return "own", frozenset({identity.aad_object_id}), [me.name or identity.name], []


async def read_me(settings: Settings, tokens: TokenBroker) -> CrmMe:
    """The asker and their direct reports, from the CRM, as the asker."""
    async with AsyncExitStack() as stack:
        payload: dict[str, Any] = await connector.reads(stack, settings, tokens).me()
    return CrmMe.model_validate(payload)


async def approval_stats(
    settings: Settings,
    pool: AsyncConnectionPool[AsyncConnection[DictRow]],
    identity: RepIdentity,
    tokens: TokenBroker,
    *,
    top: int = 5,
) -> ApprovalStats | StatsUnavailable:
    """The asker's approval stats (their reports' if they manage anyone), or why not."""
    try:
        me = await read_me(settings, tokens)
    except AuthError as exc:
        return StatsUnavailable(message=exc.message)
    except CrmUnavailable:
        return StatsUnavailable(message=UNAVAILABLE_MESSAGE)
    except (CrmCallError, ValidationError):
        return StatsUnavailable(message=NO_HIERARCHY)
    scope, reps, covers, not_linked = scope_of(me, identity)
    async with pool.connection() as conn:
        rows = await fetch(conn, Filters(tenant=identity.tenant_id, reps=reps, top=top))
    report = summarise(rows, since=None, tenant=identity.tenant_id)
    reason_counts = [r.count for r in report.top_rejection_reasons]
    if scope == "team":
        # The reasons' text is each rep's own words, possibly quoting a record: counts only.
        report = report.model_copy(update={"top_rejection_reasons": []})
    # Edit deltas are derived from record values: left out of every card.
    report = report.model_copy(update={"edit_deltas": []})
    return ApprovalStats(
        scope=scope, covers=covers, not_linked=not_linked, report=report, reason_counts=reason_counts
    )
