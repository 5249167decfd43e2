"""What a decision round leaves behind besides the writes: the rejections the run took, and the
suggestions the decided proposals settle (the suggestion ledger, ``copilot/briefs/ledger.py``)."""

from __future__ import annotations

from collections.abc import Mapping

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from copilot.briefs import ledger
from copilot.briefs.types import SuggestionDecision
from copilot.decisions import Approve, Edit, Reject
from copilot.identity import RepIdentity
from copilot.persistence import rejections
from copilot.tracing import current_trace
from copilot.turns import Proposal
from copilot.writes import WriteOutcome

Pool = AsyncConnectionPool[AsyncConnection[DictRow]]


async def record_decisions(
    pool: Pool,
    identity: RepIdentity,
    thread_id: str,
    pending: dict[str, Proposal],
    decisions: list[Approve | Edit | Reject],
    still_pending: list[Proposal],
    writes: Mapping[str, WriteOutcome],
) -> None:
    """Both records of a decision round, for each decision the run actually took (an aborted
    step keeps its proposal pending, and it may still be approved later): its rejection, and
    the suggestions it settled. ``identity`` is whose thread (and suggestions) it is."""
    waiting = {p.tool_call_id for p in still_pending}
    for decision in decisions:
        if decision.tool_call_id in waiting:
            continue
        proposal = pending[decision.tool_call_id]
        if isinstance(decision, Reject):
            await _record_rejection(pool, identity, thread_id, proposal, decision.reason)
        await _settle_suggestions(pool, identity, proposal, decision, writes)


async def _record_rejection(
    pool: Pool, identity: RepIdentity, thread_id: str, proposal: Proposal, reason: str
) -> None:
    async with pool.connection() as conn:
        await rejections.record(
            conn,
            tenant_id=identity.tenant_id,
            rep_aad_id=identity.aad_object_id,
            thread_id=thread_id,
            tool_call_id=proposal.tool_call_id,
            tool=proposal.tool,
            args=proposal.args,
            reason=reason,
        )
    if (trace := current_trace()) is not None:
        trace.record_rejection(proposal.tool, proposal.tool_call_id, reason)


async def _settle_suggestions(
    pool: Pool,
    identity: RepIdentity,
    proposal: Proposal,
    decision: Approve | Edit | Reject,
    writes: Mapping[str, WriteOutcome],
) -> None:
    """A decided proposal settles the rep's open suggestions it acts on (the suggestion
    ledger, ``copilot/briefs/ledger.py``): a rejection declines them, an approved or edited
    write that was done accepts them."""
    if not ledger.kinds_changed_by(proposal.tool, proposal.args):
        return
    if isinstance(decision, Reject):
        verdict: SuggestionDecision = "declined"
    elif (outcome := writes.get(proposal.tool_call_id)) is not None and outcome.status == "done":
        verdict = "accepted"
    else:
        return  # not written (a conflict, a failure): the suggestion stays open
    async with pool.connection() as conn:
        await ledger.settle_proposal(conn, identity, tool=proposal.tool, args=proposal.args, decision=verdict)
