"""Bounded runs: a model-call limit per run and per thread that ends with a helpful answer."""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware import ModelCallLimitMiddleware
from langchain.agents.middleware.types import hook_config
from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from copilot.tracing import trace_event

LIMIT_MESSAGE = (
    "I stopped here because this request needed more steps than I'm allowed to take in one go. "
    "Nothing was changed in the CRM. Try asking for one thing at a time, or start a new conversation."
)


def _softened(update: dict[str, Any]) -> bool:
    messages = update.get("messages") or []
    return any(isinstance(m, AIMessage) and m.response_metadata.get("limit_reached") for m in messages)


class FriendlyModelCallLimit(ModelCallLimitMiddleware):
    """``ModelCallLimitMiddleware`` whose stop message is written for the rep, not a developer."""

    def _soften(self, update: dict[str, Any] | None) -> dict[str, Any] | None:
        if update and update.get("jump_to") == "end":
            if not _softened(update):  # the async hook may hand over the sync hook's update
                trace_event("model_call_limit", run_limit=self.run_limit, thread_limit=self.thread_limit)
            update = {
                **update,
                "messages": [AIMessage(content=LIMIT_MESSAGE, response_metadata={"limit_reached": True})],
            }
        return update

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._soften(super().before_model(state, runtime))

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._soften(await super().abefore_model(state, runtime))
