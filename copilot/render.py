"""Terminal rendering of turn results and proposals (pure text)."""

from __future__ import annotations

from typing import Any

from copilot.turns import Proposal, TurnResult
from copilot.writes import WRITE_TOOL_SCHEMAS
from copilot.writes import title as write_title


def _fmt(value: Any) -> str:
    return "—" if value is None or value == "" else str(value)


def proposal_table(proposal: Proposal) -> list[tuple[str, str, str]]:
    """Rows of (field, current, proposed) for the fields a proposal sets."""
    record = proposal.record or {}
    current = record.get("current") or {}
    schema = WRITE_TOOL_SCHEMAS.get(proposal.tool)
    fields = list(schema.model_fields) if schema is not None else list(proposal.args)
    rows = []
    for name in fields:
        if name in proposal.args and proposal.args[name] is not None:
            rows.append((name, _fmt(current.get(name)) if name in current else "", _fmt(proposal.args[name])))
    return rows


def render_proposal(proposal: Proposal, index: int, total: int) -> str:
    """One proposal as a small table: the target record, then current vs proposed values."""
    record = proposal.record or {}
    title = write_title(proposal.tool)
    lines = [f"Proposal {index} of {total}: {title}  (id {proposal.tool_call_id})"]
    target = record.get("target")
    if target and target.get("id"):
        version = record.get("version")
        lines.append(
            f"  Record: {target.get('name') or '(unnamed)'} [{target['id']}]"
            + (f", version {version}" if version is not None else "")
        )
    if record.get("error"):
        lines.append(f"  Warning: {(record.get('error') or {}).get('message')}")
    rows = proposal_table(proposal)
    width = max([len("field"), *(len(r[0]) for r in rows)])
    cur_width = max([len("current"), *(len(r[1]) for r in rows)])
    lines.append(f"  {'field'.ljust(width)}  {'current'.ljust(cur_width)}  proposed")
    for name, current, proposed in rows:
        first, *rest = proposed.splitlines() or [""]
        lines.append(f"  {name.ljust(width)}  {current.ljust(cur_width)}  {first}")
        lines.extend(f"  {''.ljust(width)}  {''.ljust(cur_width)}  {more}" for more in rest)
    if record.get("preview"):
        lines.append("  Draft preview:")
        lines.extend(f"    {line}" for line in str(record["preview"]).splitlines())
    return "\n".join(lines)


def render_result(result: TurnResult) -> str:
    """A turn's answer (with citations) or its pending proposals, plus the thread id."""
    parts: list[str] = []
    if result.answer:
        parts.append(result.answer)
    if result.citations:
        parts.append("Sources: " + ", ".join(result.citations))
    for call_id, outcome in result.writes.items():
        if outcome.status == "done":
            proposal = result.decided.get(call_id)
            parts.append(f"✓ Done: {write_title(proposal.tool) if proposal else 'the change'}")
    if result.proposals:
        parts.append(f"{len(result.proposals)} proposal(s) need your decision:")
        total = len(result.proposals)
        parts.extend(
            render_proposal(p, i, total)
            # One made while others waited waits on a thread of its own: resume that one.
            + (f"\n  thread: {p.thread_id}" if p.thread_id and p.thread_id != result.thread_id else "")
            for i, p in enumerate(result.proposals, 1)
        )
    parts.append(f"thread: {result.thread_id}")
    return "\n\n".join(parts)
