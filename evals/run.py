"""Running a dataset through the real ``CopilotService``, once per model.

Each model gets a freshly seeded sandbox and a fresh database (so an item that plants
record text for one model cannot change what another reads), reps signed in through the
sandbox identity provider, and the items in dataset order, items with a setup last. Each
turn is observed (:mod:`evals.observe`) and scored (:mod:`evals.metrics`).
Proposals are never approved: after scoring, every pending proposal is rejected, so the
thread can go on and nothing is written.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from copilot import writes
from copilot.errors import CopilotError
from copilot.runner import CopilotService, open_service
from copilot.settings import CrmKind
from copilot.turns import TurnResult
from evals.crm import rep_crm
from evals.dataset import EvalItem, Thresholds, render_text
from evals.environment import EvalEnvironment, SignedInRep, eval_environment
from evals.metrics import (
    Breach,
    ItemCost,
    MetricValue,
    ProposalSeen,
    TurnObservation,
    TurnScore,
    aggregate,
    breaches,
    by_kind,
    score_turn,
)
from evals.observe import observing
from evals.scripted import is_scripted, scripted_model

Progress = Callable[[str], None]
REJECT_REASON = "eval: proposal scored, not approved"


@dataclass
class TurnRecord:
    text: str
    observation: TurnObservation
    score: TurnScore


@dataclass
class ItemRecord:
    item: EvalItem
    turns: list[TurnRecord] = field(default_factory=list)
    cost: ItemCost = field(default_factory=lambda: ItemCost(0, 0))


@dataclass
class ModelReport:
    """One model's run of one dataset."""

    model: str
    items: list[ItemRecord]
    values: dict[str, MetricValue]
    correctness_by_kind: dict[str, MetricValue]
    breaches: list[Breach]
    seconds: float

    @property
    def passed(self) -> bool:
        return not self.breaches


def ordered(items: Sequence[EvalItem]) -> list[EvalItem]:
    """Items that only read first, then the ones that change the CRM."""
    return [i for i in items if not i.stateful] + [i for i in items if i.stateful]


def slice_items(items: Sequence[EvalItem], limit: int | None) -> list[EvalItem]:
    """At most ``limit`` items, taken round-robin over the kinds (every kind is represented)."""
    if limit is None or limit >= len(items):
        return list(items)
    kinds: dict[str, list[EvalItem]] = {}
    for item in items:
        kinds.setdefault(item.kind, []).append(item)
    chosen: list[EvalItem] = []
    while len(chosen) < limit:
        for queue in kinds.values():
            if queue and len(chosen) < limit:
                chosen.append(queue.pop(0))
    return [i for i in items if i in chosen]


def _observation(result: TurnResult | None, observer: Any, error: str | None) -> TurnObservation:
    return TurnObservation(
        answer=(result.answer or "") if result else "",
        citations=list(result.citations) if result else [],
        unverified_citations=list(result.unverified_citations) if result else [],
        tool_calls=list(observer.tool_calls),
        tools_run=list(observer.tools_run),
        bound_tools=set(observer.bound_tools),
        tool_result_ids=set(observer.result_ids),
        tool_result_names=set(observer.result_names),
        tool_errors=list(observer.tool_errors),
        proposals=[ProposalSeen(p.tool, dict(p.args)) for p in (result.proposals if result else [])],
        model_calls=observer.model_calls,
        tokens=observer.tokens,
        prompt_tokens=observer.prompt_tokens,
        notice=result.notice if result else None,
        error=error,
    )


async def _plant(env: EvalEnvironment, rep: SignedInRep, item: EvalItem) -> None:
    """The item's setup writes, over MCP as the rep (a CRM user's own edit, not the copilot's),
    with the sandbox's own CRM tools on either profile (the write shows on its Dataverse face)."""
    async with rep_crm(env.settings(profile="reference"), env.on_reference(rep).broker, write=True) as crm:
        for step in item.setup:
            await crm.call(step.tool, step.args)


async def run_item(
    env: EvalEnvironment, service: CopilotService, rep: SignedInRep, item: EvalItem, seeded: dt.date
) -> ItemRecord:
    """One item's turns on one thread; pending proposals rejected after each turn is scored."""
    record = ItemRecord(item)
    if item.setup:
        await _plant(env, rep, item)
    thread: str | None = None
    write_names = [tool.name for tool in writes.write_tools()]
    for turn in item.turns:
        text = render_text(turn.text, seeded)
        result: TurnResult | None = None
        error: str | None = None
        with observing() as observer:
            try:
                result = await service.run_turn(rep.identity, rep.broker, thread, text)
            except CopilotError as exc:
                error = f"{type(exc).__name__}: {exc}"
        obs = _observation(result, observer, error)
        if result is not None and result.notice not in (None, "proposals_pending"):
            obs.error = f"notice: {result.notice}"
        score = score_turn(
            item.kind,
            turn.expect,
            obs,
            seeded=seeded,
            write_tools=write_names,
            schemas=writes.WRITE_TOOL_SCHEMAS,
            question=text,
        )
        record.turns.append(TurnRecord(text, obs, score))
        record.cost.model_calls += obs.model_calls
        record.cost.tokens += obs.tokens
        record.cost.prompt_tokens += obs.prompt_tokens
        if result is None:
            break
        thread = result.thread_id
        if result.proposals:
            await service.decide(
                rep.identity,
                rep.broker,
                thread,
                [
                    {"tool_call_id": p.tool_call_id, "type": "reject", "reason": REJECT_REASON}
                    for p in result.proposals
                ],
            )
    return record


async def evaluate_model(
    model: str,
    items: Sequence[EvalItem],
    thresholds: Thresholds,
    progress: Progress,
    profile: CrmKind = "reference",
) -> ModelReport:
    """``items`` through a copilot whose only model is ``model`` (a ``scripted:`` name is one
    of the eval's own misbehaving models, :mod:`evals.scripted`), on the CRM ``profile``."""
    started = time.monotonic()
    override = scripted_model(model) if is_scripted(model) else None
    records: list[ItemRecord] = []
    async with eval_environment(progress, profile) as env:
        # The sandbox was seeded just now: its dates are offsets from today (UTC).
        seeded = dt.datetime.now(dt.UTC).date()
        reps: dict[str, SignedInRep] = {}
        async with open_service(env.settings(model), model=override) as service:
            queue = ordered(items)
            for number, item in enumerate(queue, start=1):
                if item.rep not in reps:
                    reps[item.rep] = await env.sign_in(item.rep)
                record = await run_item(env, service, reps[item.rep], item, seeded)
                records.append(record)
                ok = all(turn_ok(t.score) for t in record.turns)
                progress(
                    f"eval [{model}] {number}/{len(queue)} {item.id} {item.kind}: {'ok' if ok else 'MISS'}"
                )
    scores = [t.score for r in records for t in r.turns]
    values = aggregate(scores, [r.cost for r in records])
    return ModelReport(
        model=model,
        items=records,
        values=values,
        correctness_by_kind=by_kind(scores, "correctness"),
        breaches=breaches(values, thresholds.min, thresholds.max),
        seconds=time.monotonic() - started,
    )


def turn_ok(score: TurnScore) -> bool:
    """Whether a turn met every expectation it has (for the list of misses)."""
    rates = (
        score.correctness,
        score.tool_choice,
        score.proposal_match,
        score.nothing_found,
        score.injection_resisted,
        score.honest_limit,
    )
    shown_wrong = (
        score.leaks or score.ungrounded_shown or score.raw_tool_call_text or score.answered_different_question
    )
    return not shown_wrong and score.error is None and all(r is None or r >= 1.0 for r in rates)
