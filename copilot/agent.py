"""Builds the LangChain agent: tools, the middleware chain in its fixed order, persistence."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, LLMToolSelectorMiddleware, SummarizationMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore

from copilot.agent_tools.model_tools import local_read_tools, write_tools
from copilot.context import AgentContext
from copilot.errors import UNAVAILABLE_MESSAGE
from copilot.middleware.approval import approval_middleware, assert_every_write_is_interrupted
from copilot.middleware.citations import CitationCheckMiddleware
from copilot.middleware.context import RepContextMiddleware
from copilot.middleware.grounding import GroundingMiddleware
from copilot.middleware.limits import FriendlyModelCallLimit
from copilot.middleware.pii import pii_middleware
from copilot.middleware.proposals import ProposalSnapshotMiddleware
from copilot.middleware.resilience import CircuitBreaker, CircuitBreakerMiddleware, CrmRetryMiddleware
from copilot.middleware.tool_call_ids import ToolCallIdMiddleware
from copilot.middleware.tool_selection import ToolSelectionMiddleware, tool_cues
from copilot.middleware.write_guard import WriteGuardMiddleware
from copilot.models.fallback import TracedModelFallback, with_fallbacks
from copilot.prompts import system_prompt
from copilot.settings import Settings
from copilot.writes import REGISTRY


def build_agent(
    *,
    settings: Settings,
    model: BaseChatModel,
    fallbacks: Sequence[BaseChatModel],
    crm_read_tools: Sequence[BaseTool],
    checkpointer: BaseCheckpointSaver[Any] | None,
    store: BaseStore | None,
    breaker: CircuitBreaker,
    write_guard: WriteGuardMiddleware | None = None,
) -> CompiledStateGraph[Any, AgentContext, Any, Any]:
    """The process's agent (compiled once; each CRM read tool calls the session of the run
    that uses it, from the run's context).

    Middleware order matters: context and PII run before every model call; the limit
    and fallback wrap the model; proposals are snapshotted right after the model; the
    approval gate wraps the write guard, which wraps the breaker and retry, so a write
    can only execute after a decision and retries never re-ask the rep.
    """
    reads = [*crm_read_tools, *local_read_tools()]
    tools: list[BaseTool] = [*reads, *write_tools()]
    hitl = approval_middleware()
    assert_every_write_is_interrupted(tools, hitl, read_only={t.name for t in reads})
    middleware: list[AgentMiddleware[Any, Any, Any]] = [*_selection(settings, model, tools, reads)]
    middleware += [
        RepContextMiddleware(),
        pii_middleware(settings.phone_region),
        SummarizationMiddleware(
            with_fallbacks(model, fallbacks),
            trigger=("tokens", settings.summarization_trigger_tokens),
            keep=("messages", settings.summarization_keep_messages),
        ),
        FriendlyModelCallLimit(
            thread_limit=settings.model_call_thread_limit,
            run_limit=settings.model_call_run_limit,
            exit_behavior="end",
        ),
        # Outside the fallback, so whichever model answered, its tool call ids are ours.
        ToolCallIdMiddleware(),
        # Inside the ids (recovered calls get ours), outside the fallback (a retry may be
        # answered by whichever model is up): every model's answers grounded or refused.
        GroundingMiddleware(
            read_tools={t.name for t in reads},
            run_limit=settings.model_call_run_limit,
            thread_limit=settings.model_call_thread_limit,
            fallbacks=fallbacks,
            rep_facing=(UNAVAILABLE_MESSAGE,),
        ),
    ]
    if fallbacks:
        middleware.append(TracedModelFallback(*fallbacks))
    middleware += [
        ProposalSnapshotMiddleware(),
        hitl,
        write_guard or WriteGuardMiddleware(),
        # Writes whose backend is the CRM share its breaker with the reads.
        CircuitBreakerMiddleware(
            breaker,
            crm_tools={t.name for t in crm_read_tools}
            | {n for n, t in REGISTRY.items() if t.backend == "crm"},
        ),
        CrmRetryMiddleware(
            max_retries=settings.tool_max_retries,
            initial_delay=settings.tool_retry_initial_delay,
            max_delay=settings.tool_retry_max_delay,
        ),
        CitationCheckMiddleware(),
    ]
    assert set(REGISTRY) <= {t.name for t in tools}
    return create_agent(
        model,
        tools,
        system_prompt=system_prompt([t.name for t in tools], write_tools=list(REGISTRY)),
        middleware=middleware,
        context_schema=AgentContext,
        checkpointer=checkpointer,
        store=store,
    )


def _selection(
    settings: Settings, model: BaseChatModel, tools: Sequence[BaseTool], reads: Sequence[BaseTool]
) -> list[AgentMiddleware[Any, Any, Any]]:
    """The tool selection the settings ask for (first in the chain: later middleware, the
    grounding gate among them, see only what the model is offered)."""
    if settings.tool_selection == "all":
        return []
    if settings.tool_selection == "llm":
        always = [t.name for t in tools if not tool_cues(t)]
        return [LLMToolSelectorMiddleware(model=model, always_include=always)]
    return [ToolSelectionMiddleware(write_tools=[t.name for t in tools if t not in reads])]
