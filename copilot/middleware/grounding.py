"""The grounding gate: every model's answer grounded in this run's reads, or honestly not given.

Wraps each model call (inside the tool-call ids, outside the fallback, so a retry may be
answered by whichever model is up) and applies :func:`copilot.grounding.rules.judge` to
what came back (invariant 8):

* tool calls written as text, for a tool bound in this run and with arguments its schema
  accepts, become real tool calls: the tool node, the approval interrupt for writes and the
  write guard see exactly what a structured call would give them;
* calls that cannot be used (an unknown tool, unreadable JSON, arguments the schema refuses,
  a call repeated with the same arguments) go back to the model as tool errors;
* a final answer from a run with no read is checked: the model says, as a forced tool call,
  whether it states CRM facts (so greetings, help and small talk in any language pass); if
  it does, the model is asked once more with ``tool_choice="required"``;
* an answer that cites none of the records this run's reads returned is asked for once more.

Each extra ask counts against the model-call limit (the counts in state are raised by the
calls made here) and is never made past it. When the correction is spent, the rep gets
:data:`~copilot.grounding.COULD_NOT_LOOK_UP`, a ``grounding`` record on the message (the
runner's ``ungrounded`` notice) and an ``ungrounded`` trace event — never the raw text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Collection, Generator, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool
from langgraph.types import Command

from copilot.citations import message_text
from copilot.grounding import COULD_NOT_LOOK_UP
from copilot.grounding.rules import (
    FACTS_CHECK_SYSTEM,
    FACTS_CHECK_TOOL,
    NO_READ_NOTE,
    ONE_CORRECTION,
    REQUEST_CHECK_SYSTEM,
    REQUEST_CHECK_TOOL,
    Accept,
    CheckFacts,
    CheckRequest,
    Correct,
    Reason,
    RunSoFar,
    asks_for_change,
    facts_check_prompt,
    facts_check_tool,
    judge,
    request_check_tool,
    states_facts,
)
from copilot.grounding.shown_text import capitalised_words, content_words
from copilot.tracing import model_labels, trace_event

MAX_CORRECTIONS = 2
"""Extra asks per model call at most: one regeneration of an ungrounded answer, and room for
a model that first wrote an unusable call as text."""

Response = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]


def _message(response: Any) -> AIMessage:
    if isinstance(response, AIMessage):
        return response
    if isinstance(response, ExtendedModelResponse):
        response = response.model_response
    messages = [m for m in response.result if isinstance(m, AIMessage)]
    return messages[-1] if messages else AIMessage(content="")


class GroundingMiddleware(AgentMiddleware[Any, Any, Any]):
    """Recovers or refuses tool calls written as text, and regenerates or refuses ungrounded answers."""

    def __init__(
        self,
        *,
        read_tools: Collection[str],
        run_limit: int,
        thread_limit: int | None,
        fallbacks: Sequence[BaseChatModel] = (),
        rep_facing: Collection[str] = (),
    ) -> None:
        super().__init__()
        self.read_tools = frozenset(read_tools)
        self.run_limit = run_limit
        self.thread_limit = thread_limit
        self.rep_facing = tuple(rep_facing)
        """Tool error texts written for the rep (a reply may repeat them)."""
        self.fallbacks = tuple(fallbacks)
        """Models that get the call, in order, when the gate would refuse the primary's answer."""

    def _left(self, request: ModelRequest[Any]) -> int:
        """Model calls this run may still make (the limit middleware counted this one already)."""
        state: dict[str, Any] = dict(request.state)
        left = self.run_limit - int(state.get("run_model_call_count", 1))
        if self.thread_limit is not None:
            left = min(left, self.thread_limit - int(state.get("thread_model_call_count", 1)))
        return max(0, left)

    def _drive(self, request: ModelRequest[Any]) -> Generator[ModelRequest[Any], Any, tuple[Response, int]]:
        """The gate as a conversation with the model: yields each request, receives its
        response, and returns what the model node returns with how many extra calls it made.

        When the gate would refuse, the next fallback model (if any, and if the call limit
        allows) is asked the same request from the start, before the rep is refused."""
        left = self._left(request)
        extra = 0
        models = [request.model, *(m for m in self.fallbacks if m is not request.model)]
        for position, model in enumerate(models):
            asked = request if position == 0 else request.override(model=model)
            if position:
                failed, to = model_labels([models[position - 1], model])
                trace_event("gate_fallback", failed=failed, to=to)
                extra += 1
            response, extra, refused = yield from self._judged(asked, left, extra)
            if refused is None:
                if position:
                    response = _marked(response, {"fallback_model": model_labels([model])[0]})
                return response, extra
            if position + 1 >= len(models) or extra >= left:
                return _refused(refused, model_labels([model])[0]), extra
        raise AssertionError("unreachable")

    def _judged(
        self, request: ModelRequest[Any], left: int, extra: int
    ) -> Generator[ModelRequest[Any], Any, tuple[Response, int, Reason | None]]:
        """One model's turn at the call: its response judged and corrected until accepted
        (reason ``None``) or refused (the reason)."""
        tools = {
            (t.name if isinstance(t, BaseTool) else str(t.get("function", t).get("name"))): t
            for t in request.tools
        }
        system = request.system_message.text if request.system_message is not None else ""
        run = RunSoFar(
            request.messages, tools, self.read_tools & tools.keys(), system=system, rep_facing=self.rep_facing
        )
        corrections = 0
        last_reason: Reason | None = None
        response = yield request
        while True:
            message = _message(response)
            verdict = judge(message, run)
            if isinstance(verdict, CheckFacts):
                if _names_what_was_asked(message_text(message), run.question()):
                    # It speaks of what the rep named with nothing read: a fact for certain,
                    # so the check could not change the outcome and is not asked.
                    grounded = False
                elif extra < left:
                    extra += 1
                    check = yield request.override(
                        messages=[HumanMessage(facts_check_prompt(run.question(), message_text(message)))],
                        system_message=SystemMessage(FACTS_CHECK_SYSTEM),
                        tools=[facts_check_tool()],
                        tool_choice=FACTS_CHECK_TOOL,
                    )
                    grounded = not states_facts(_message(check))
                else:
                    grounded = False
                verdict = (
                    Accept(message) if grounded else Correct("no_read", note=NO_READ_NOTE, force_tool=True)
                )
            if isinstance(verdict, CheckRequest):
                if extra < left:
                    extra += 1
                    check = yield request.override(
                        messages=[HumanMessage(run.question())],
                        system_message=SystemMessage(REQUEST_CHECK_SYSTEM),
                        tools=[request_check_tool()],
                        tool_choice=REQUEST_CHECK_TOOL,
                    )
                    asked_change = asks_for_change(_message(check))
                else:
                    asked_change = True  # the approval card still stands between it and the CRM
                if not asked_change:
                    trace_event("unrequested_write", writes=len(verdict.writes))
                run = dataclasses.replace(run, request_checked=asked_change)
                verdict = judge(message, run)
                if isinstance(verdict, Accept) and len(verdict.message.tool_calls) < len(message.tool_calls):
                    verdict = Accept(
                        _with_metadata(verdict.message, {"unrequested_writes_dropped": 1}),
                        recovered=verdict.recovered,
                    )
            assert not isinstance(verdict, CheckFacts | CheckRequest)
            if isinstance(verdict, Accept):
                return _accepted(response, verdict, last_reason), extra, None
            last_reason = verdict.reason
            if (
                corrections >= MAX_CORRECTIONS
                or extra >= left
                or (verdict.reason in ONE_CORRECTION and corrections >= 1)
            ):
                if verdict.otherwise is not None:
                    return _with_message(response, verdict.otherwise), extra, None
                return response, extra, verdict.reason
            corrections += 1
            extra += 1
            response = yield _corrected(request, verdict)

    def _finish(self, request: ModelRequest[Any], result: Response, extra: int) -> Response:
        """``result``, with the extra model calls added to the counts the limit middleware keeps."""
        if not extra:
            return result
        state: dict[str, Any] = dict(request.state)
        command: Command[Any] = Command(
            update={
                "run_model_call_count": int(state.get("run_model_call_count", 0)) + extra,
                "thread_model_call_count": int(state.get("thread_model_call_count", 0)) + extra,
            }
        )
        base = result.model_response if isinstance(result, ExtendedModelResponse) else result
        if isinstance(base, AIMessage):
            base = ModelResponse(result=[base])
        return ExtendedModelResponse(model_response=base, command=command)

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> Response:
        drive = self._drive(request)
        asked = next(drive)
        try:
            while True:
                asked = drive.send(handler(asked))
        except StopIteration as done:
            return self._finish(request, *done.value)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Response:
        drive = self._drive(request)
        asked = next(drive)
        try:
            while True:
                asked = drive.send(await handler(asked))
        except StopIteration as done:
            return self._finish(request, *done.value)


