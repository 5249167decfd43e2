"""Proposals: what a pending write is about, read at proposal time, shown to the rep.

A snapshot of the target record (with its version) is taken once, right after the
model proposes the write (each write tool's registry entry knows how), and kept in
graph state. The approval card and the CLI
show it next to the proposed values; the write guard compares its version with the
record's version at approval time (no blind overwrite).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from copilot.writes import WRITE_TOOL_SCHEMAS, ProposalRecord, Target, title

__all__ = ["ProposalRecord", "Target", "args_digest", "describe_proposal"]


def args_digest(args: dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of a proposal's arguments: what the rep was shown.

    Sorted keys, no whitespace, UTF-8: the same arguments always give the same digest.
    A decision that carries it (every card button, the terminal chat, ``--decisions``
    entries with ``digest``) is bound to exactly those arguments: a proposal that changed,
    or another one under the same id, is refused instead of executed.
    """
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _fmt(value: Any) -> str:
    return "—" if value is None or value == "" else str(value)


def describe_proposal(tool: str, args: dict[str, Any], record: ProposalRecord | None) -> str:
    """Plain-text description of one proposal: the target, then current → proposed (pure)."""
    lines = [title(tool)]
    if record is None:
        lines.append("(the target record could not be read)")
    else:
        target = record.get("target")
        if target is not None and target.get("id"):
            version = record.get("version")
            suffix = f", version {version}" if version is not None else ""
            lines.append(f"Record: {target.get('name') or '(unnamed)'} [{target['id']}]{suffix}")
        if record.get("error"):
            error = record["error"] or {}
            lines.append(f"Warning: {error.get('message', 'the record could not be read')}")
    current = (record or {}).get("current", {}) or {}
    schema = WRITE_TOOL_SCHEMAS.get(tool)
    fields = list(schema.model_fields) if schema is not None else list(args)
    for name in fields:
        if name in ("opportunity_id",) or name not in args or args[name] is None:
            continue
        if name in current:
            lines.append(f"  {name}: {_fmt(current.get(name))} → {_fmt(args[name])}")
        else:
            lines.append(f"  {name}: {_fmt(args[name])}")
    preview = (record or {}).get("preview")
    if preview:
        lines.append("Draft:\n" + preview)
    return "\n".join(lines)
