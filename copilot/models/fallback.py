"""A chat model that tries several models in order: for helpers outside the model node.

``ModelFallbackMiddleware`` covers the agent's own model calls; the summariser calls its
model directly, so it gets the same fallback chain through this wrapper.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult

logger = logging.getLogger(__name__)


class FallbackChatModel(BaseChatModel):
    """Answers with the first of ``models`` that does not raise."""

    models: list[BaseChatModel]

    @property
    def _llm_type(self) -> str:
        return "fallback:" + ",".join(m._llm_type for m in self.models)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        last: Exception | None = None
        for model in self.models:
            try:
                return model._generate(messages, stop=stop, **kwargs)
            except Exception as exc:  # noqa: BLE001 - any provider failure is what fallback is for
                logger.warning("model %s failed, trying the next: %s", model._llm_type, exc)
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
        for model in self.models:
            try:
                return await model._agenerate(messages, stop=stop, **kwargs)
            except Exception as exc:  # noqa: BLE001 - any provider failure is what fallback is for
                logger.warning("model %s failed, trying the next: %s", model._llm_type, exc)
                last = exc
        assert last is not None
        raise last


def with_fallbacks(model: BaseChatModel, fallbacks: Sequence[BaseChatModel]) -> BaseChatModel:
    """``model`` itself when there are no fallbacks, else a :class:`FallbackChatModel`."""
    return FallbackChatModel(models=[model, *fallbacks]) if fallbacks else model