def _names_what_was_asked(reply: str, question: str) -> bool:
    """Whether a reply repeats a capitalised name the rep's message used (after its first word)."""
    return bool(capitalised_words(question) & content_words(reply))


def _with_metadata(message: AIMessage, grounding: dict[str, Any]) -> AIMessage:
    merged = {**(message.response_metadata.get("grounding") or {}), **grounding}
    return message.model_copy(
        update={"response_metadata": {**message.response_metadata, "grounding": merged}}
    )


def _marked(response: Response, grounding: dict[str, Any]) -> Response:
    return _with_message(response, _with_metadata(_message(response), grounding))


def _accepted(response: Any, verdict: Accept, reason: Reason | None) -> Response:
    message = verdict.message
    record: dict[str, Any] | None = None
    if verdict.recovered:
        record = {"outcome": "recovered", "calls": verdict.recovered}
    elif reason is not None:
        record = {"outcome": "regenerated", "reason": reason}
    if record is not None:
        message = _with_metadata(message, record)
    return _with_message(response, message)


def _refused(reason: Reason, model: str) -> Response:
    trace_event("ungrounded", reason=reason, model=model)
    message = AIMessage(
        content=COULD_NOT_LOOK_UP,
        response_metadata={"grounding": {"outcome": "refused", "reason": reason, "model": model}},
    )
    return ModelResponse(result=[message])


