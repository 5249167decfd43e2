"""The write-tool registry: one entry per tool that changes anything outside the copilot.

An entry is everything the product knows of one write tool: its argument schema and
title, the record it targets, the backend it writes to (and so the token and session it
needs), the fields a rep may edit, how its proposal is snapshotted, how the write guard
re-checks it at approval, and its executor. Everything else derives from here: the
approval middleware's ``interrupt_on`` and the start-up check, the write guard, the
proposal snapshot, progress wording, the card's field table and edit inputs, the CLI's
proposal table, and the tools the model is offered. Adding a write tool is one entry.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel

from copilot.errors import ConfigurationError, CopilotError
from copilot.tools.compact_schema import compact_json_schema
from copilot.writes.types import Backend, ProposalRecord, WriteOutcome, WritePlan

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from copilot.context import AgentContext

Snapshot = Callable[["AgentContext", "BaseStore | None", dict[str, Any]], Awaitable[ProposalRecord]]
Check = Callable[["AgentContext", WritePlan, ProposalRecord | None], Awaitable[WritePlan | WriteOutcome]]
Execute = Callable[["AgentContext", "BaseStore | None", WritePlan], Awaitable[WriteOutcome]]


class _CompactSchemaTool(StructuredTool):
    """A write tool as the model sees it: its Pydantic schema sent compact
    (:func:`~copilot.tools.compact_schema.compact_json_schema`); the write guard still
    validates every call against the full schema."""

    @property
    def tool_call_schema(self) -> Any:
        schema = self.args_schema
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            return compact_json_schema(schema.model_json_schema())
        return super().tool_call_schema


@dataclass(frozen=True)
class WriteTool:
    """One write tool, whole."""

    name: str
    title: str
    """What the rep reads: "Log an activity"."""
    description: str
    """What the model reads."""
    args_schema: type[BaseModel]
    backend: Backend
    target_type: str
    """The kind of record it changes: "opportunity", "account", "contact", "preferences"."""
    target_id: Callable[[BaseModel], str | None]
    """The target record's id, from validated arguments."""
    editable: tuple[str, ...]
    """Schema fields a rep may change in an edit (the target record itself is not one)."""
    snapshot: Snapshot
    check: Check
    execute: Execute
    header_fields: frozenset[str] = frozenset()
    """Fields already shown as the card's header (the target record)."""
    multiline: frozenset[str] = frozenset()
    """Editable fields that are long text."""
    changes_record: bool = False
    """Changes an existing record: the card shows current values next to proposed ones."""
    shows_draft: bool = False
    """The proposal's preview is a message draft (shown in full, never sent)."""
    cues: tuple[str, ...] = ()
    """Word stems in a rep's message that may ask for this change ("log", "move", "draft"): the
    tool is offered to the model on a turn whose conversation uses one
    (:mod:`copilot.middleware.tool_selection`); it needs the rep's approval either way."""
    recover: Callable[[WritePlan, dict[str, Any]], WritePlan | None] | None = None
    """How to finish an attempt interrupted after it reached the backend, from its journal
    (e.g. the version it was approved over), asking the backend by key before any version
    check; None = check again as usual (the backend is idempotent by key)."""

    def progress(self) -> str:
        """The progress line while the model proposes it."""
        return f"Preparing a proposal for your approval: {self.title.lower()}…"

    def langchain_tool(self) -> BaseTool:
        """The tool offered to the model: its schema and description, and an executor that
        refuses to act (only the write guard runs writes, with a plan of its own)."""

        async def refuse(**_: Any) -> str:
            raise WriteOutsideGuard(f"{self.name} can only run through the approval write guard")

        return _CompactSchemaTool(
            coroutine=refuse,
            name=self.name,
            description=self.description,
            args_schema=self.args_schema,
            # MCP-style annotations, as CRM tools carry them: this tool changes something.
            metadata={"readOnlyHint": False, "title": self.title, "backend": self.backend, "cues": self.cues},
        )

    def planned_tool(self, ctx: AgentContext, store: BaseStore | None, plan: WritePlan) -> BaseTool:
        """The tool the write guard runs for one approved call: bound to its plan."""

        async def run(**_: Any) -> tuple[str, dict[str, Any]]:
            outcome = await self.execute(ctx, store, plan)
            return json.dumps(outcome.to_json(), default=str), outcome.model_dump(mode="json")

        return StructuredTool.from_function(
            coroutine=run,
            name=self.name,
            description=self.description,
            args_schema=self.args_schema,
            response_format="content_and_artifact",
        )


class WriteOutsideGuard(CopilotError):
    """A write tool was invoked without the write guard's plan: refuse, write nothing."""

    code = "write_outside_guard"


REGISTRY: dict[str, WriteTool] = {}
"""Every write tool, by name."""


def register(tool: WriteTool) -> WriteTool:
    """Add ``tool`` to the registry (a second entry of one name is a configuration error)."""
    if tool.name in REGISTRY and REGISTRY[tool.name] is not tool:
        raise ConfigurationError(f"write tool {tool.name!r} is registered twice")
    if "send" in tool.name.lower():
        raise ConfigurationError(f"tool {tool.name!r} looks like a send tool; the copilot only drafts")
    unknown = set(tool.editable) - set(tool.args_schema.model_fields)
    if unknown:
        raise ConfigurationError(f"{tool.name}: editable fields {sorted(unknown)} are not in its schema")
    REGISTRY[tool.name] = tool
    return tool


def reschema(
    name: str,
    args_schema: type[BaseModel],
    *,
    editable: tuple[str, ...] | None = None,
    description: str | None = None,
) -> WriteTool:
    """Give the registered tool ``name`` another argument schema (and editable fields, and the
    description the model reads), in its place: the CRM's vocabulary, once read, is what the
    model is offered and the card lists."""
    entry = REGISTRY[name]
    updated = replace(
        entry,
        args_schema=args_schema,
        editable=entry.editable if editable is None else editable,
        description=entry.description if description is None else description,
    )
    if unknown := set(updated.editable) - set(args_schema.model_fields):
        raise ConfigurationError(f"{name}: editable fields {sorted(unknown)} are not in its schema")
    REGISTRY[name] = updated  # an existing key keeps its place (the order tools are offered in)
    return updated


def unregister(name: str) -> None:
    """Remove a tool (tests that register a throwaway tool clean up with this)."""
    REGISTRY.pop(name, None)


def write_tool(name: str) -> WriteTool | None:
    """The registry entry of ``name``; None for any other tool."""
    return REGISTRY.get(name)


def write_tools() -> Iterator[WriteTool]:
    """Every registered write tool, in registration order."""
    return iter(tuple(REGISTRY.values()))


def is_write(name: str) -> bool:
    """Whether ``name`` is a write tool (needs approval)."""
    return name in REGISTRY


def backends(names: set[str]) -> set[Backend]:
    """The backends the writes named in ``names`` need."""
    return {REGISTRY[n].backend for n in names if n in REGISTRY}


class _SchemaView(Mapping[str, type[BaseModel]]):
    """``name → argument schema`` of every registered write tool, always current."""

    def __getitem__(self, name: str) -> type[BaseModel]:
        return REGISTRY[name].args_schema

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(REGISTRY))

    def __len__(self) -> int:
        return len(REGISTRY)


WRITE_TOOL_SCHEMAS: Mapping[str, type[BaseModel]] = _SchemaView()
"""The registry seen as ``name → schema`` (derived; there is no second list)."""


def title(name: str) -> str:
    """What the rep reads for a tool: its registered title, else its name."""
    tool = REGISTRY.get(name)
    return tool.title if tool is not None else name
