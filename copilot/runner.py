"""The runner: ``run_turn`` and ``resume`` for one rep on one thread, with progress events.

Order of a turn: authorise the thread (before any state is restored) → get the rep's
read token → open one MCP session → build the agent → stream it with durable
checkpoints → read back either the answer or the pending proposals. Everything a
person must see comes back in :class:`TurnResult`; nothing here prints.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, Literal, cast

from langchain.agents.middleware.human_in_the_loop import (
    Action,
    ApproveDecision,
    EditDecision,
    RejectDecision,
    ToolApprovalRequest,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.errors import GraphRecursionError
from langgraph.store.postgres.aio import AsyncPostgresStore
from langgraph.types import Command, StateSnapshot
from psycopg import AsyncConnection
from psycopg.errors import DeadlockDetected, LockNotAvailable, SerializationFailure
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from copilot.agent import build_agent
from copilot.auth.tokens import TokenBroker
from copilot.briefs import ledger
from copilot.briefs.types import SuggestionDecision
from copilot.citations import cited_records, current_run, message_text
from copilot.clock import Clock, system_clock
from copilot.context import AgentContext, run_context
from copilot.crm.connector import load_vocabulary
from copilot.decisions import Approve, Edit, Reject, edited_args, parse_decisions
from copilot.errors import (
    UNAVAILABLE_MESSAGE,
    AuthError,
    CrmUnavailable,
    InvalidDecision,
    InvalidInput,
    MailboxUnavailable,
    ProposalNotPending,
    ThreadBusy,
)
from copilot.identity import RepIdentity
from copilot.middleware.limits import LIMIT_MESSAGE
from copilot.middleware.resilience import CircuitBreaker, breaker_for
from copilot.middleware.write_guard import WriteGuardMiddleware
from copilot.models.factory import build_model
from copilot.persistence import idempotency, rejections, threads
from copilot.persistence.checkpoint import make_saver_and_store
from copilot.persistence.embedded import resolve_database_url
from copilot.persistence.migrations import assert_schema_current
from copilot.persistence.pool import open_pool
from copilot.progress import ProgressEvent, describe_tool_call, names_in
from copilot.proposals import ProposalRecord
from copilot.rotation import handoff, rotation_due
from copilot.settings import Settings
from copilot.tools.crm_client import parse_result_text, read_tool_definitions, read_tools
from copilot.tools.session_pool import CrmSessionPool
from copilot.tracing import Tracing, current_trace, model_labels, open_tracing
from copilot.turns import Notice, Proposal, TurnResult, also_waiting_line, args_digest, waiting_line
from copilot.vocabulary import crm_identity, vocabulary_loaded
from copilot.writes import REGISTRY, WriteOutcome, backends
from copilot.writes.crm import apply_vocabulary

ProgressCallback = Callable[[ProgressEvent], Awaitable[None]]

logger = logging.getLogger(__name__)

MODEL_NODE = "model"
"""The node of LangChain's agent graph that calls the model (middleware hooks are nodes of their own)."""
TOOLS_NODE = "tools"
"""The node of LangChain's agent graph that runs the model's tool calls (approved writes too)."""

DELEGATE_MAY_NOT_EDIT = (
    "You decide these proposals for a colleague: you can approve or reject one as it was "
    "proposed, not edit it. Nothing was changed."
)
DELEGATE_CRM_ONLY = (
    "Only the rep who asked can approve {tool}: it acts on their own mailbox or settings. "
    "Nothing was changed."
)

_ONE_RUN_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 20261203))"
THREAD_BUSY_SECONDS = 60.0
"""How long a run waits for the thread's previous run before it is told the thread is busy."""

MAILBOX_UNAVAILABLE_MESSAGE = (
    "Your mailbox (Outlook) is unavailable right now, so the draft was not saved yet. "
    "Your pending approvals are kept: approve again in a moment."
)

UNAVAILABLE_KEPT = UNAVAILABLE_MESSAGE + " Your pending approvals are kept."


def _answer_notice(answer: AIMessage) -> Notice | None:
    """Why a final answer is not a plain answer: the limit's stop, or the grounding gate's refusal."""
    if answer.response_metadata.get("limit_reached"):
        return "limit_reached"
    if (answer.response_metadata.get("grounding") or {}).get("outcome") == "refused":
        return "ungrounded"
    return None


def recursion_limit(agent: Any, model_call_run_limit: int) -> int:
    """Graph steps for one run, derived from the model-call limit (invariant 10).

    One model round visits each node of the agent graph at most once (every middleware
    hook is a node: context, PII, summary, limit, model, snapshot, approval, tools...),
    so ``limit + 1`` rounds (the last one is the limit's own answer) plus a round of
    slack always let the model-call limit end the run with its message first.
    """
    nodes = max(len(getattr(agent, "nodes", {}) or {}), 1)
    return (model_call_run_limit + 2) * nodes


Decider = Callable[[Mapping[str, Proposal]], Any]
"""Builds the decisions from the proposals actually pending (the bot: from a card's inputs)."""

