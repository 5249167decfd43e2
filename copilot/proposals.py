"""Proposals: what a pending write is about, read at proposal time, shown to the rep.

A snapshot of the target record (with its version) is taken once, right after the
model proposes the write, and kept in graph state. The approval card and the CLI
show it next to the proposed values; the write guard compares its version with the
record's version at approval time (no blind overwrite).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, TypedDict

from langgraph.store.base import BaseStore

from copilot.errors import CrmUnavailable
from copilot.identity import RepIdentity
from copilot.tools.crm_client import CrmCallError, CrmGateway
from copilot.tools.preferences import compose_email, load_preferences
from copilot.tools.schemas import WRITE_TOOL_SCHEMAS

OPPORTUNITY_FIELDS = ("name", "stage", "close_date", "amount", "currency", "next_step", "probability")
TOOL_TITLES = {
    "log_activity": "Log an activity",
    "update_opportunity": "Update an opportunity",
    "draft_followup_email": "Save a follow-up email to your Outlook drafts",
    "update_preferences": "Change your drafting preferences",
}


class Target(TypedDict):
    type: str
    id: str | None
    name: str


class ProposalRecord(TypedDict, total=False):
    """The snapshot kept in state under ``proposals[tool_call_id]``."""

    tool: str
    target: Target
    version: int | None
    current: dict[str, Any]
    proposed: dict[str, Any]
    preview: str | None
    error: dict[str, str] | None
    taken_at: str


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


async def _safe(
    crm: CrmGateway, tool: str, args: dict[str, Any]
) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    try:
        return await crm.call(tool, args), None
    except CrmCallError as exc:
        return None, {"code": exc.crm_code, "message": exc.message}
    except CrmUnavailable as exc:
        return None, {"code": "unavailable", "message": exc.message}


async def take_snapshot(
    tool: str,
    args: dict[str, Any],
    *,
    crm: CrmGateway,
    store: BaseStore | None,
    identity: RepIdentity,
) -> ProposalRecord:
    """Read the record a proposed write targets, as the rep sees it now."""
    record: ProposalRecord = {"tool": tool, "proposed": dict(args), "taken_at": _now(), "error": None}
    if tool == "update_opportunity":
        opp, error = await _safe(
            crm, "get_opportunity", {"opportunity_id": str(args.get("opportunity_id", ""))}
        )
        record["target"] = {
            "type": "opportunity",
            "id": str(args.get("opportunity_id")),
            "name": (opp or {}).get("name", ""),
        }
        record["version"] = None if opp is None else int(opp["version"])
        record["current"] = {k: opp.get(k) for k in OPPORTUNITY_FIELDS} if opp else {}
        record["error"] = error
    elif tool == "log_activity":
        if args.get("opportunity_id"):
            target, error = await _safe(
                crm, "get_opportunity", {"opportunity_id": str(args["opportunity_id"])}
            )
            kind, ident = "opportunity", str(args["opportunity_id"])
        else:
            target, error = await _safe(crm, "get_account", {"account_id": str(args.get("account_id", ""))})
            kind, ident = "account", str(args.get("account_id"))
        record["target"] = {"type": kind, "id": ident, "name": (target or {}).get("name", "")}
        record["version"] = None if target is None else int(target["version"])
        record["current"] = {}
        record["error"] = error
    elif tool == "draft_followup_email":
        contact, error = await _safe(crm, "get_contact", {"contact_id": str(args.get("contact_id", ""))})
        name = (contact or {}).get("name", "")
        record["target"] = {"type": "contact", "id": str(args.get("contact_id")), "name": name}
        record["version"] = None
        record["current"] = {"title": (contact or {}).get("title")} if contact else {}
        record["error"] = error
        if store is not None and contact is not None:
            prefs = await load_preferences(store, identity)
            record["preview"] = compose_email(
                str(args.get("body", "")), contact_name=name, rep_name=identity.name, prefs=prefs
            )
    elif tool == "update_preferences":
        current = (await load_preferences(store, identity)).model_dump() if store is not None else {}
        record["target"] = {"type": "preferences", "id": None, "name": "Your preferences"}
        record["version"] = None
        record["current"] = current
    else:
        record["target"] = {"type": "unknown", "id": None, "name": tool}
        record["current"] = {}
    return record


def _fmt(value: Any) -> str:
    return "—" if value is None or value == "" else str(value)


def describe_proposal(tool: str, args: dict[str, Any], record: ProposalRecord | None) -> str:
    """Plain-text description of one proposal: the target, then current → proposed (pure)."""
    lines = [TOOL_TITLES.get(tool, tool)]
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
