"""What a run needs at hand but must never persist: the rep, their tokens, live connections.

LangGraph passes this as the run's ``context`` (not state), so nothing here is
checkpointed; tokens stay inside the broker and the HTTP clients built from it. The
agent graph is compiled once per process; everything that belongs to one rep's run
comes through here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcp import ClientSession
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from copilot.auth.tokens import TokenBroker
from copilot.clock import Clock, system_clock
from copilot.identity import RepIdentity
from copilot.posting import PostingSettings
from copilot.settings import Settings
from copilot.tools.crm_client import CrmGateway, open_crm_session, read_tool_definitions
from copilot.tools.session_host import SessionHost, SessionOpener
from copilot.tools.session_pool import CrmSessionPool, PooledSession, TokenOpener


class PendingWrite(Protocol):
    """A proposal waiting for a decision, as far as what waits is read (a
    :class:`copilot.turns.Proposal` is one)."""

    @property
    def tool_call_id(self) -> str: ...

    @property
    def tool(self) -> str: ...

    @property
    def record(self) -> Mapping[str, Any] | None: ...


class WaitingProposals(Protocol):
    """What waits for a rep on one of their threads, read without touching the thread
    (:meth:`copilot.runner.CopilotService.waiting`): the digest and the waiting-approvals tool read it."""

    async def waiting(self, identity: RepIdentity, thread_id: str) -> Sequence[PendingWrite]: ...


@dataclass
class AgentContext:
    """The run context handed to middleware and tools."""

    settings: Settings
    identity: RepIdentity
    thread_id: str
    tokens: TokenBroker = field(repr=False)
    pool: AsyncConnectionPool[AsyncConnection[DictRow]] = field(repr=False)
    crm: CrmGateway = field(repr=False)
    """The run's read session (``crm.read`` token), opened on first use."""
    crm_write: CrmGateway = field(repr=False)
    """The run's write session (``crm.write`` token), opened on first use: only the write
    guard's executors, after an approval, ever use it."""
    acting_for: RepIdentity | None = None
    """The rep whose proposals this run decides when ``identity`` decides them through an
    approval delegation (``copilot/delegation.py``); None when the rep acts for themself.
    Tokens and sessions stay ``identity``'s own: the CRM sees the delegate."""

    clock: Clock = field(default=system_clock, repr=False)
    """The service's clock: "now" for the run (the date the model is told, undo windows,
    audit timestamps). A test pins it; production reads the wall clock."""
    proposals: WaitingProposals | None = field(default=None, repr=False)
    """What waits on the rep's other threads (the runner): the waiting-approvals and digest
    tools read it; ``None`` where no runner is behind the run (a bare agent in a test)."""
    posting: PostingSettings | None = field(default=None, repr=False)
    """Where the rep's brief and digest settings are kept (the Teams bot's); ``None`` where no
    bot is behind the service (the terminal chat): the settings tool then says where to say it."""

    @property
    def owner(self) -> RepIdentity:
        """Whose thread and writes these are: the rep acted for, else the rep acting."""
        return self.acting_for or self.identity


def _token_opener(settings: Settings) -> TokenOpener:
    @asynccontextmanager
    async def open_session(token: str) -> AsyncIterator[ClientSession]:
        async with open_crm_session(settings, token) as session:
            # The MCP client lists the server's tools after a call whose output schema it
            # has not seen; two parallel first calls would each list them. Once, up front.
            await read_tool_definitions(session)
            yield session

    return open_session


def _crm_opener(settings: Settings, tokens: TokenBroker, *, write: bool) -> SessionOpener:
    opened_with = _token_opener(settings)

    @asynccontextmanager
    async def open_session() -> AsyncIterator[ClientSession]:
        async with opened_with(await tokens.crm_token(write=write)) as session:
            yield session

    return open_session


def crm_gateway(
    stack: AsyncExitStack,
    settings: Settings,
    tokens: TokenBroker,
    *,
    write: bool,
    sessions: CrmSessionPool | None = None,
) -> CrmGateway:
    """A CRM session as the rep (``crm.write`` or ``crm.read`` token), opened on first use;
    for a run, or the copilot's own direct reads. With ``sessions`` it is the process's kept
    session for the rep's token (given back when ``stack`` closes), else one of its own
    (closed when ``stack`` closes)."""
    name = "crm.write" if write else "crm.read"
    source: PooledSession | SessionHost
    if sessions is not None:

        async def token() -> str:
            return await tokens.crm_token(write=write)

        source = PooledSession(sessions, token, _token_opener(settings), name=name)
    else:
        source = SessionHost(_crm_opener(settings, tokens, write=write), name=name)
    stack.push_async_callback(source.aclose)
    return CrmGateway(source)


async def run_context(
    stack: AsyncExitStack,
    *,
    settings: Settings,
    identity: RepIdentity,
    thread_id: str,
    tokens: TokenBroker,
    pool: AsyncConnectionPool[AsyncConnection[DictRow]],
    sessions: CrmSessionPool | None = None,
    acting_for: RepIdentity | None = None,
    clock: Clock = system_clock,
    proposals: WaitingProposals | None = None,
    posting: PostingSettings | None = None,
) -> AgentContext:
    """The context of one run; its sessions are closed (or given back to ``sessions``, the
    process's kept ones) when ``stack`` closes. ``acting_for``: see
    :attr:`AgentContext.acting_for`."""
    return AgentContext(
        settings=settings,
        identity=identity,
        thread_id=thread_id,
        tokens=tokens,
        pool=pool,
        crm=crm_gateway(stack, settings, tokens, write=False, sessions=sessions),
        crm_write=crm_gateway(stack, settings, tokens, write=True, sessions=sessions),
        acting_for=acting_for,
        clock=clock,
        proposals=proposals,
        posting=posting,
    )