HitlDecision = ApproveDecision | EditDecision | RejectDecision


class CopilotService:
    """Long-lived: the pool, checkpointer, store, models, breaker and agent of one process.

    The agent graph is compiled once, on the first run that needs it (its CRM read tools
    come from the CRM's tool definitions, listed once); everything that belongs to one
    rep's run (identity, tokens, sessions) reaches it through the run's context.
    """

    def __init__(
        self,
        settings: Settings,
        pool: AsyncConnectionPool[AsyncConnection[DictRow]],
        saver: AsyncPostgresSaver,
        store: AsyncPostgresStore,
        model: BaseChatModel,
        fallbacks: list[BaseChatModel],
        *,
        write_guard_factory: Callable[[], WriteGuardMiddleware] = WriteGuardMiddleware,
        lock_pool: AsyncConnectionPool[AsyncConnection[DictRow]] | None = None,
        tracing: Tracing | None = None,
        crm_sessions: CrmSessionPool | None = None,
    ):
        self.settings = settings
        self.pool = pool
        self.lock_pool = lock_pool or pool
        self.saver = saver
        self.store = store
        self.model = model
        self.fallbacks = fallbacks
        self.breaker: CircuitBreaker = breaker_for(
            settings.crm_mcp_url,
            failure_threshold=settings.breaker_failure_threshold,
            reset_seconds=settings.breaker_reset_seconds,
        )
        self._write_guard_factory = write_guard_factory
        self.tracing = tracing or Tracing.off()
        self.crm_sessions = crm_sessions
        """The process's kept CRM sessions, one per rep token (None: a session per run)."""
        self._agent: Any = None
        self._reader: Any = None
        self._compile_lock = asyncio.Lock()
        self.clock: Clock = system_clock
        """What time it is for the service: thread activity, rotation, the date the model is
        told, undo windows, delegations (a test sets a simulated clock)."""

    # --- public API ------------------------------------------------------------------------

    async def run_turn(
        self,
        identity: RepIdentity,
        tokens: TokenBroker,
        thread_id: str | None,
        text: str,
        on_progress: ProgressCallback | None = None,
        *,
        message_id: str | None = None,
        rotate: bool = False,
    ) -> TurnResult:
        """Answer ``text`` on the rep's thread (a new one when ``thread_id`` is None).

        ``message_id`` names the message (e.g. from its Teams activity id): a repeat of a
        message already taken (a queue redelivery after a crash) is not asked again; the
        turn it started is finished if it was cut short, and its result returned.

        ``rotate`` (a Teams conversation, which lasts months): ``thread_id`` names the
        conversation's chain of threads, and the question may run on a successor thread
        (``copilot/rotation.py``): ``result.thread_id`` says which.
        """
        if not text.strip():
            raise InvalidInput("the question is empty")
        rotated = False
        if rotate:
            thread_id, rotated = await self._rotated(identity, thread_id)
        else:
            thread_id = await self._own_thread(identity, thread_id)
        async with self._one_run(thread_id), self._run(identity, tokens, thread_id, read_now=True) as run:
            if isinstance(run, TurnResult):
                return run
            agent, ctx, config = run
            try:
                state = await agent.aget_state(config)
                # A run cut short (a crash between its steps) left tool calls without their
                # results: finish it first, so the history stays one a model accepts.
                if state.next and not state.interrupts:
                    if not await self._stream(agent, None, config, ctx, on_progress):
                        return TurnResult(thread_id, answer=LIMIT_MESSAGE, notice="limit_reached")
                    state = await agent.aget_state(config)
                messages = (state.values or {}).get("messages", [])
                if message_id is not None and (
                    any(isinstance(m, HumanMessage) and m.id == message_id for m in messages)
                    or await self._answered(thread_id, message_id)
                ):
                    return self._result(state, thread_id)
                pending = self._proposals(state)
                if pending:
                    return await self._side_answer(
                        agent, ctx, thread_id, text, pending, on_progress, message_id
                    )
                question = HumanMessage(text, id=message_id) if message_id is not None else HumanMessage(text)
                carried = await self._handoff(thread_id) if rotate and not messages else []
                finished = await self._stream(
                    agent, {"messages": [*carried, question]}, config, ctx, on_progress
                )
                if message_id is not None:
                    async with self.pool.connection() as conn:
                        await threads.mark_answered(conn, thread_id, message_id)
                if rotated:
                    await self._compact_rotated(thread_id)
                if not finished:
                    return TurnResult(thread_id, answer=LIMIT_MESSAGE, notice="limit_reached")
                return self._result(await agent.aget_state(config), thread_id)
            except AuthError as exc:
                # The CRM refused the rep's token mid-turn (access revoked while a session was open).
                return TurnResult(
                    thread_id, answer=exc.message, notice="no_crm_access" if exc.no_access else "auth"
                )

    async def _side_answer(
        self,
        agent: Any,
        ctx: AgentContext,
        thread_id: str,
        text: str,
        pending: list[Proposal],
        on_progress: ProgressCallback | None,
        message_id: str | None,
    ) -> TurnResult:
        """Answer a question asked while the thread waits on proposals, beside the thread.

        The thread's checkpoint holds the interrupt its cards resume: a new input there
        would abandon it (a resume could no longer find it). So the question runs on a new
        thread of the rep's own (a checkpoint of its own, with the same agent and the rep's
        own context, under the thread's run lock): the interrupted checkpoint is never
        touched. A question that proposes a change keeps that thread, so its proposal waits
        there and its card resumes it, while the earlier ones resume theirs: no proposal
        blocks another, and each is decided on its own, once (there is no approve-all). A
        question that proposes nothing leaves no thread behind.
        """
        side = await self._side_thread(ctx.identity, thread_id)
        config = self._config(side, agent)
        kept = False
        try:
            finished = await self._stream(
                agent,
                {"messages": [HumanMessage(text)]},
                config,
                dataclasses.replace(ctx, thread_id=side),
                on_progress,
            )
            state = await agent.aget_state(config) if finished else None
            kept = state is not None and bool(self._proposals(state))
        finally:
            if not kept:
                await self.saver.adelete_thread(side)
                async with self.pool.connection() as conn:
                    await threads.delete_thread(conn, side)
        if message_id is not None:
            async with self.pool.connection() as conn:
                await threads.mark_answered(conn, thread_id, message_id)
        n = len(pending)
        if state is None:
            return TurnResult(thread_id, answer=LIMIT_MESSAGE, proposals=pending, notice="limit_reached")
        if kept:
            return TurnResult(
                thread_id,
                answer=also_waiting_line(n),
                proposals=[*pending, *self._proposals(state)],
                notice="proposals_pending",
            )
        answered = self._result(state, thread_id)
        answer = f"{answered.answer}\n\n{waiting_line(n)}" if answered.answer else waiting_line(n)
        return TurnResult(
            thread_id,
            answer=answer,
            citations=answered.citations,
            unverified_citations=answered.unverified_citations,
            proposals=pending,
            notice="proposals_pending",
        )

    async def _side_thread(self, identity: RepIdentity, thread_id: str) -> str:
        """A new thread of the rep's for a question asked while ``thread_id`` waits (a thread
        row first, so retention finds its checkpoints even if the run is cut short)."""
        del thread_id  # a thread of its own: it shares nothing with the waiting one
        async with self.pool.connection() as conn:
            return await threads.create_thread(
                conn,
                tenant_id=identity.tenant_id,
                owner_aad_id=identity.aad_object_id,
                now=self.clock(),
            )

    async def decide(
        self,
        identity: RepIdentity,
        tokens: TokenBroker,
        thread_id: str,
        decisions: Any | Decider,
        on_progress: ProgressCallback | None = None,
    ) -> TurnResult:
        """Apply the rep's decisions to pending proposals and continue the run: one round trip.

        ``decisions`` is JSON-ready data (a list of approve / edit / reject objects), or a
        :data:`Decider` that builds it from the proposals actually pending (so a caller
        that must compare against them, like the bot's card submit, needs no second call).
        The thread is authorised once and its state read twice (the pending proposals, then
        the result); a token is exchanged and a session opened only for a backend the run
        uses (a rejection uses none). A decision for a proposal that is not pending raises
        :class:`ProposalNotPending`; ``result.decided`` holds the proposals decided.
        """
        if not callable(decisions):
            decisions = parse_decisions(decisions)
        owner = await self._may_decide(identity, thread_id)
        async with (
            self._one_run(thread_id),
            self._run(identity, tokens, thread_id, read_now=False, acting_for=owner) as run,
        ):
            if isinstance(run, TurnResult):
                return run
            agent, ctx, config = run
            pending = {p.tool_call_id: p for p in self._proposals(await agent.aget_state(config))}
            chosen = parse_decisions(decisions(pending)) if callable(decisions) else decisions
            if owner is not None:
                _delegate_may_decide(chosen, pending)
            answers: dict[str, HitlDecision] = {}
            for decision in chosen:
                proposal = pending.get(decision.tool_call_id)
                if proposal is None:
                    raise ProposalNotPending(decision.tool_call_id)
                if decision.digest is not None and decision.digest != args_digest(proposal.args):
                    raise InvalidDecision(
                        f"proposal {decision.tool_call_id} is not the one you were shown "
                        "(its arguments differ); nothing was changed"
                    )
                answers[proposal.interrupt_id] = self._answer(proposal, decision)
            kept = list(pending.values())
            executing = {pending[d.tool_call_id].tool for d in chosen if not isinstance(d, Reject)}
            # Only writes whose backend is the CRM need its write-scoped session: opened
            # before resuming, so an outage keeps every approval pending, untouched.
            if "crm" in backends(executing):
                try:
                    await ctx.crm_write.session()
                except CrmUnavailable:
                    self.breaker.record_failure()
                    return TurnResult(
                        thread_id, answer=UNAVAILABLE_KEPT, proposals=kept, notice="crm_unavailable"
                    )
                except AuthError as exc:
                    return TurnResult(thread_id, answer=exc.message, proposals=kept, notice="auth")
            whose = identity if owner is None else owner
            try:
                finished = await self._stream(
                    agent,
                    Command(resume=answers),
                    config,
                    ctx,
                    on_progress,
                    # A delegate's round ends once the decided calls ran: the model's follow-up
                    # (and any read it makes) waits for the owner's next turn, with the
                    # owner's own token, so nothing the delegate may read lands in the owner's
                    # thread and nothing of the owner's thread is answered to the delegate.
                    stop_after_tools=owner is not None,
                )
            except (CrmUnavailable, MailboxUnavailable, AuthError) as exc:
                # Already counted by the breaker where a CRM call failed. Decisions whose
                # tool calls completed (e.g. a rejection beside the failed write) still count.
                kept = self._proposals(await agent.aget_state(config))
                await self._record_rejections(whose, thread_id, pending, chosen, kept)
                await self._settle_suggestions(whose, pending, chosen, kept, {})
                answer, notice = self._aborted(exc)
                return TurnResult(thread_id, answer=answer, proposals=kept, notice=notice)
            state = await agent.aget_state(config)
            result = (
                self._result(state, thread_id)
                if owner is None
                else TurnResult(thread_id, proposals=self._proposals(state))
            )
            if not finished:
                result.answer, result.notice = LIMIT_MESSAGE, "limit_reached"
            result.decided = {d.tool_call_id: pending[d.tool_call_id] for d in chosen}
            result.outcomes, result.writes = self._outcomes(state, set(result.decided))
            await self._record_rejections(whose, thread_id, pending, chosen, result.proposals)
            await self._settle_suggestions(whose, pending, chosen, result.proposals, result.writes)
            return result

    @staticmethod
    def _aborted(exc: CrmUnavailable | MailboxUnavailable | AuthError) -> tuple[str, Notice]:
        if isinstance(exc, MailboxUnavailable):
            return MAILBOX_UNAVAILABLE_MESSAGE, "mailbox_unavailable"
        if isinstance(exc, AuthError):
            return exc.message, "auth"
        return UNAVAILABLE_KEPT, "crm_unavailable"

    @asynccontextmanager
    async def _one_run(self, thread_id: str) -> AsyncIterator[None]:
        """One run (question or decision round) on a thread at a time, across processes.

        Two runs restoring the same checkpoint would fork it: an approve and a reject of
        one proposal could both take effect, and a question could get another's answer.
        A transaction-scoped advisory lock, on a connection of the lock pool (so waiting
        runs never starve the pool that the running one needs), makes the next run wait;
        it is released with the block, or with the process if that dies. A run that waits
        longer than ``THREAD_BUSY_SECONDS`` is told the thread is busy.
        """
        async with self.lock_pool.connection() as conn, conn.transaction():
            await conn.execute(f"SET LOCAL lock_timeout = '{int(THREAD_BUSY_SECONDS * 1000)}ms'")
            try:
                await conn.execute(_ONE_RUN_LOCK_SQL, (thread_id,))
            except LockNotAvailable as exc:
                raise ThreadBusy(
                    "I'm still working on your previous message in this conversation; "
                    "please try again in a moment."
                ) from exc
            yield

    async def _record_rejections(
        self,
        identity: RepIdentity,
        thread_id: str,
        pending: dict[str, Proposal],
        decisions: list[Approve | Edit | Reject],
        still_pending: list[Proposal],
    ) -> None:
        """Record the rejections the run actually took (an aborted step keeps its proposal
        pending, and it may still be approved later)."""
        waiting = {p.tool_call_id for p in still_pending}
        for decision in decisions:
            if isinstance(decision, Reject) and decision.tool_call_id not in waiting:
                proposal = pending[decision.tool_call_id]
                async with self.pool.connection() as conn:
                    await rejections.record(
                        conn,
                        tenant_id=identity.tenant_id,
                        rep_aad_id=identity.aad_object_id,
                        thread_id=thread_id,
                        tool_call_id=proposal.tool_call_id,
                        tool=proposal.tool,
                        args=proposal.args,
                        reason=decision.reason,
                    )
                if (trace := current_trace()) is not None:
                    trace.record_rejection(proposal.tool, proposal.tool_call_id, decision.reason)

    async def _settle_suggestions(
        self,
        identity: RepIdentity,
        pending: dict[str, Proposal],
        decisions: list[Approve | Edit | Reject],
        still_pending: list[Proposal],
        writes: Mapping[str, WriteOutcome],
    ) -> None:
        """Decided proposals settle the rep's open suggestions they act on (the suggestion
        ledger, ``copilot/briefs/ledger.py``): a rejection declines them, an approved or edited
        write that was done accepts them. ``identity`` is whose thread (and suggestions) it is."""
        waiting = {p.tool_call_id for p in still_pending}
        for decision in decisions:
            proposal = pending[decision.tool_call_id]
            if proposal.tool_call_id in waiting or not ledger.kinds_changed_by(proposal.tool, proposal.args):
                continue
            if isinstance(decision, Reject):
                verdict: SuggestionDecision = "declined"
            elif (outcome := writes.get(proposal.tool_call_id)) is not None and outcome.status == "done":
                verdict = "accepted"
            else:
                continue  # not written (a conflict, a failure): the suggestion stays open
            async with self.pool.connection() as conn:
                await ledger.settle_proposal(
                    conn, identity, tool=proposal.tool, args=proposal.args, decision=verdict
                )

    async def pending(self, identity: RepIdentity, thread_id: str) -> TurnResult:
        """The proposals waiting on a thread (no model call, no token, no CRM session), for
        its owner or someone who may decide them (an approval delegate)."""
        await self._may_decide(identity, thread_id)
        state = await self._state_graph().aget_state(self._config(thread_id))
        return TurnResult(thread_id, proposals=self._proposals(state))

    async def waiting(self, identity: RepIdentity, thread_id: str) -> list[Proposal]:
        """The proposals waiting on one of the rep's threads, read without touching it.

        Like :meth:`pending` (the same authorisation), but a read that is no activity: the
        daily digest looks at every thread of the rep each morning, and must not keep idle
        threads from expiring.
        """
        async with self.pool.connection() as conn:
            await threads.authorize(
                conn,
                thread_id=thread_id,
                tenant_id=identity.tenant_id,
                now=self.clock(),
                aad_id=identity.aad_object_id,
                purpose="decide",
            )
        state = await self._state_graph().aget_state(self._config(thread_id))
        return self._proposals(state)

    async def _answered(self, thread_id: str, message_id: str) -> bool:
        async with self.pool.connection() as conn:
            return await threads.was_answered(conn, thread_id, message_id)

    def _state_graph(self) -> Any:
        """A compiled graph to read a thread's state with: the agent once compiled, else (a
        process whose first call only reads state) one without CRM tools, built once."""
        if self._agent is not None:
            return self._agent
        if self._reader is None:
            self._reader = build_agent(
                settings=self.settings,
                model=self.model,
                fallbacks=self.fallbacks,
                crm_read_tools=[],
                checkpointer=self.saver,
                store=self.store,
                breaker=self.breaker,
            )
        return self._reader

    async def decided(
        self, identity: RepIdentity, thread_id: str, tool_call_id: str
    ) -> tuple[Proposal, WriteOutcome] | None:
        """A write of this thread that was carried out, with the proposal it came from.

        For a decision whose outcome the rep never saw (the process died after the write
        and its checkpoint, before the card was updated): a repeated click shows it.
        """
        await self._may_decide(identity, thread_id)
        async with self.pool.connection() as conn:
            stored = await idempotency.stored_result(
                conn, idempotency.idempotency_key(thread_id, tool_call_id)
            )
        if stored is None:
            return None
        state = await self._state_graph().aget_state(self._config(thread_id))
        values = state.values or {}
        record: ProposalRecord | None = (values.get("proposals") or {}).get(tool_call_id)
        call = next(
            (
                c
                for m in values.get("messages", [])
                if isinstance(m, AIMessage)
                for c in m.tool_calls
                if c["id"] == tool_call_id
            ),
            None,
        )
        if call is None:
            return None
        proposal = Proposal(
            tool_call_id=tool_call_id,
            tool=call["name"],
            args=dict(call["args"]),
            record=record,
            description="",
            interrupt_id="",
        )
        return proposal, WriteOutcome.from_stored(stored)

    # --- rotation (copilot/rotation.py) ---------------------------------------------------------

    async def _rotated(self, identity: RepIdentity, thread_id: str | None) -> tuple[str, bool]:
        """The thread this conversation's question runs on, authorised and touched; True if
        it was opened just now as the successor of the conversation's previous thread.

        Only the thread's owner rotates it (a delegate's question runs where it was let in).
        """
        now = self.clock()
        async with self.pool.connection() as conn:
            if thread_id is None:
                return await self._new_thread(conn, identity, now), False
            current = await self._newest_authorized(conn, identity, thread_id)
        async with self._one_run(current):
            async with self.pool.connection() as conn:
                # Again under the lock: a question just before this one may have rotated it.
                current = await self._newest_authorized(conn, identity, current)
                last_active = await threads.touch(conn, current, now)
            saved = await self.saver.aget_tuple(cast(RunnableConfig, self._config(current)))
            values = saved.checkpoint["channel_values"] if saved is not None else {}
            due = rotation_due(
                model_calls=int(values.get("thread_model_call_count", 0)),
                last_active=last_active,
                now=now,
                thread_limit=self.settings.model_call_thread_limit,
                run_limit=self.settings.model_call_run_limit,
                idle=timedelta(hours=self.settings.thread_idle_rotate_hours),
            )
            if due is None or not values.get("messages"):
                return current, False
            async with self.pool.connection() as conn:
                successor = await threads.rotate(
                    conn, current, identity.tenant_id, identity.aad_object_id, now=now
                )
            if successor is None:
                return current, False
            logger.info("thread %s rotated to %s (%s)", current, successor, due)
            return successor, True

    async def _newest_authorized(
        self, conn: AsyncConnection[Any], identity: RepIdentity, thread_id: str
    ) -> str:
        """The newest thread of ``thread_id``'s chain, each checked (invariant 7) before use."""
        await threads.authorize(
            conn,
            thread_id=thread_id,
            tenant_id=identity.tenant_id,
            aad_id=identity.aad_object_id,
            now=self.clock(),
        )
        current = await threads.current_of(conn, thread_id)
        if current != thread_id:
            await threads.authorize(
                conn,
                thread_id=current,
                tenant_id=identity.tenant_id,
                aad_id=identity.aad_object_id,
                now=self.clock(),
            )
        return current

    async def _new_thread(self, conn: AsyncConnection[Any], identity: RepIdentity, now: datetime) -> str:
        return await threads.create_thread(
            conn, tenant_id=identity.tenant_id, owner_aad_id=identity.aad_object_id, now=now
        )

    async def _handoff(self, thread_id: str) -> list[Any]:
        """What a thread opened by rotation starts with: its predecessor's last read-only
        exchange, verbatim (also after a crash before its first run was saved)."""
        async with self.pool.connection() as conn:
            previous = await threads.predecessor(conn, thread_id)
        if previous is None:
            return []
        values = (await self._state_graph().aget_state(self._config(previous))).values or {}
        return handoff(values.get("messages", []), set(REGISTRY))

    async def _compact_rotated(self, thread_id: str) -> None:
        """After a rotation: the conversation's earlier threads keep only what is still needed.

        A thread with proposals pending keeps its latest checkpoint (the interrupt its cards
        resume; ``aprune(keep_latest)``), under its run lock so no decision races it; one with
        nothing pending has its checkpoints deleted (``adelete_thread``): its row stays for
        its cards, answers and audit links. So a conversation holds the current thread's
        checkpoints plus one per thread still waiting on a decision, however long it lasts.
        """
        async with self.pool.connection() as conn:
            earlier = await threads.rotated_with_checkpoints(conn, thread_id)
        for old in earlier:
            try:
                async with self._one_run(old):
                    state = await self._state_graph().aget_state(self._config(old))
                    if self._proposals(state):
                        await self.saver.aprune([old], strategy="keep_latest")
                        continue
                    await self.saver.adelete_thread(old)
                    async with self.pool.connection() as conn:
                        await threads.mark_checkpoints_cleared(conn, old)
            except (ThreadBusy, SerializationFailure, DeadlockDetected) as exc:
                # A decision running there, or retention's prune at the same moment: the
                # answer is already made, and the next rotation compacts this thread.
                logger.info("thread %s left for the next compaction: %s", old, type(exc).__name__)

    # --- steps -----------------------------------------------------------------------------

    async def _own_thread(self, identity: RepIdentity, thread_id: str | None) -> str:
        async with self.pool.connection() as conn:
            if thread_id is None:
                return await self._new_thread(conn, identity, self.clock())
            # Invariant 7: ownership is checked before the checkpointer restores anything.
            await threads.authorize(
                conn,
                thread_id=thread_id,
                tenant_id=identity.tenant_id,
                aad_id=identity.aad_object_id,
                now=self.clock(),
            )
            await threads.touch(conn, thread_id, self.clock())
            return thread_id

    async def _may_decide(self, identity: RepIdentity, thread_id: str) -> RepIdentity | None:
        """Authorise deciding the thread's proposals (before any state is restored): the
        owner when the caller decides them through an approval delegation, else None."""
        async with self.pool.connection() as conn:
            owner = await threads.authorize(
                conn,
                thread_id=thread_id,
                tenant_id=identity.tenant_id,
                now=self.clock(),
                aad_id=identity.aad_object_id,
                purpose="decide",
            )
            await threads.touch(conn, thread_id, self.clock())
        return None if owner is None else RepIdentity(tenant_id=identity.tenant_id, aad_object_id=owner)

    def _config(self, thread_id: str, agent: Any = None) -> dict[str, Any]:
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        if agent is not None:
            config["recursion_limit"] = recursion_limit(agent, self.settings.model_call_run_limit)
        return config

    async def _compiled(self, ctx: AgentContext) -> Any:
        """The process's agent, compiled on first use from the CRM's read-only tool list and
        its vocabulary (read once per process: the write tools' schemas are built from it)."""
        async with self._compile_lock:
            if self._agent is None:
                definitions = await read_tool_definitions(await ctx.crm.session())
                crm = crm_identity(self.settings.crm_kind, self.settings.crm_url or self.settings.crm_mcp_url)
                if not vocabulary_loaded(crm):
                    apply_vocabulary(await load_vocabulary(ctx), crm)
                self._agent = build_agent(
                    settings=self.settings,
                    model=self.model,
                    fallbacks=self.fallbacks,
                    crm_read_tools=read_tools(definitions),
                    checkpointer=self.saver,
                    store=self.store,
                    breaker=self.breaker,
                    write_guard=self._write_guard_factory(),
                )
            return self._agent

    @asynccontextmanager
    async def _run(
        self,
        identity: RepIdentity,
        tokens: TokenBroker,
        thread_id: str,
        *,
        read_now: bool,
        acting_for: RepIdentity | None = None,
    ) -> AsyncIterator[tuple[Any, AgentContext, dict[str, Any]] | TurnResult]:
        """The agent, the run's context and config; or the result that ends the run first.

        ``read_now`` opens the CRM read session up front (a question: a refused sign-in or
        an outage is answered before the model runs); otherwise it opens on first use.
        The run is one root run in LangSmith (a turn for a question, else a decision round)
        when tracing is on: its config carries the tracer to every graph run.
        """
        kind: Literal["turn", "decision"] = "turn" if read_now else "decision"
        async with AsyncExitStack() as stack, self.tracing.run(kind, identity, thread_id) as traced:
            ctx = await run_context(
                stack,
                settings=self.settings,
                identity=identity,
                thread_id=thread_id,
                tokens=tokens,
                pool=self.pool,
                sessions=self.crm_sessions,
                acting_for=acting_for,
                clock=self.clock,
                proposals=self,
            )
            try:
                if read_now:
                    # Only a fully open breaker stops the turn here; when half-open, the
                    # turn's first CRM tool call is the probe (the breaker lets one through).
                    if self.breaker.state == "open":
                        raise CrmUnavailable("circuit open")
                    await ctx.crm.session()
                agent = await self._compiled(ctx)
            except AuthError as exc:
                yield TurnResult(
                    thread_id, answer=exc.message, notice="no_crm_access" if exc.no_access else "auth"
                )
                return
            except CrmUnavailable:
                self.breaker.record_failure()
                yield TurnResult(thread_id, answer=UNAVAILABLE_MESSAGE, notice="crm_unavailable")
                return
            yield agent, ctx, {**self._config(thread_id, agent), **traced}

    async def _stream(
        self,
        agent: Any,
        payload: Any,
        config: dict[str, Any],
        ctx: AgentContext,
        on_progress: ProgressCallback | None,
        *,
        stop_after_tools: bool = False,
    ) -> bool:
        """Run the agent to its next stop (``stop_after_tools``: also right after its tool
        node ran); False if it ran out of graph steps instead."""
        names: dict[str, str] = {}
        # durability="exit": a run's checkpoint is written once, when it stops (its answer,
        # or its pause with the pending tool calls), and the run returns only after that
        # write. A turn killed before then leaves no trace of itself: the redelivered turn
        # starts again from the last stop, and read tools are safe to repeat. A resumed
        # write cannot run twice either: it runs from the pause already stored, under its
        # idempotency claim (copilot/persistence/idempotency.py), so a kill after the CRM
        # commit completes it from the claim instead of repeating it. "sync" wrote one
        # checkpoint per graph step (about 50 per turn, one per middleware hook); "async"
        # was tried and reverted (tests/adversarial/test_scale_out: a killed worker's
        # in-flight saves left a run that read back without its pause).
        try:
            async for update in agent.astream(
                payload,
                config,
                context=ctx,
                stream_mode="updates",
                durability="exit",
                interrupt_after=[TOOLS_NODE] if stop_after_tools else None,
            ):
                if not isinstance(update, dict):
                    continue
                for node, node_update in update.items():
                    messages = node_update.get("messages", []) if isinstance(node_update, dict) else []
                    for message in messages if isinstance(messages, list) else [messages]:
                        if isinstance(message, ToolMessage):
                            names_in(parse_result_text(message_text(message)), names)
                        elif (
                            isinstance(message, AIMessage) and on_progress is not None and node == MODEL_NODE
                        ):
                            # Only the model's new message: other nodes' updates (a summary
                            # rewriting the list, say) carry earlier turns' calls as well.
                            for call in message.tool_calls:
                                await on_progress(describe_tool_call(call["name"], call["args"], names))
        except GraphRecursionError:
            # The recursion limit is derived from the model-call limit, so the limit's own
            # answer normally ends the run first; should the graph still run out of steps,
            # the rep gets that same answer, never a recursion error.
            logger.warning("thread %s ran out of graph steps before its model-call limit", ctx.thread_id)
            return False
        return True

    @staticmethod
    def _proposals(state: StateSnapshot) -> list[Proposal]:
        """The proposals a state waits on: one LangChain ``ToolApprovalRequest`` per call."""
        records: dict[str, ProposalRecord] = (state.values or {}).get("proposals", {})
        thread_id = str(((state.config or {}).get("configurable") or {}).get("thread_id") or "")
        proposals = []
        for interrupt in state.interrupts:
            value = interrupt.value
            if not isinstance(value, dict) or value.get("type") != "tool_approval":
                continue
            request = cast(ToolApprovalRequest, value)
            proposals.append(
                Proposal(
                    tool_call_id=request["tool_call_id"],
                    tool=request["name"],
                    args=dict(request["args"]),
                    record=records.get(request["tool_call_id"]),
                    description=request.get("description", ""),
                    interrupt_id=interrupt.id,
                    thread_id=thread_id,
                )
            )
        return proposals

    def _result(self, state: StateSnapshot, thread_id: str) -> TurnResult:
        trace = current_trace()
        run_id = str(trace.run_id) if trace is not None else None
        proposals = self._proposals(state)
        if proposals:
            return TurnResult(thread_id, proposals=proposals, run_id=run_id)
        messages = (state.values or {}).get("messages", [])
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage) and not m.tool_calls), None)
        if last is None:
            return TurnResult(thread_id, answer=None, run_id=run_id)
        check = last.response_metadata.get("citation_check", {})
        cited = list(check.get("cited", []))
        return TurnResult(
            thread_id,
            run_id=run_id,
            answer=message_text(last),
            citations=cited,
            sources=cited_records(current_run(messages), cited),
            unverified_citations=list(check.get("unverified", [])),
            notice=_answer_notice(last),
        )

    @staticmethod
    def _outcomes(
        state: StateSnapshot, decided: set[str]
    ) -> tuple[list[dict[str, Any]], dict[str, WriteOutcome]]:
        """What the decided writes came to, found by tool call id (summarisation may rewrite
        the message list, so positions are not reliable): read from each tool message's
        typed artifact, never from its text. A rejection has no artifact."""
        messages = (state.values or {}).get("messages", [])
        outcomes: list[dict[str, Any]] = []
        typed: dict[str, WriteOutcome] = {}
        for message in messages:
            if not (isinstance(message, ToolMessage) and message.tool_call_id in decided):
                continue
            if isinstance(message.artifact, dict):
                outcome = WriteOutcome.from_stored(message.artifact)
                typed[message.tool_call_id] = outcome
                result: dict[str, Any] = outcome.to_json()
            else:
                result = {"message": message_text(message)}
            outcomes.append({"tool_call_id": message.tool_call_id, "tool": message.name, "result": result})
        return outcomes, typed

    @staticmethod
    def _answer(proposal: Proposal, decision: Approve | Edit | Reject) -> HitlDecision:
        """The rep's decision as LangChain's HITL decision for the proposal's interrupt."""
        if isinstance(decision, Approve):
            return ApproveDecision(type="approve")
        if isinstance(decision, Edit):
            args = edited_args(proposal.tool, proposal.args, decision)
            return EditDecision(type="edit", edited_action=Action(name=proposal.tool, args=args))
        return RejectDecision(type="reject", message=decision.reason)


