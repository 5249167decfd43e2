"""Model fallback, recorded in the trace: the agent's middleware and the summariser's model.

``ModelFallbackMiddleware`` covers the agent's own model calls (:class:`TracedModelFallback`
records each fallback it takes); the summariser calls its model directly, so it gets the
same fallback chain through :class:`FallbackChatModel`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import ModelFallbackMiddleware, ModelRequest, ModelResponse
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from copilot.tracing import model_labels, trace_event

logger = logging.getLogger(__name__)


def _fell_back(failed: BaseChatModel, error: Exception, to: BaseChatModel, where: str) -> None:
    source, target = model_labels([failed, to])
    trace_event("fallback", failed=source, error=type(error).__name__, to=target, caller=where)


class TracedModelFallback(ModelFallbackMiddleware):
    """``ModelFallbackMiddleware`` that records each fallback it takes (which model failed,
    how, and which one it tried next) in the trace."""

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage:
        tried: list[tuple[BaseChatModel, Exception | None]] = []

        async def attempt(req: ModelRequest[Any]) -> ModelResponse[Any]:
            if tried and tried[-1][1] is not None:
                _fell_back(tried[-1][0], tried[-1][1], req.model, "agent")
            tried.append((req.model, None))
            try:
                return await handler(req)
            except Exception as exc:
                tried[-1] = (tried[-1][0], exc)
                raise

        return await super().awrap_model_call(request, attempt)


class FallbackChatModel(BaseChatModel):
    """Answers with the first of ``models`` that does not raise."""

    models: list[BaseChatModel]

    @property
    def _llm_type(self) -> str:
        return "fallback:" + ",".join(model_labels(self.models))

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # Each model is called through its public ``invoke`` (its own callbacks come from
        # the run's context, as for any runnable called inside a run).
        last: Exception | None = None
        for model in self.models:
            try:
                return _result(model.invoke(messages, stop=stop, **kwargs))
            except Exception as exc:  # noqa: BLE001 - any provider failure is what fallback is for
                logger.warning("model %s failed, trying the next: %s", _label(model), exc)
                last = exc
        assert last is not None
        raise last

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        last: Exception | None = None
        for position, model in enumerate(self.models):
            if last is not None:
                _fell_back(self.models[position - 1], last, model, "summary")
            try:
                return _result(await model.ainvoke(messages, stop=stop, **kwargs))
            except Exception as exc:  # noqa: BLE001 - any provider failure is what fallback is for
                logger.warning("model %s failed, trying the next: %s", _label(model), exc)
                last = exc
        assert last is not None
        raise last


def _label(model: BaseChatModel) -> str:
    [label] = model_labels([model])
    return label


def _result(message: BaseMessage) -> ChatResult:
    return ChatResult(generations=[ChatGeneration(message=message)])


def with_fallbacks(model: BaseChatModel, fallbacks: Sequence[BaseChatModel]) -> BaseChatModel:
    """``model`` itself when there are no fallbacks, else a :class:`FallbackChatModel`."""
    return FallbackChatModel(models=[model, *fallbacks]) if fallbacks else model
