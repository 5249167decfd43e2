"""First in the chain: make sure the run knows who it is for, and tell the model (no secrets)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import SystemMessage
from langgraph.runtime import Runtime

from copilot.context import AgentContext
from copilot.errors import ConfigurationError


class RepContextMiddleware(AgentMiddleware[Any, AgentContext, Any]):
    """Refuses runs without a rep context; adds the rep's name and today's date to the prompt."""

    async def abefore_agent(
        self, state: AgentState[Any], runtime: Runtime[AgentContext]
    ) -> dict[str, Any] | None:
        if not isinstance(runtime.context, AgentContext):
            raise ConfigurationError("the agent must run with an AgentContext (rep identity and tokens)")
        return None

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        ctx: AgentContext = request.runtime.context
        note = f"\n\nYou are assisting {ctx.identity.name or 'a sales rep'}. Today is {ctx.clock().date().isoformat()}."
        base = request.system_message.content if request.system_message is not None else ""
        return await handler(request.override(system_message=SystemMessage(content=f"{base}{note}")))
