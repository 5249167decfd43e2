"""Write tools: the registry and its built-in entries (see :mod:`copilot.writes.registry`)."""

from copilot.writes import crm, delegation, mailbox, posting, preferences, undo  # noqa: F401  (each registers its tools)
from copilot.writes.registry import (
    REGISTRY,
    WRITE_TOOL_SCHEMAS,
    WriteOutsideGuard,
    WriteTool,
    backends,
    is_write,
    register,
    title,
    unregister,
    write_tool,
    write_tools,
)
from copilot.writes.types import UNRESOLVED, Backend, ProposalRecord, Target, WriteOutcome, WritePlan

__all__ = [
    "REGISTRY",
    "UNRESOLVED",
    "WRITE_TOOL_SCHEMAS",
    "Backend",
    "ProposalRecord",
    "Target",
    "WriteOutcome",
    "WriteOutsideGuard",
    "WritePlan",
    "WriteTool",
    "backends",
    "is_write",
    "register",
    "title",
    "unregister",
    "write_tool",
    "write_tools",
]
