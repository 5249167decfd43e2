"""Reading a turn off the agent's state (pure): the proposals it waits on, the answer with its
citations, what decided writes came to, and how a rep's decision becomes LangChain's HITL one.

The runner (:mod:`copilot.runner`) runs the agent; everything it then reads back from a
``StateSnapshot`` is here, so the pause, the answer and the outcomes are one definition each.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from langchain.agents.middleware.human_in_the_loop import (
    Action,
    ApproveDecision,
    EditDecision,
    RejectDecision,
    ToolApprovalRequest,
)
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.types import StateSnapshot

from copilot.citations import cited_records, current_run, message_text
from copilot.decisions import Approve, Edit, Reject, edited_args
from copilot.errors import (
    UNAVAILABLE_MESSAGE,
    AuthError,
    CrmUnavailable,
    InvalidDecision,
    MailboxUnavailable,
    ProposalNotPending,
)
from copilot.proposals import ProposalRecord
from copilot.tracing import current_trace
from copilot.turns import Notice, Proposal, TurnResult, args_digest
from copilot.views import views_in
from copilot.writes import WriteOutcome, backends

HitlDecision = ApproveDecision | EditDecision | RejectDecision

DELEGATE_MAY_NOT_EDIT = (
    "You decide these proposals for a colleague: you can approve or reject one as it was "
    "proposed, not edit it. Nothing was changed."
)
DELEGATE_CRM_ONLY = (
    "Only the rep who asked can approve {tool}: it acts on their own mailbox or settings. "
    "Nothing was changed."
)

MAILBOX_UNAVAILABLE_MESSAGE = (
    "Your mailbox (Outlook) is unavailable right now, so the draft was not saved yet. "
    "Your pending approvals are kept: approve again in a moment."
)

UNAVAILABLE_KEPT = UNAVAILABLE_MESSAGE + " Your pending approvals are kept."


def answer_notice(answer: AIMessage) -> Notice | None:
    """Why a final answer is not a plain answer: the limit's stop, or the grounding gate's refusal."""
    if answer.response_metadata.get("limit_reached"):
        return "limit_reached"
    if (answer.response_metadata.get("grounding") or {}).get("outcome") == "refused":
        return "ungrounded"
    return None


def proposals_of(state: StateSnapshot) -> list[Proposal]:
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


def result_of(state: StateSnapshot, thread_id: str) -> TurnResult:
    """What a state gives the rep: its pending proposals, else its last answer with citations."""
    trace = current_trace()
    run_id = str(trace.run_id) if trace is not None else None
    proposals = proposals_of(state)
    if proposals:
        return TurnResult(thread_id, proposals=proposals, run_id=run_id)
    messages = (state.values or {}).get("messages", [])
    last = next((m for m in reversed(messages) if isinstance(m, AIMessage) and not m.tool_calls), None)
    if last is None:
        return TurnResult(thread_id, answer=None, run_id=run_id)
    check = last.response_metadata.get("citation_check", {})
    cited = list(check.get("cited", []))
    run = current_run(messages)
    return TurnResult(
        thread_id,
        run_id=run_id,
        answer=message_text(last),
        citations=cited,
        sources=cited_records(run, cited),
        unverified_citations=list(check.get("unverified", [])),
        notice=answer_notice(last),
        views=views_in(run),
    )


def outcomes_of(
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


def hitl_answer(proposal: Proposal, decision: Approve | Edit | Reject) -> HitlDecision:
    """The rep's decision as LangChain's HITL decision for the proposal's interrupt."""
    if isinstance(decision, Approve):
        return ApproveDecision(type="approve")
    if isinstance(decision, Edit):
        args = edited_args(proposal.tool, proposal.args, decision)
        return EditDecision(type="edit", edited_action=Action(name=proposal.tool, args=args))
    return RejectDecision(type="reject", message=decision.reason)


def delegate_may_decide(chosen: list[Approve | Edit | Reject], pending: Mapping[str, Proposal]) -> None:
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


def aborted(exc: CrmUnavailable | MailboxUnavailable | AuthError) -> tuple[str, Notice]:
    """What the rep is told when a decision round stops on an outage or a refused token."""
    if isinstance(exc, MailboxUnavailable):
        return MAILBOX_UNAVAILABLE_MESSAGE, "mailbox_unavailable"
    if isinstance(exc, AuthError):
        return exc.message, "auth"
    return UNAVAILABLE_KEPT, "crm_unavailable"


def proposal_made(state: StateSnapshot, tool_call_id: str) -> Proposal | None:
    """The proposal a state's write call was made as (decided or not), from its call and its
    snapshot; None when the state holds no such call."""
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
    return Proposal(
        tool_call_id=tool_call_id,
        tool=call["name"],
        args=dict(call["args"]),
        record=record,
        description="",
        interrupt_id="",
    )


def hitl_answers(
    chosen: list[Approve | Edit | Reject], pending: Mapping[str, Proposal]
) -> dict[str, HitlDecision]:
    """The rep's decisions as the resume of each pending proposal's interrupt (by interrupt id).

    A decision for a proposal that is not pending raises :class:`ProposalNotPending`; one whose
    digest is not the proposal's arguments' (it was made on another proposal) is refused.
    """
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
        answers[proposal.interrupt_id] = hitl_answer(proposal, decision)
    return answers
