"""Choosing the CRM: ``CRM_KIND`` picks the connector, and the rest of the copilot asks it.

The write tools ask :func:`writer` for a rep's typed writer; briefs, the digest and team
analytics ask :func:`reads` for the rep's typed reads; the runner asks :func:`load_vocabulary`
once per process and :func:`progress_line` how to describe a CRM tool call; ``doctor`` asks
:func:`expected_tools` for the MCP tools the copilot calls by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, assert_never

from copilot.auth.tokens import TokenBroker
from copilot.crm import dataverse, dataverse_reads, reference
from copilot.crm.reads import CrmReads
from copilot.crm.types import CrmWriter
from copilot.errors import CrmUnavailable
from copilot.settings import CrmKind, Settings
from copilot.tools.crm_client import TRANSPORT_ERRORS
from copilot.vocabulary import Vocabulary, crm_identity, current_vocabulary

if TYPE_CHECKING:
    from copilot.context import AgentContext


def writer(ctx: AgentContext, *, write: bool) -> CrmWriter:
    """The run's CRM writer as its rep: with the write token (``write``, only the write guard's
    executors and checks) or the read token (proposal snapshots)."""
    kind: CrmKind = ctx.settings.crm_kind
    match kind:
        case "reference":
            return reference.ReferenceWriter(ctx.crm_write if write else ctx.crm)
        case "dataverse":
            tokens = ctx.tokens

            async def token() -> str:
                return await tokens.crm_token(write=write)

            return dataverse.DataverseWriter(
                dataverse.DataverseConfig.from_settings(ctx.settings), token, current_vocabulary()
            )
        case _:
            assert_never(kind)


def reads(stack: AsyncExitStack, settings: Settings, tokens: TokenBroker) -> CrmReads:
    """The rep's typed CRM reads, with their read token (``crm.read`` / Dataverse's
    ``user_impersonation``), for the copilot's own code: briefs, the digest, team analytics. A
    session it opens is closed with ``stack``."""
    kind: CrmKind = settings.crm_kind
    match kind:
        case "reference":
            # Imported here: the run context imports the MCP client, which the writer's and the
            # vocabulary's callers do not need.
            from copilot.context import crm_gateway

            return reference.ReferenceReads(crm_gateway(stack, settings, tokens, write=False))
        case "dataverse":

            async def token() -> str:
                return await tokens.crm_token(write=False)

            return dataverse_reads.DataverseReads(
                dataverse.DataverseConfig.from_settings(settings),
                token,
                # The runner keeps the vocabulary under this key (copilot.runner).
                crm_identity(kind, settings.crm_url or settings.crm_mcp_url),
            )
        case _:
            assert_never(kind)


def run_reads(ctx: AgentContext) -> CrmReads:
    """The rep's typed CRM reads inside a run (a local read tool's): the run's own read session
    on the reference CRM, the Web API with the run's read token on Dataverse."""
    kind: CrmKind = ctx.settings.crm_kind
    match kind:
        case "reference":
            return reference.ReferenceReads(ctx.crm)
        case "dataverse":
            tokens = ctx.tokens

            async def token() -> str:
                return await tokens.crm_token(write=False)

            return dataverse_reads.DataverseReads(
                dataverse.DataverseConfig.from_settings(ctx.settings),
                token,
                crm_identity(kind, ctx.settings.crm_url or ctx.settings.crm_mcp_url),
            )
        case _:
            assert_never(kind)


def progress_line(name: str, args: Mapping[str, Any], names: Mapping[str, str]) -> str | None:
    """The progress line of a CRM read tool the model called, if a connector knows the tool.

    Only the reference CRM's tools have fixed names; Dataverse's are discovered at run time
    (and may be renamed by the organisation), so they get the caller's generic line.
    """
    return reference.progress_line(name, args, names)


async def load_vocabulary(ctx: AgentContext) -> Vocabulary:
    """The CRM's vocabulary, read as the run's rep (the caller keeps it for the process)."""
    kind: CrmKind = ctx.settings.crm_kind
    match kind:
        case "reference":
            try:
                listed = await (await ctx.crm.session()).list_tools()
            except TRANSPORT_ERRORS as exc:
                raise CrmUnavailable("live CRM data is unavailable: could not list the CRM's tools") from exc
            return reference.vocabulary_from_tools(listed.tools)
        case "dataverse":
            tokens = ctx.tokens

            async def token() -> str:
                return await tokens.crm_token(write=False)

            return await dataverse.load_vocabulary(
                dataverse.DataverseConfig.from_settings(ctx.settings), token
            )
        case _:
            assert_never(kind)


def expected_tools(settings: Settings) -> tuple[frozenset[str], frozenset[str]]:
    """The CRM MCP tools the copilot calls by name: (reads, writes). For ``doctor``.

    Dataverse: none. Its reads are discovered at run time (never named), and its writes go
    through the Web API, not its MCP tools.
    """
    kind: CrmKind = settings.crm_kind
    match kind:
        case "reference":
            return reference.expected_tools()
        case "dataverse":
            return frozenset(), frozenset()
        case _:
            assert_never(kind)
