"""Bounded runs: a model-call limit per run and per thread that ends with a helpful answer."""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelCallLimitMiddleware
from langchain.agents.middleware.types import hook_config
from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from copilot.tracing import trace_event

LIMIT_MESSAGE = (
    "I stopped here because this request needed more steps than I'm allowed to take in one go. "
    "Nothing was changed in the CRM. Try asking for one thing at a time."
)
"""The per-run limit's stop: about one request, never about how much the rep has used the copilot."""

THREAD_LIMIT_MESSAGE = (
    "I stopped before another step because this part of our conversation has reached its length. "
    "Anything you approved shows its outcome on its card. Ask me again and I'll carry on "
    "from what we were just discussing."
)
"""The per-thread limit's stop. A Teams conversation moves to a new thread before it could
meet it (``copilot/rotation.py``), so only a run on an old thread (a late decision round
that chained into more) or an explicit ``--thread`` can; it never says to start over."""


def _softened(update: dict[str, Any]) -> bool:
    messages = update.get("messages") or []
    return any(isinstance(m, AIMessage) and m.response_metadata.get("limit_reached") for m in messages)


class FriendlyModelCallLimit(ModelCallLimitMiddleware):
    """``ModelCallLimitMiddleware`` whose stop message is written for the rep, not a developer,
    and which counts a model call as it lets it through, in its one ``before_model`` step.

    LangChain's counts after the call, in an ``after_model`` hook: one more graph step per
    model call (each step is LangGraph bookkeeping, a good part of a short turn's CPU). The
    count is the same: the model step runs right after, and a model step that fails ends the
    run either way.
    """

    # No after-model step (create_agent adds a node only for hooks a class overrides).
    after_model = AgentMiddleware.after_model
    aafter_model = AgentMiddleware.aafter_model

    @staticmethod
    def _counted(state: Any) -> dict[str, Any]:
        return {
            "thread_model_call_count": state.get("thread_model_call_count", 0) + 1,
            "run_model_call_count": state.get("run_model_call_count", 0) + 1,
        }

    def _soften(self, update: dict[str, Any] | None, state: Any) -> dict[str, Any] | None:
        if update is None:
            return self._counted(state)
        if update.get("jump_to") == "end":
            if not _softened(update):  # the async hook may hand over the sync hook's update
                trace_event("model_call_limit", run_limit=self.run_limit, thread_limit=self.thread_limit)
            thread_hit = int(state.get("thread_model_call_count", 0)) >= (self.thread_limit or 0) > 0
            text = THREAD_LIMIT_MESSAGE if thread_hit else LIMIT_MESSAGE
            update = {
                **update,
                "messages": [AIMessage(content=text, response_metadata={"limit_reached": True})],
            }
        return update

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._soften(super().before_model(state, runtime), state)

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._soften(await super().abefore_model(state, runtime), state)
