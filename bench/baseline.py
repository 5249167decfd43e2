"""The baseline: a bare LangChain agent doing the same work the way the LangChain docs show.

Per turn it opens one MCP session to the same CRM with the same rep's token (the same
on-behalf-of broker type, its own instance), loads the CRM's tools from it with
``langchain_mcp_adapters.load_mcp_tools``, builds ``create_agent`` with the same scripted
model and the same PostgreSQL checkpointer (``AsyncPostgresSaver``), and invokes it. For a
write, ``HumanInTheLoopMiddleware`` interrupts the CRM's own ``upsert_activity`` and the
click resumes it with ``Command(resume=...)``, writing through MCP. No middleware chain,
no thread ownership, no approval snapshot, no write guard, no audit; LangGraph's default
durability (``"async"``; the copilot checkpoints with ``"exit"``).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.types import Command

from bench.model import BenchChatModel
from copilot.auth.tokens import OboTokenBroker
from copilot.settings import Settings

WRITE_TOOL = "upsert_activity"
"""The CRM's own MCP write tool the bare agent is given (interrupted for approval)."""


class BaselineFailed(RuntimeError):
    """The bare agent did not do what the scenario expects (the measurement would be void)."""


@dataclass(frozen=True)
class PendingWrite:
    thread_id: str
    interrupt_id: str


class BareAgent:
    """A bare ``create_agent`` on the CRM's MCP tools, rebuilt on each turn's session."""

    def __init__(
        self, settings: Settings, saver: AsyncPostgresSaver, model: BenchChatModel, broker: OboTokenBroker
    ):
        self.settings = settings
        self.saver = saver
        self.model = model
        self.broker = broker

    @asynccontextmanager
    async def _tools(self, *, write: bool) -> AsyncIterator[list[BaseTool]]:
        token = await self.broker.crm_token(write=write)
        client = MultiServerMCPClient(
            {
                "crm": {
                    "transport": "streamable_http",
                    "url": self.settings.crm_mcp_url,
                    "headers": {"Authorization": f"Bearer {token}"},
                }
            }
        )
        async with client.session("crm") as session:
            tools = await load_mcp_tools(session)
            yield [
                t
                for t in tools
                if (t.metadata or {}).get("readOnlyHint") is True or (write and t.name == WRITE_TOOL)
            ]

    def _agent(self, tools: list[BaseTool], *, write: bool) -> Any:
        middleware = (
            [HumanInTheLoopMiddleware(interrupt_on={WRITE_TOOL: True}, interrupt_mode="per_call")]
            if write
            else []
        )
        return create_agent(self.model, tools, middleware=middleware, checkpointer=self.saver)

    @staticmethod
    def _config(thread_id: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread_id}}

    async def turn(self, question: str) -> str:
        """One question on a new thread; the answer."""
        async with self._tools(write=False) as tools:
            agent = self._agent(tools, write=False)
            state = await agent.ainvoke(
                {"messages": [HumanMessage(question)]}, self._config(f"bare-{uuid.uuid4().hex}")
            )
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or last.tool_calls:
            raise BaselineFailed(f"the bare turn ended without an answer: {last!r}")
        return str(last.content)

    async def propose(self, question: str) -> PendingWrite:
        """A question whose answer is a proposed write; the interrupt waiting for the click."""
        thread_id = f"bare-{uuid.uuid4().hex}"
        async with self._tools(write=True) as tools:
            agent = self._agent(tools, write=True)
            config = self._config(thread_id)
            await agent.ainvoke({"messages": [HumanMessage(question)]}, config)
            interrupts = (await agent.aget_state(config)).interrupts
        if len(interrupts) != 1:
            raise BaselineFailed(f"expected one interrupt, got {len(interrupts)}")
        return PendingWrite(thread_id, interrupts[0].id)

    async def approve(self, pending: PendingWrite) -> None:
        """The click: resume the interrupted write with an approval; it writes through MCP."""
        async with self._tools(write=True) as tools:
            agent = self._agent(tools, write=True)
            state = await agent.ainvoke(
                Command(resume={pending.interrupt_id: {"type": "approve"}}), self._config(pending.thread_id)
            )
        results = [m for m in state["messages"] if isinstance(m, ToolMessage) and m.name == WRITE_TOOL]
        if not results or results[-1].status == "error":
            raise BaselineFailed(f"the bare write failed: {results[-1:]!r}")