def _delegate_may_decide(chosen: list[Approve | Edit | Reject], pending: Mapping[str, Proposal]) -> None:
    """What an approval delegate may decide: a CRM write approved as proposed (it is then
    one the owner may make: the owner's own run proposed it from the owner's own read, and
    the version check refuses it if the record changed since), or any rejection."""
    for decision in chosen:
        proposal = pending.get(decision.tool_call_id)
        if proposal is None:
            raise ProposalNotPending(decision.tool_call_id)
        if isinstance(decision, Edit):
            raise InvalidDecision(DELEGATE_MAY_NOT_EDIT)
        if isinstance(decision, Approve) and backends({proposal.tool}) != {"crm"}:
            raise InvalidDecision(DELEGATE_CRM_ONLY.format(tool=proposal.tool))


@asynccontextmanager
async def open_service(
    settings: Settings,
    *,
    model: BaseChatModel | None = None,
    write_guard_factory: Callable[[], WriteGuardMiddleware] = WriteGuardMiddleware,
) -> AsyncIterator[CopilotService]:
    """Start the copilot for this process: database (checked, never migrated here), models.

    ``model`` overrides ``COPILOT_MODEL`` (tests pass a scripted model). The service holds
    the process's shared HTTP connection pool (MCP sessions, mailbox) open while it runs.
    """
    from copilot.tools.mcp_http import shared_http

    url = resolve_database_url(settings)
    pool = await open_pool(url, settings)
    # Per-thread run locks hold a connection each while a run lasts: a pool of their own
    # (opened on demand) so that waiting runs never take the connections running ones need.
    locks = await open_pool(url, settings, min_size=0, max_size=4 * settings.db_pool_max_size, name="locks")
    try:
        async with shared_http():
            async with pool.connection() as conn:
                await assert_schema_current(conn)
            saver, store = make_saver_and_store(pool)
            fallbacks = [build_model(name) for name in settings.fallback_model_names()]
            model = model or build_model(settings.copilot_model)
            tracing = await open_tracing(settings, models=model_labels([model, *fallbacks]))
            crm_sessions = CrmSessionPool()
            try:
                yield CopilotService(
                    settings,
                    pool,
                    saver,
                    store,
                    model,
                    fallbacks,
                    write_guard_factory=write_guard_factory,
                    lock_pool=locks,
                    tracing=tracing,
                    crm_sessions=crm_sessions,
                )
            finally:
                await crm_sessions.aclose()
                await tracing.aclose()
    finally:
        await locks.close()
        await pool.close()
