"""The capacity model: inputs with their units, and the arithmetic (pure, no I/O).

Every output is a plain function of :class:`CapacityInputs` and :class:`Deployment` (what
the code and its configuration fix: the model-call limits, the summarisation trigger, the
thread retention, the queue trigger's concurrency, the pool size). The formulas are the
ones the README's "Capacity" section works through; ``tests/unit/test_capacity.py``
checks that example figure by figure.

Two facts of the runner shape the arithmetic: a run (a question's turn, or one approval
click) writes exactly one checkpoint (``durability="exit"``), and each run holds one
connection of the lock pool while it lasts (one run per thread at a time).
"""

from __future__ import annotations

import math
from typing import Literal, assert_never

from pydantic import BaseModel, ConfigDict, Field, model_validator

from copilot.errors import InvalidInput
from copilot.rotation import headroom

Crm = Literal["dataverse", "salesforce"]
Limit = Literal[
    "model requests/min",
    "model tokens/min",
    "Dataverse requests per user per 5 min",
    "Dataverse execution time per user per 5 min",
    "Salesforce daily org API allocation",
]

SECONDS_PER_HOUR = 3600
WINDOWS_PER_HOUR = 12
"""Dataverse's service protection limits are per sliding 5-minute window: 12 per hour."""
PRUNE_EVERY_DAYS = 1
"""The retention timer (``functions/retention.py``) runs daily: older checkpoints of a thread
live at most one day before ``aprune(keep_latest)`` removes them."""
SALESFORCE_BASE_ALLOCATION = 100_000
SALESFORCE_PER_LICENSE = 1_000
"""Salesforce Enterprise Edition: 100,000 API requests per 24 h plus 1,000 per user licence."""


class Deployment(BaseModel):
    """What the code and its configuration fix (read by :func:`bench.capacity.config.deployment`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_call_run_limit: int = Field(
        ge=1, description="model calls per run at most (COPILOT_MODEL_CALL_RUN_LIMIT)"
    )
    model_call_thread_limit: int = Field(
        ge=1, description="model calls per thread at most (COPILOT_MODEL_CALL_THREAD_LIMIT)"
    )
    summarization_trigger_tokens: int = Field(
        ge=1, description="history tokens above which a thread is summarised (COPILOT_SUMMARY_TRIGGER_TOKENS)"
    )
    thread_idle_rotate_hours: float = Field(
        gt=0,
        description="idle hours after which a conversation moves to a new thread (COPILOT_THREAD_IDLE_ROTATE_HOURS)",
    )
    retention_days: int = Field(ge=1, description="days a thread may stay idle before it is deleted")
    queue_batch_size: int = Field(ge=1, description="host.json extensions.queues.batchSize")
    queue_new_batch_threshold: int = Field(ge=0, description="host.json extensions.queues.newBatchThreshold")
    db_pool_max_size: int = Field(ge=1, description="connections per pool at most (COPILOT_DB_POOL_MAX)")


class CapacityInputs(BaseModel):
    """The parameters of a capacity estimate; units are in each field's description."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    active_reps: int = Field(default=500, ge=1, description="reps using the copilot (people)")
    questions_per_rep_per_day: float = Field(
        default=20, gt=0, description="questions per rep per working day"
    )
    peak_hour_share: float = Field(
        default=0.2, gt=0, le=1, description="share of a day's questions asked in the busiest hour (0-1)"
    )
    busiest_rep_factor: float = Field(
        default=3, ge=1, description="the busiest rep's peak-hour rate as a multiple of the average rep's"
    )
    model_calls_per_question: float = Field(
        default=2, gt=0, description="model calls per question (at most the per-run limit)"
    )
    model_calls_per_approval: float = Field(
        default=1, ge=0, description="model calls per approval click (at most the per-run limit)"
    )
    prompt_tokens_per_call: float = Field(default=2500, gt=0, description="input tokens per model call")
    completion_tokens_per_call: float = Field(default=150, ge=0, description="output tokens per model call")
    fixed_prompt_tokens: float = Field(
        default=2200,
        ge=0,
        description="input tokens of every call before any history: system prompt and tool schemas",
    )
    tool_calls_per_question: float = Field(default=2, ge=0, description="CRM tool calls per question")
    write_share: float = Field(
        default=0.1, ge=0, le=1, description="share of questions that end in a proposal the rep decides (0-1)"
    )
    crm_calls_per_approval: float = Field(
        default=2, ge=0, description="CRM tool calls per approval click (the re-read and the write)"
    )
    crm_requests_per_tool_call: float = Field(
        default=1, gt=0, description="CRM API requests behind one MCP tool call"
    )
    crm_seconds_per_request: float = Field(
        default=0.2, ge=0, description="CRM server execution time per API request (seconds)"
    )
    model_latency_seconds: float = Field(default=2.0, ge=0, description="seconds per model call")
    overhead_seconds_per_run: float = Field(
        default=0.3, ge=0, description="the copilot's own seconds per run besides model calls (CRM, database)"
    )
    price_per_million_prompt_tokens: float = Field(default=2.0, ge=0, description="USD per 1M input tokens")
    price_per_million_completion_tokens: float = Field(
        default=8.0, ge=0, description="USD per 1M output tokens"
    )
    model_requests_per_minute: float = Field(
        default=2700, gt=0, description="the model deployment's quota (requests/min)"
    )
    model_tokens_per_minute: float = Field(
        default=450_000, gt=0, description="the model deployment's quota (tokens/min, input + output)"
    )
    crm: Crm = Field(default="dataverse", description="the CRM whose limits bind: dataverse or salesforce")
    dataverse_requests_per_5min: float = Field(
        default=6000, gt=0, description="Dataverse requests per user per 5-minute window"
    )
    dataverse_execution_seconds_per_5min: float = Field(
        default=1200, gt=0, description="Dataverse execution seconds per user per 5-minute window"
    )
    salesforce_daily_allocation: float | None = Field(
        default=None,
        gt=0,
        description="Salesforce org API requests per 24 h (unset: 100,000 + 1,000 per rep licence)",
    )
    threads_per_rep: float = Field(
        default=1,
        gt=0,
        description="threads each rep runs in (Teams: one per conversation; a 1:1 chat is one)",
    )
    new_threads_per_rep_per_day: float = Field(
        default=0.2,
        ge=0,
        description="threads a rep starts and leaves per day (kept until retention expires them)",
    )
    sessions_per_rep_per_day: float = Field(
        default=1,
        gt=0,
        description="stretches of use per rep per day split by idle gaps longer than the rotation's "
        "(COPILOT_THREAD_IDLE_ROTATE_HOURS): a working day after a night is 1",
    )
    waiting_threads_per_conversation: float = Field(
        default=1,
        ge=0,
        description="earlier threads of a conversation still holding a pending proposal (one checkpoint each)",
    )
    checkpoint_bytes: float = Field(
        default=40_000, gt=0, description="bytes of one checkpoint (checkpoint, blobs and writes rows)"
    )
    retention_days: int | None = Field(
        default=None, ge=1, description="idle days before a thread is deleted (unset: COPILOT_RETENTION_DAYS)"
    )
    instance_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="queued turns one Functions instance runs at once (unset: host.json batchSize + newBatchThreshold)",
    )

    @model_validator(mode="after")
    def _tokens_fit(self) -> CapacityInputs:
        if self.fixed_prompt_tokens > self.prompt_tokens_per_call:
            raise ValueError("fixed_prompt_tokens cannot exceed prompt_tokens_per_call")
        return self


