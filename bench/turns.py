"""Turn cost and approve-click cost: the copilot (``CopilotService``) against the bare agent."""

from __future__ import annotations

from typing import Any

from bench.baseline import WRITE_TOOLS, BareAgent, PendingWrite
from bench.counting import Costs
from bench.environment import BenchEnvironment
from bench.model import BenchChatModel
from bench.stats import Comparison, Progress, Trial, interleave
from copilot.runner import CopilotService
from copilot.turns import Proposal


class OursFailed(RuntimeError):
    """The copilot did not do what the scenario expects (the measurement would be void)."""


async def turn_cost(
    env: BenchEnvironment,
    service: CopilotService,
    *,
    iterations: int,
    warmup: int,
    costs: Costs,
    progress: Progress,
    lookup: bool = False,
) -> Comparison:
    """``run_turn`` of a two-reads-then-answer question (``lookup``: one read, then the answer)
    against a bare ``create_agent`` turn."""
    question = (env.scenarios.lookup if lookup else env.scenarios.turn).question
    model = BenchChatModel.scripted(env.scenarios)
    ours_broker, bare = env.broker(), BareAgent(env.settings, service.saver, model, env.broker())

    async def ours(_: Any) -> None:
        result = await service.run_turn(env.identity, ours_broker, None, question)
        if result.answer is None or result.notice is not None or result.unverified_citations:
            raise OursFailed(f"the turn did not answer as scripted: {result.to_json()}")

    async def baseline(_: Any) -> None:
        await bare.turn(question)

    reads = "one CRM read" if lookup else "two parallel CRM reads"
    comparison = Comparison(
        scenario="lookup cost" if lookup else "turn cost",
        description=f"one turn: {reads}, then a cited answer (2 model calls)"
        if env.crm_kind == "reference"
        else f"one turn: {reads} through read_query (the query tool found by its schema), then a "
        "cited answer (2 model calls)",
        baseline="bare create_agent + load_mcp_tools on one session, same model, saver and token",
    )
    return await interleave(
        comparison,
        Trial(ours),
        Trial(baseline),
        iterations=iterations,
        warmup=warmup,
        costs=costs,
        progress=progress,
    )


async def approve_click_cost(
    env: BenchEnvironment,
    service: CopilotService,
    *,
    iterations: int,
    warmup: int,
    costs: Costs,
    progress: Progress,
) -> Comparison:
    """``decide`` approving a proposed ``log_activity`` against resuming a bare HITL interrupt.

    Only the click is timed and counted; the turn that proposes the write is each
    iteration's untimed preparation.
    """
    question = env.scenarios.approve_click.question
    ours_broker = env.broker()
    bare_tool = WRITE_TOOLS[env.crm_kind]
    model = BenchChatModel.scripted(env.scenarios, write_tool=bare_tool)
    bare = BareAgent(env.settings, service.saver, model, env.broker())

    async def ours_propose() -> tuple[str, Proposal]:
        result = await service.run_turn(env.identity, ours_broker, None, question)
        if len(result.proposals) != 1:
            raise OursFailed(f"expected one proposal: {result.to_json()}")
        return result.thread_id, result.proposals[0]

    async def ours_click(prepared: tuple[str, Proposal]) -> None:
        thread_id, proposal = prepared
        result = await service.decide(
            env.identity, ours_broker, thread_id, [{"tool_call_id": proposal.tool_call_id, "type": "approve"}]
        )
        statuses = [outcome.status for outcome in result.writes.values()]
        if statuses != ["done"] or result.answer is None:
            raise OursFailed(f"the approval did not write once: {result.to_json()}")

    async def bare_propose() -> PendingWrite:
        return await bare.propose(question)

    async def bare_click(prepared: PendingWrite) -> None:
        await bare.approve(prepared)

    if env.crm_kind == "reference":
        description = "one Approve click: a proposed log_activity is written through MCP (1 model call)"
    else:
        # The copilot's way on Dataverse: the Web API (ETag If-Match re-read, create-only upsert
        # by the alternate key); the bare way: the CRM's MCP create_record, no version, no key.
        description = (
            "one Approve click: a proposed log_activity is written through the Web API "
            "(If-Match re-read, alternate-key upsert) (1 model call)"
        )
    comparison = Comparison(
        scenario="approve click",
        description=description,
        baseline=f"bare create_agent + HumanInTheLoopMiddleware on {bare_tool}, Command(resume=...)",
    )
    return await interleave(
        comparison,
        Trial(ours_click, ours_propose),
        Trial(bare_click, bare_propose),
        iterations=iterations,
        warmup=warmup,
        costs=costs,
        progress=progress,
    )
