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
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Literal, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.store.postgres.aio import AsyncPostgresStore
from langgraph.types import Command, StateSnapshot
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from copilot.agent import build_agent
from copilot.agent_stream import ProgressCallback, stream_agent
from copilot.auth.tokens import TokenBroker
from copilot.clock import Clock, system_clock
from copilot.context import AgentContext, run_context
from copilot.crm.connector import load_vocabulary
from copilot.decision_records import record_decisions
from copilot.decisions import Reject, parse_decisions
from copilot.errors import (
    UNAVAILABLE_MESSAGE,
    AuthError,
    CrmUnavailable,
    InvalidInput,
    MailboxUnavailable,
)
from copilot.identity import RepIdentity
from copilot.middleware.limits import LIMIT_MESSAGE
from copilot.middleware.resilience import CircuitBreaker, breaker_for
from copilot.middleware.write_guard import WriteGuardMiddleware
from copilot.models.factory import build_model
from copilot.persistence import idempotency
from copilot.persistence.checkpoint import make_saver_and_store
from copilot.persistence.embedded import resolve_database_url
from copilot.persistence.migrations import assert_schema_current
from copilot.persistence.pool import open_pool
from copilot.posting import PostingSettings
from copilot.settings import Settings
from copilot.thread_keeper import ThreadKeeper, thread_config
from copilot.tools.crm_client import read_tool_definitions, read_tools
from copilot.tools.session_pool import CrmSessionPool
from copilot.tracing import Tracing, model_labels, open_tracing
from copilot.turn_state import (
    UNAVAILABLE_KEPT,
    aborted,
    delegate_may_decide,
    hitl_answers,
    outcomes_of,
    proposal_made,
    proposals_of,
    result_of,
)
from copilot.turns import Proposal, TurnResult, also_waiting_line, waiting_line
from copilot.vocabulary import crm_identity, vocabulary_loaded
from copilot.writes import WriteOutcome, backends
from copilot.writes.crm import apply_vocabulary

