"""Thread rotation: when a conversation's next question opens a new thread, and what it carries.

A Teams conversation lasts months; one agent thread must not (its model-call limit would
end it in days, and its checkpoints would only grow). So a conversation is a chain of
threads (``threads.rotated_to``): the next question opens a successor after an idle gap
(``COPILOT_THREAD_IDLE_ROTATE_HOURS``), or before a run could take the thread past its
model-call limit. The successor starts with a hand-off, the last exchange the rep had
that only read the CRM, copied verbatim from the old thread (real tool results and the
answer cited from them: nothing is invented or summarised), so "and its next step?"
still finds the record. Proposals pending on the old thread stay there, decidable from
their cards. Pure: no I/O; the runner (``CopilotService.run_turn(rotate=True)``) applies it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

RotationReason = Literal["idle", "headroom"]
"""Why a question opens a new thread: the conversation was idle, or the thread is near its limit."""


def headroom(run_limit: int) -> int:
    """Model calls a thread must still have for the next question to run on it.

    Two runs' worth: the question's own run, and one decision round afterwards (a card
    decided on this thread after the conversation moved on continues the run here, and
    must never meet the thread's limit).
    """
    return 2 * run_limit


def rotation_due(
    *,
    model_calls: int,
    last_active: datetime,
    now: datetime,
    thread_limit: int,
    run_limit: int,
    idle: timedelta,
) -> RotationReason | None:
    """Whether the next question on a thread opens a new one instead, and why.

    ``model_calls`` is the thread's count so far (its ``thread_model_call_count``),
    ``last_active`` when it last ran (before this question).
    """
    if model_calls + headroom(run_limit) > thread_limit:
        return "headroom"
    if now - last_active >= idle:
        return "idle"
    return None


def _is_summary(message: BaseMessage) -> bool:
    # SummarizationMiddleware marks the human message that stands in for older history.
    return (message.additional_kwargs or {}).get("lc_source") == "summarization"


def handoff(messages: Sequence[BaseMessage], write_tools: Collection[str]) -> list[BaseMessage]:
    """The messages a successor thread starts with: the newest finished exchange that made
    no write, verbatim (question, the model's read calls, their results, the answer).

    Empty when there is none (every recent exchange proposed a change, or the history was
    summarised away). An exchange counts only if every tool call has its result and the
    answer is a plain one (not a limit stop or a refusal), so the copy is a history any
    model accepts and holds only what the CRM returned and what was cited from it.
    """
    starts = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    for n in range(len(starts) - 1, -1, -1):
        begin = starts[n]
        end = starts[n + 1] if n + 1 < len(starts) else len(messages)
        turn = list(messages[begin:end])
        if _is_summary(turn[0]) or not _finished_read_only(turn, write_tools):
            continue
        return [m.model_copy() for m in turn]
    return []


def _finished_read_only(turn: list[BaseMessage], write_tools: Collection[str]) -> bool:
    last = turn[-1]
    if not isinstance(last, AIMessage) or last.tool_calls:
        return False
    meta = last.response_metadata or {}
    if meta.get("limit_reached") or (meta.get("grounding") or {}).get("outcome") == "refused":
        return False
    calls = {c["id"] for m in turn if isinstance(m, AIMessage) for c in m.tool_calls}
    if any(c["name"] in write_tools for m in turn if isinstance(m, AIMessage) for c in m.tool_calls):
        return False
    answered = {m.tool_call_id for m in turn if isinstance(m, ToolMessage)}
    return calls <= answered
