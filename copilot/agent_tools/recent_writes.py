"""``recent_writes``: the rep's own recent executed writes, compactly, from the audit log.

A local read tool so any model can find the change a rep means by "undo my last change"
or "undo the Acme stage change" and name it to ``undo_write`` by its audit id. It lists
only the calling rep's own rows, within the undo window, newest first, with what each
changed (field names and values the rep approved; long text shortened) and whether it
can still be undone.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from langgraph.runtime import Runtime, get_runtime
from pydantic import BaseModel, ConfigDict, Field

from copilot.context import AgentContext
from copilot.persistence import audit
from copilot.writes.registry import title
from copilot.writes.undo import UNDO_CUES, UNDO_TOOL, undoable

_SHORT = 80


class RecentWritesArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=10, ge=1, le=20, description="How many of the newest changes (1-20).")


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _SHORT:
        return value[: _SHORT - 1] + "…"
    return value


def _record_name(tool: str, response: dict[str, Any]) -> str:
    for key in ("opportunity", "activity", "draft"):
        record = response.get(key)
        if isinstance(record, dict):
            name = record.get("name") or record.get("subject") or ""
            account = record.get("account")
            if isinstance(account, dict) and account.get("name"):
                return f"{name} ({account['name']})" if name else str(account["name"])
            return str(name)
    return ""


def compact(stored: audit.StoredAuditEntry, undone_by: int | None) -> dict[str, Any]:
    """One audit row as the model reads it (no ids of other people, no long text)."""
    entry = stored.entry
    applied = entry.edited_args if entry.edited_args is not None else entry.original_args
    changes = {k: _short(v) for k, v in applied.items() if v not in (None, "")}
    item: dict[str, Any] = {
        "audit_id": stored.id,
        "tool": entry.tool,
        "what": title(entry.tool),
        "record": _record_name(entry.tool, entry.crm_response),
        "record_id": entry.target_record_id,
        "changes": changes,
        "executed_at": entry.executed_at.isoformat(timespec="seconds"),
        "undoable": undoable(entry.tool) and undone_by is None,
    }
    if undone_by is not None:
        item["undone_by_audit_id"] = undone_by
    if entry.undoes_audit_id is not None:
        item["undoes_audit_id"] = entry.undoes_audit_id
    if entry.tool == "update_opportunity":
        item["previous"] = entry.crm_response.get("previous")
    return item


async def _recent_writes(limit: int = 10) -> str:
    runtime: Runtime[AgentContext] = get_runtime(AgentContext)
    ctx = runtime.context
    since = ctx.clock() - dt.timedelta(hours=ctx.settings.undo_window_hours)
    async with ctx.pool.connection() as conn:
        rows = await audit.recent_entries(
            conn,
            tenant_id=ctx.identity.tenant_id,
            rep_aad_id=ctx.identity.aad_object_id,
            since=since,
            limit=limit,
        )
    return json.dumps({"items": [compact(row, undone) for row, undone in rows]}, default=str)


def recent_writes_tool() -> BaseTool:
    """The ``recent_writes`` read tool (the rep comes from the run context, never arguments)."""
    return StructuredTool.from_function(
        coroutine=_recent_writes,
        name="recent_writes",
        description=(
            "List the rep's own recent executed changes (newest first): audit id, what changed on "
            f"which record, and whether it can still be undone with {UNDO_TOOL}."
        ),
        args_schema=RecentWritesArgs,
        metadata={
            "readOnlyHint": True,
            "cues": (*UNDO_CUES, "changed", "change i made", "my last", "did i", "recent"),
        },
    )
