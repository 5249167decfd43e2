"""Tool call ids are the copilot's, never the model's: unique in every thread.

An approval is keyed by its tool call id (the HITL interrupt, the card, the idempotency
key ``thread_id:tool_call_id``). A provider, an adapter or an injected model may emit
two calls with one id in a message, or reuse an id from an earlier turn (some local
OpenAI-compatible servers number them ``call_0``, ``call_1`` per message). Two calls
sharing an id let a rep approve one and get the other executed. So every tool call of
every model response gets a fresh random id before anything else (snapshot, approval,
tools) sees the message; the model sees those ids from then on.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage


def new_tool_call_id() -> str:
    """A random tool call id (URL-safe, never starting with ``-``)."""
    return "call_" + secrets.token_hex(12)


def rekey(message: AIMessage) -> AIMessage:
    """``message`` with a fresh id on every tool call (and on the provider's raw copy)."""
    if not message.tool_calls and not message.invalid_tool_calls:
        return message
    tool_calls = [{**call, "id": new_tool_call_id()} for call in message.tool_calls]
    invalid = [{**call, "id": new_tool_call_id()} for call in message.invalid_tool_calls]
    additional = dict(message.additional_kwargs)
    raw = additional.get("tool_calls")
    if isinstance(raw, list) and len(raw) == len(tool_calls):
        # Keep the provider-format copy consistent with the parsed calls.
        additional["tool_calls"] = [
            {**item, "id": call["id"]} if isinstance(item, dict) else item
            for item, call in zip(raw, tool_calls, strict=True)
        ]
    elif raw is not None:
        additional.pop("tool_calls")
    return message.model_copy(
        update={"tool_calls": tool_calls, "invalid_tool_calls": invalid, "additional_kwargs": additional}
    )


def _rekey_all(messages: list[BaseMessage]) -> list[BaseMessage]:
    return [rekey(m) if isinstance(m, AIMessage) else m for m in messages]


Response = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]


def _rekey_response(response: Response) -> Response:
    if isinstance(response, AIMessage):
        return rekey(response)
    if isinstance(response, ExtendedModelResponse):
        inner = response.model_response
        return ExtendedModelResponse(
            model_response=ModelResponse(
                result=_rekey_all(inner.result), structured_response=inner.structured_response
            ),
            command=response.command,
        )
    return ModelResponse(result=_rekey_all(response.result), structured_response=response.structured_response)


class ToolCallIdMiddleware(AgentMiddleware[Any, Any, Any]):
    """Replaces the model's tool call ids with fresh random ones on every model response."""

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> Response:
        return _rekey_response(handler(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Response:
        return _rekey_response(await handler(request))