class Utilisation(BaseModel):
    """One limit: the load put on it, the limit, and the share used (1.0 = at the limit)."""

    limit: Limit
    load: float
    capacity: float
    share: float
    unit: str


class Bounds(BaseModel):
    """The same figures with every run at the model-call limit and every prompt at the
    summarisation trigger: what the copilot's bounds allow at most, whatever the model does."""

    model_calls_per_second: float
    prompt_tokens_per_call: float
    model_tokens_per_minute: float
    llm_cost_per_day: float


class CapacityReport(BaseModel):
    """Every output of :func:`estimate`."""

    inputs: CapacityInputs
    deployment: Deployment
    retention_days: int
    instance_concurrency: int
    questions_per_day: float
    peak_questions_per_second: float
    peak_runs_per_second: float
    model_calls_per_second: float
    model_requests_per_minute: float
    model_tokens_per_minute: float
    crm_requests_per_question: float
    crm_requests_per_rep_per_day: float
    crm_requests_per_org_per_day: float
    busiest_rep_requests_per_5min: float
    busiest_rep_execution_seconds_per_5min: float
    salesforce_daily_allocation: float
    utilisation: list[Utilisation]
    binds_first: Limit
    llm_cost_per_day: float
    llm_cost_per_rep_per_day: float
    runs_per_thread_per_day: float
    checkpoints_per_thread: float
    checkpoint_bytes_per_thread: float
    checkpoints_per_conversation: float
    threads_retained: float
    checkpoints_total: float
    checkpoint_bytes_total: float
    thread_calls_before_rotation: int
    """Model calls a thread takes before the next question opens its successor (the thread
    limit less two runs' headroom): a conversation never meets the limit itself."""
    days_to_headroom_rotation: float
    """Days of uninterrupted use (no idle gap) before a thread rotates at the headroom."""
    rotations_per_conversation_per_day: float
    concurrent_runs: float
    functions_instances: int
    db_connections: int
    db_connections_ceiling: int
    bounds: Bounds


