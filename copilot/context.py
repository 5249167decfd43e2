"""What a run needs at hand but must never persist: the rep, their tokens, live connections.

LangGraph passes this as the run's ``context`` (not state), so nothing here is
checkpointed; tokens stay inside the broker and the HTTP clients built from it.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass, field

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from copilot.auth.tokens import TokenBroker
from copilot.errors import CrmUnavailable
from copilot.identity import RepIdentity
from copilot.settings import Settings
from copilot.tools.crm_client import CrmGateway, open_crm_session


@dataclass
class AgentContext:
    """The run context handed to middleware and tools."""

    settings: Settings
    identity: RepIdentity
    thread_id: str
    tokens: TokenBroker = field(repr=False)
    crm: CrmGateway = field(repr=False)
    """The turn's read session (``crm.read`` token)."""
    pool: AsyncConnectionPool[AsyncConnection[DictRow]] = field(repr=False)
    exit_stack: AsyncExitStack = field(repr=False)
    _writer: CrmGateway | None = field(default=None, init=False, repr=False)

    async def open_writer(self) -> None:
        """Open the CRM session with the write scope (only to execute approved writes).

        Called by the runner in the turn's own task: MCP sessions must be closed by the
        task that opened them, and tools run in tasks of their own.
        """
        if self._writer is None:
            token = await self.tokens.crm_token(write=True)
            session = await self.exit_stack.enter_async_context(open_crm_session(self.settings, token))
            self._writer = CrmGateway(session)

    async def crm_writer(self) -> CrmGateway:
        """The write-scoped CRM session opened by :meth:`open_writer`."""
        if self._writer is None:
            raise CrmUnavailable("no CRM write session is open for this turn")
        return self._writer
