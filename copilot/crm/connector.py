"""Choosing the CRM: ``CRM_KIND`` picks the connector, and the rest of the copilot asks it.

The write tools ask :func:`writer` for a rep's typed writer, the runner asks
:func:`load_vocabulary` once per process, and ``doctor`` asks :func:`expected_tools` for the
MCP tools the copilot calls by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, assert_never

from copilot.crm import dataverse, reference
from copilot.crm.types import CrmWriter
from copilot.crm.vocabulary import Vocabulary, current_vocabulary
from copilot.errors import CrmUnavailable
from copilot.settings import CrmKind, Settings
from copilot.tools.crm_client import TRANSPORT_ERRORS

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