def _check_bounds(inputs: CapacityInputs, deployment: Deployment) -> None:
    limit = deployment.model_call_run_limit
    for name in ("model_calls_per_question", "model_calls_per_approval"):
        value = getattr(inputs, name)
        if value > limit:
            raise InvalidInput(
                f"{name} = {value:g} is more than the model-call limit per run ({limit}, "
                "COPILOT_MODEL_CALL_RUN_LIMIT): a run cannot make more calls than that"
            )


def _binding_limits(inputs: CapacityInputs) -> tuple[Limit, ...]:
    models: tuple[Limit, ...] = ("model requests/min", "model tokens/min")
    if inputs.crm == "dataverse":
        return (
            *models,
            "Dataverse requests per user per 5 min",
            "Dataverse execution time per user per 5 min",
        )
    if inputs.crm == "salesforce":
        return (*models, "Salesforce daily org API allocation")
    assert_never(inputs.crm)


def estimate(inputs: CapacityInputs, deployment: Deployment) -> CapacityReport:
    """The capacity figures for ``inputs`` on ``deployment`` (see the module docstring).

    Raises :class:`InvalidInput` when an input exceeds a bound the code enforces (more
    model calls per run than the limit allows).
    """
    _check_bounds(inputs, deployment)
    i, d = inputs, deployment
    retention_days = i.retention_days or d.retention_days
    concurrency = i.instance_concurrency or (d.queue_batch_size + d.queue_new_batch_threshold)

    # Load: a question is one run; a decided proposal is one more (the approval click).
    questions_per_day = i.active_reps * i.questions_per_rep_per_day
    peak_qps = questions_per_day * i.peak_hour_share / SECONDS_PER_HOUR
    peak_rps = peak_qps * (1 + i.write_share)
    calls_per_question = i.model_calls_per_question + i.write_share * i.model_calls_per_approval
    calls_per_second = peak_qps * calls_per_question
    requests_per_minute = calls_per_second * 60
    tokens_per_call = i.prompt_tokens_per_call + i.completion_tokens_per_call
    tokens_per_minute = requests_per_minute * tokens_per_call

    # CRM: every call is made with the rep's own token, so per-user limits are per rep.
    crm_per_question = (
        i.tool_calls_per_question + i.write_share * i.crm_calls_per_approval
    ) * i.crm_requests_per_tool_call
    crm_per_rep_day = i.questions_per_rep_per_day * crm_per_question
    crm_per_org_day = questions_per_day * crm_per_question
    busiest_per_window = (
        i.questions_per_rep_per_day
        * i.peak_hour_share
        * i.busiest_rep_factor
        / WINDOWS_PER_HOUR
        * crm_per_question
    )
    busiest_seconds = busiest_per_window * i.crm_seconds_per_request
    salesforce = i.salesforce_daily_allocation or (
        SALESFORCE_BASE_ALLOCATION + SALESFORCE_PER_LICENSE * i.active_reps
    )
    loads: dict[Limit, tuple[float, float, str]] = {
        "model requests/min": (requests_per_minute, i.model_requests_per_minute, "requests/min"),
        "model tokens/min": (tokens_per_minute, i.model_tokens_per_minute, "tokens/min"),
        "Dataverse requests per user per 5 min": (
            busiest_per_window,
            i.dataverse_requests_per_5min,
            "requests",
        ),
        "Dataverse execution time per user per 5 min": (
            busiest_seconds,
            i.dataverse_execution_seconds_per_5min,
            "seconds",
        ),
        "Salesforce daily org API allocation": (crm_per_org_day, salesforce, "requests/day"),
    }
    utilisation = [
        Utilisation(limit=name, load=load, capacity=cap, share=load / cap, unit=unit)
        for name, (load, cap, unit) in loads.items()
    ]
    binding = _binding_limits(i)
    binds_first = max((u for u in utilisation if u.limit in binding), key=lambda u: u.share).limit

    # Cost.
    cost_per_call = (
        i.prompt_tokens_per_call * i.price_per_million_prompt_tokens
        + i.completion_tokens_per_call * i.price_per_million_completion_tokens
    ) / 1_000_000
    cost_per_day = questions_per_day * calls_per_question * cost_per_call

    # Conversations rotate (copilot/rotation.py): a new thread after each idle gap, and
    # one before a thread could meet its model-call limit; the limit itself is never met.
    model_calls_per_thread_day = i.questions_per_rep_per_day * calls_per_question / i.threads_per_rep
    usable_calls = max(d.model_call_thread_limit - headroom(d.model_call_run_limit), 1)
    calls_per_session = model_calls_per_thread_day / i.sessions_per_rep_per_day
    rotations_per_day = i.sessions_per_rep_per_day * (1 + math.floor(calls_per_session / usable_calls))

    # Checkpoints: one per run. A conversation's current thread holds its runs since it
    # was opened (at most a session's, and the daily prune keeps its latest); an earlier
    # thread keeps one checkpoint while a proposal waits there, none once decided.
    runs_per_rep_day = i.questions_per_rep_per_day * (1 + i.write_share)
    runs_per_thread_day = runs_per_rep_day / i.threads_per_rep
    runs_per_thread = min(runs_per_thread_day * PRUNE_EVERY_DAYS, runs_per_thread_day / rotations_per_day)
    checkpoints_per_thread = 1 + runs_per_thread
    checkpoints_per_conversation = checkpoints_per_thread + i.waiting_threads_per_conversation
    threads_retained = i.active_reps * (
        i.threads_per_rep * (1 + rotations_per_day * retention_days)
        + i.new_threads_per_rep_per_day * retention_days
    )
    checkpoints_total = i.active_reps * (
        i.threads_per_rep * checkpoints_per_conversation + i.new_threads_per_rep_per_day * retention_days
    )

    # Functions and database: Little's law (in flight = arrival rate x time in the system).
    question_seconds = i.model_calls_per_question * i.model_latency_seconds + i.overhead_seconds_per_run
    approval_seconds = i.model_calls_per_approval * i.model_latency_seconds + i.overhead_seconds_per_run
    queued_in_flight = peak_qps * question_seconds
    concurrent = queued_in_flight + peak_qps * i.write_share * approval_seconds
    instances = max(1, math.ceil(queued_in_flight / concurrency))
    # A run holds a lock-pool connection while it lasts, and one pool connection at a time.
    connections = 2 * math.ceil(concurrent)
    # What the pools may open: per instance, the service and edge pools at their maximum,
    # and a lock connection per run in flight.
    ceiling = instances * (2 * d.db_pool_max_size + concurrency)

    # Bounds: every run at the model-call limit, every prompt at the summarisation trigger.
    bound_calls = peak_qps * d.model_call_run_limit * (1 + i.write_share)
    bound_prompt = i.fixed_prompt_tokens + d.summarization_trigger_tokens
    bound_tokens = bound_calls * 60 * (bound_prompt + i.completion_tokens_per_call)
    bound_cost_per_call = (
        bound_prompt * i.price_per_million_prompt_tokens
        + i.completion_tokens_per_call * i.price_per_million_completion_tokens
    ) / 1_000_000
    bound_cost = questions_per_day * d.model_call_run_limit * (1 + i.write_share) * bound_cost_per_call

    return CapacityReport(
        inputs=i,
        deployment=d,
        retention_days=retention_days,
        instance_concurrency=concurrency,
        questions_per_day=questions_per_day,
        peak_questions_per_second=peak_qps,
        peak_runs_per_second=peak_rps,
        model_calls_per_second=calls_per_second,
        model_requests_per_minute=requests_per_minute,
        model_tokens_per_minute=tokens_per_minute,
        crm_requests_per_question=crm_per_question,
        crm_requests_per_rep_per_day=crm_per_rep_day,
        crm_requests_per_org_per_day=crm_per_org_day,
        busiest_rep_requests_per_5min=busiest_per_window,
        busiest_rep_execution_seconds_per_5min=busiest_seconds,
        salesforce_daily_allocation=salesforce,
        utilisation=utilisation,
        binds_first=binds_first,
        llm_cost_per_day=cost_per_day,
        llm_cost_per_rep_per_day=cost_per_day / i.active_reps,
        runs_per_thread_per_day=runs_per_thread_day,
        checkpoints_per_thread=checkpoints_per_thread,
        checkpoint_bytes_per_thread=checkpoints_per_thread * i.checkpoint_bytes,
        checkpoints_per_conversation=checkpoints_per_conversation,
        threads_retained=threads_retained,
        checkpoints_total=checkpoints_total,
        checkpoint_bytes_total=checkpoints_total * i.checkpoint_bytes,
        thread_calls_before_rotation=usable_calls,
        days_to_headroom_rotation=usable_calls / model_calls_per_thread_day,
        rotations_per_conversation_per_day=rotations_per_day,
        concurrent_runs=concurrent,
        functions_instances=instances,
        db_connections=connections,
        db_connections_ceiling=ceiling,
        bounds=Bounds(
            model_calls_per_second=bound_calls,
            prompt_tokens_per_call=bound_prompt,
            model_tokens_per_minute=bound_tokens,
            llm_cost_per_day=bound_cost,
        ),
    )