def _corrected(request: ModelRequest[Any], verdict: Correct) -> ModelRequest[Any]:
    """The request asked again: the tool-error exchange appended, or the reason in the system prompt."""
    overrides: dict[str, Any] = {}
    if verdict.feedback:
        overrides["messages"] = [*request.messages, *verdict.feedback]
    if verdict.note:
        base = request.system_message.text if request.system_message is not None else ""
        overrides["system_message"] = SystemMessage(f"{base}\n\n{verdict.note}".strip())
    if verdict.force_tool:
        overrides["tool_choice"] = "required"
    return request.override(**overrides)


def _with_message(response: Any, message: AIMessage) -> Response:
    if isinstance(response, AIMessage):
        return message
    if isinstance(response, ExtendedModelResponse):
        inner = response.model_response
        return ExtendedModelResponse(
            model_response=ModelResponse(
                result=_replaced(inner.result, message), structured_response=inner.structured_response
            ),
            command=response.command,
        )
    return ModelResponse(
        result=_replaced(response.result, message), structured_response=response.structured_response
    )


def _replaced(result: list[Any], message: AIMessage) -> list[Any]:
    indexes = [i for i, m in enumerate(result) if isinstance(m, AIMessage)]
    if not indexes:
        return [*result, message]
    out = list(result)
    out[indexes[-1]] = message
    return out
