"""The baseline: a bare LangChain agent doing the same work the way the LangChain docs show.

Per turn it opens one MCP session to the same CRM with the same rep's token (the same
on-behalf-of broker type, its own instance), loads the CRM's tools from it with
``langchain_mcp_adapters.load_mcp_tools``, builds ``create_agent`` with the same scripted
model and the same PostgreSQL checkpointer (``AsyncPostgresSaver``), and invokes it. For a
write, ``HumanInTheLoopMiddleware`` interrupts the CRM's own MCP write tool (the reference
CRM's ``upsert_activity``; Dataverse's ``create_record``, the bare way to write there, where the
copilot writes through the Web API with ``If-Match`` and an alternate key) and the click resumes
it with ``Command(resume=...)``, writing through MCP. No middleware chain,
no thread ownership, no approval snapshot, no write guard, no audit; LangGraph's default
durability (``"async"``; the copilot checkpoints with ``"exit"``).
"""

from __future__ import annotations

import ssl
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
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
from copilot.settings import CrmKind, Settings

WRITE_TOOLS: dict[CrmKind, str] = {"reference": "upsert_activity", "dataverse": "create_record"}
"""The CRM's own MCP write tool the bare agent is given (interrupted for approval), per profile."""


class BaselineFailed(RuntimeError):
    """The bare agent did not do what the scenario expects (the measurement would be void)."""


@dataclass(frozen=True)
class PendingWrite:
    thread_id: str
    interrupt_id: str


def _trusting(ca_file: str) -> Any:
    """An httpx client factory as MCP's default (``create_mcp_http_client``: per-session client,
    30 s timeout, 300 s read), trusting ``ca_file``: what a bare client of an HTTPS server with
    a private CA adds, and nothing of the copilot's shared connection pool."""
    context = ssl.create_default_context(cafile=ca_file)

    def factory(
        headers: dict[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
        auth: httpx.Auth | None = None,
    ) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            headers=headers,
            timeout=timeout if timeout is not None else httpx.Timeout(30.0, read=300.0),
            auth=auth,
            verify=context,
        )

    return factory


class BareAgent:
    """A bare ``create_agent`` on the CRM's MCP tools, rebuilt on each turn's session."""

    def __init__(
        self, settings: Settings, saver: AsyncPostgresSaver, model: BenchChatModel, broker: OboTokenBroker
    ):
        self.settings = settings
        self.saver = saver
        self.model = model
        self.broker = broker
        self.write_tool = WRITE_TOOLS[settings.crm_kind]
        ca_file = settings.crm_ca_file if settings.crm_kind == "dataverse" else None
        # Dataverse is HTTPS (the sandbox's org has a private CA; a real org needs no bundle).
        self._client_factory = _trusting(ca_file) if ca_file is not None else None

    @asynccontextmanager
    async def _tools(self, *, write: bool) -> AsyncIterator[list[BaseTool]]:
        token = await self.broker.crm_token(write=write)
        connection: dict[str, Any] = {
            "transport": "streamable_http",
            "url": self.settings.crm_mcp_url,
            "headers": {"Authorization": f"Bearer {token}"},
        }
        if self._client_factory is not None:
            connection["httpx_client_factory"] = self._client_factory
        client = MultiServerMCPClient({"crm": connection})  # type: ignore[dict-item]
        async with client.session("crm") as session:
            tools = await load_mcp_tools(session)
            yield [
                t
                for t in tools
                if (t.metadata or {}).get("readOnlyHint") is True or (write and t.name == self.write_tool)
            ]

    def _agent(self, tools: list[BaseTool], *, write: bool) -> Any:
        middleware = (
            [HumanInTheLoopMiddleware(interrupt_on={self.write_tool: True}, interrupt_mode="per_call")]
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
        results = [m for m in state["messages"] if isinstance(m, ToolMessage) and m.name == self.write_tool]
        if not results or results[-1].status == "error":
            raise BaselineFailed(f"the bare write failed: {results[-1:]!r}")