logger = logging.getLogger(__name__)


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
        self.posting: PostingSettings | None = None  # the bot's brief/digest settings (none: CLI)
        self.keeper = ThreadKeeper(settings, pool, self.lock_pool, saver, lambda: self.clock, self._state_of)
        """Thread authorisation, run locks and rotation."""

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
            thread_id, rotated = await self.keeper.rotated(identity, thread_id)
        else:
            thread_id = await self.keeper.own(identity, thread_id)
        async with (
            self.keeper.one_run(thread_id),
            self._run(identity, tokens, thread_id, read_now=True) as run,
        ):
            if isinstance(run, TurnResult):
                return run
            agent, ctx, config = run
            try:
                state = await agent.aget_state(config)
                # A run cut short (a crash between its steps) left tool calls without their
                # results: finish it first, so the history stays one a model accepts.
                if state.next and not state.interrupts:
                    if not await stream_agent(agent, None, config, ctx, on_progress):
                        return TurnResult(thread_id, answer=LIMIT_MESSAGE, notice="limit_reached")
                    state = await agent.aget_state(config)
                messages = (state.values or {}).get("messages", [])
                if message_id is not None and (
                    any(isinstance(m, HumanMessage) and m.id == message_id for m in messages)
                    or await self.keeper.answered(thread_id, message_id)
                ):
                    return result_of(state, thread_id)
                pending = proposals_of(state)
                if pending:
                    return await self._side_answer(
                        agent, ctx, thread_id, text, pending, on_progress, message_id
                    )
                question = HumanMessage(text, id=message_id) if message_id is not None else HumanMessage(text)
                carried = await self.keeper.handoff(thread_id) if rotate and not messages else []
                finished = await stream_agent(
                    agent, {"messages": [*carried, question]}, config, ctx, on_progress
                )
                if message_id is not None:
                    await self.keeper.mark_answered(thread_id, message_id)
                if rotated:
                    await self.keeper.compact_rotated(thread_id)
                if not finished:
                    return TurnResult(thread_id, answer=LIMIT_MESSAGE, notice="limit_reached")
                return result_of(await agent.aget_state(config), thread_id)
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
        side = await self.keeper.side_thread(ctx.identity)
        config = self._config(side, agent)
        kept = False
        try:
            finished = await stream_agent(
                agent,
                {"messages": [HumanMessage(text)]},
                config,
                dataclasses.replace(ctx, thread_id=side),
                on_progress,
            )
            state = await agent.aget_state(config) if finished else None
            kept = state is not None and bool(proposals_of(state))
        finally:
            if not kept:
                await self.keeper.drop(side)
        if message_id is not None:
            await self.keeper.mark_answered(thread_id, message_id)
        n = len(pending)
        if state is None:
            return TurnResult(thread_id, answer=LIMIT_MESSAGE, proposals=pending, notice="limit_reached")
        if kept:
            return TurnResult(
                thread_id,
                answer=also_waiting_line(n),
                proposals=[*pending, *proposals_of(state)],
                notice="proposals_pending",
            )
        answered = result_of(state, thread_id)
        answer = f"{answered.answer}\n\n{waiting_line(n)}" if answered.answer else waiting_line(n)
        return TurnResult(
            thread_id,
            answer=answer,
            citations=answered.citations,
            unverified_citations=answered.unverified_citations,
            sources=answered.sources,
            views=answered.views,
            proposals=pending,
            notice="proposals_pending",
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
        owner = await self.keeper.may_decide(identity, thread_id)
        async with (
            self.keeper.one_run(thread_id),
            self._run(identity, tokens, thread_id, read_now=False, acting_for=owner) as run,
        ):
            if isinstance(run, TurnResult):
                return run
            agent, ctx, config = run
            pending = {p.tool_call_id: p for p in proposals_of(await agent.aget_state(config))}
            chosen = parse_decisions(decisions(pending)) if callable(decisions) else decisions
            if owner is not None:
                delegate_may_decide(chosen, pending)
            answers = hitl_answers(chosen, pending)
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
                finished = await stream_agent(
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
                kept = proposals_of(await agent.aget_state(config))
                await record_decisions(self.pool, whose, thread_id, pending, chosen, kept, {})
                answer, notice = aborted(exc)
                return TurnResult(thread_id, answer=answer, proposals=kept, notice=notice)
            state = await agent.aget_state(config)
            result = (
                result_of(state, thread_id)
                if owner is None
                else TurnResult(thread_id, proposals=proposals_of(state))
            )
            if not finished:
                result.answer, result.notice = LIMIT_MESSAGE, "limit_reached"
            result.decided = {d.tool_call_id: pending[d.tool_call_id] for d in chosen}
            result.outcomes, result.writes = outcomes_of(state, set(result.decided))
            await record_decisions(
                self.pool, whose, thread_id, pending, chosen, result.proposals, result.writes
            )
            return result

    async def pending(self, identity: RepIdentity, thread_id: str) -> TurnResult:
        """The proposals waiting on a thread (no model call, no token, no CRM session), for
        its owner or someone who may decide them (an approval delegate)."""
        await self.keeper.may_decide(identity, thread_id)
        state = await self._state_of(thread_id)
        return TurnResult(thread_id, proposals=proposals_of(state))

    async def waiting(self, identity: RepIdentity, thread_id: str) -> list[Proposal]:
        """The proposals waiting on one of the rep's threads, read without touching it.

        Like :meth:`pending` (the same authorisation), but a read that is no activity: the
        daily digest looks at every thread of the rep each morning, and must not keep idle
        threads from expiring.
        """
        await self.keeper.may_decide(identity, thread_id, touch=False)
        return proposals_of(await self._state_of(thread_id))

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
        await self.keeper.may_decide(identity, thread_id)
        async with self.pool.connection() as conn:
            stored = await idempotency.stored_result(
                conn, idempotency.idempotency_key(thread_id, tool_call_id)
            )
        if stored is None:
            return None
        proposal = proposal_made(await self._state_of(thread_id), tool_call_id)
        return None if proposal is None else (proposal, WriteOutcome.from_stored(stored))

    async def _state_of(self, thread_id: str) -> StateSnapshot:
        return cast(StateSnapshot, await self._state_graph().aget_state(self._config(thread_id)))

    def _config(self, thread_id: str, agent: Any = None) -> dict[str, Any]:
        config = thread_config(thread_id)
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
                posting=self.posting,
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
