"""Proposals: what a pending write is about, read at proposal time, shown to the rep.

A snapshot of the target record (with its version) is taken once, right after the
model proposes the write (each write tool's registry entry knows how), and kept in
graph state. The approval card and the CLI
show it next to the proposed values; the write guard compares its version with the
record's version at approval time (no blind overwrite).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from copilot.writes import WRITE_TOOL_SCHEMAS, ProposalRecord, Target, title, write_tool

__all__ = [
    "ProposalRecord",
    "Target",
    "describe_proposal",
    "same_value",
    "unchanged_fields",
    "unchanged_result",
]


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"  # a switch ("digest on"), as a rep says it
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


def same_value(current: Any, proposed: Any) -> bool:
    """Whether a record's current value already is the proposed one (pure).

    Numbers compare by value (``240000`` = ``240000.0``), dates by their ISO form, text
    without regard to case or spacing ("send  Proposal" = "Send proposal"); an empty value
    is never the same as a set one.
    """
    if current is None or current == "" or proposed is None or proposed == "":
        return (current is None or current == "") and (proposed is None or proposed == "")
    if isinstance(current, bool) or isinstance(proposed, bool):
        return current is proposed
    if isinstance(current, int | float) and isinstance(proposed, int | float):
        return abs(float(current) - float(proposed)) < 0.005
    if isinstance(current, dt.date | dt.datetime):
        current = current.isoformat()
    if isinstance(proposed, dt.date | dt.datetime):
        proposed = proposed.isoformat()
    return " ".join(str(current).split()).casefold() == " ".join(str(proposed).split()).casefold()


def unchanged_fields(tool: str, args: dict[str, Any], record: ProposalRecord | None) -> dict[str, Any] | None:
    """The proposed fields, when every one of them already has that value; else ``None`` (pure).

    Only for a write that changes an existing record (its registry entry's
    ``changes_record``) whose current values were read at proposal time (``record`` is its
    snapshot). A field the record does not show counts as a change unless it is left at
    its schema default (``reset: false``); the target (the card's header fields) is not a
    field. ``None`` whenever anything would change, or when that cannot be told.
    """
    entry = write_tool(tool)
    if entry is None or not entry.changes_record or record is None or record.get("error"):
        return None
    current = record.get("current") or {}
    if not current:
        return None
    fields = entry.args_schema.model_fields
    same: dict[str, Any] = {}
    for name, value in args.items():
        if name in entry.header_fields or value is None:
            continue
        if name not in current:
            field = fields.get(name)
            if field is not None and not field.is_required() and value == field.default:
                continue
            return None
        if not same_value(current.get(name), value):
            return None
        same[name] = current.get(name)
    return same or None


def unchanged_result(tool: str, record: ProposalRecord, fields: dict[str, Any]) -> dict[str, Any]:
    """The tool result a no-op proposal gets instead of an approval: what the record already has.

    JSON, so any model reads it like another tool result; it names the record (so an answer
    may cite it) and says that nothing was proposed or written.
    """
    target = record.get("target") or {"type": "", "id": None, "name": ""}
    name = target.get("name") or "The record"
    ref = f" [{target['id']}]" if target.get("id") else ""
    labels = {n: (f.title or n.replace("_", " ")) for n, f in WRITE_TOOL_SCHEMAS[tool].model_fields.items()}
    values = ", ".join(f"{labels.get(k, k).lower()} {_fmt(v)}" for k, v in fields.items())
    return {
        "status": "unchanged",
        "message": f"{name}{ref} already has {values}. Nothing to change: no approval was requested "
        "and nothing was written.",
        "record": {"type": target.get("type"), "id": target.get("id"), "name": target.get("name")},
        "unchanged": fields,
    }
