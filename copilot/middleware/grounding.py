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

from collections.abc import Awaitable, Callable, Collection, Generator
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool
from langgraph.types import Command

from copilot.citations import message_text
from copilot.grounding import COULD_NOT_LOOK_UP
from copilot.grounding.rules import (
    FACTS_CHECK_SYSTEM,
    FACTS_CHECK_TOOL,
    NO_READ_NOTE,
    Accept,
    CheckFacts,
    Correct,
    Reason,
    RunSoFar,
    facts_check_prompt,
    facts_check_tool,
    judge,
    states_facts,
)
from copilot.tracing import trace_event

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


def _latest_question(request: ModelRequest[Any]) -> str:
    for message in reversed(request.messages):
        if isinstance(message, HumanMessage):
            return message_text(message)
    return ""


class GroundingMiddleware(AgentMiddleware[Any, Any, Any]):
    """Recovers or refuses tool calls written as text, and regenerates or refuses ungrounded answers."""

    def __init__(self, *, read_tools: Collection[str], run_limit: int, thread_limit: int | None) -> None:
        super().__init__()
        self.read_tools = frozenset(read_tools)
        self.run_limit = run_limit
        self.thread_limit = thread_limit

    def _left(self, request: ModelRequest[Any]) -> int:
        """Model calls this run may still make (the limit middleware counted this one already)."""
        state: dict[str, Any] = dict(request.state)
        left = self.run_limit - int(state.get("run_model_call_count", 1))
        if self.thread_limit is not None:
            left = min(left, self.thread_limit - int(state.get("thread_model_call_count", 1)))
        return max(0, left)

    def _drive(self, request: ModelRequest[Any]) -> Generator[ModelRequest[Any], Any, tuple[Response, int]]:
        """The gate as a conversation with the model: yields each request, receives its
        response, and returns what the model node returns with how many extra calls it made."""
        tools = {
            (t.name if isinstance(t, BaseTool) else str(t.get("function", t).get("name"))): t
            for t in request.tools
        }
        run = RunSoFar(request.messages, tools, self.read_tools & tools.keys())
        left = self._left(request)
        extra = 0
        corrections = 0
        asked = request
        last_reason: Reason | None = None
        response = yield asked
        while True:
            message = _message(response)
            verdict = judge(message, run)
            if isinstance(verdict, CheckFacts):
                if extra < left:
                    extra += 1
                    check = yield request.override(
                        messages=[
                            HumanMessage(facts_check_prompt(_latest_question(request), message_text(message)))
                        ],
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
            if isinstance(verdict, Accept):
                return _accepted(response, verdict, last_reason), extra
            last_reason = verdict.reason
            if (
                corrections >= MAX_CORRECTIONS
                or extra >= left
                or (verdict.reason in ("no_read", "uncited") and corrections >= 1)
            ):
                if verdict.otherwise is not None:
                    return _with_message(response, verdict.otherwise), extra
                return _refused(verdict.reason), extra
            corrections += 1
            extra += 1
            asked = _corrected(request, verdict)
            response = yield asked

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


def _accepted(response: Any, verdict: Accept, reason: Reason | None) -> Response:
    message = verdict.message
    record: dict[str, Any] | None = None
    if verdict.recovered:
        record = {"outcome": "recovered", "calls": verdict.recovered}
    elif reason is not None:
        record = {"outcome": "regenerated", "reason": reason}
    if record is not None:
        message = message.model_copy(
            update={"response_metadata": {**message.response_metadata, "grounding": record}}
        )
    return _with_message(response, message)


def _refused(reason: Reason) -> Response:
    trace_event("ungrounded", reason=reason)
    message = AIMessage(
        content=COULD_NOT_LOOK_UP, response_metadata={"grounding": {"outcome": "refused", "reason": reason}}
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
