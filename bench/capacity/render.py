"""The capacity report and the calibration as text and JSON (pure)."""

from __future__ import annotations

from typing import Any

from bench.capacity.calibrate import TOLERANCE, Check
from bench.capacity.model import CapacityReport


def _n(value: float, digits: int = 2) -> str:
    """A number for people: thousands separated, at most ``digits`` decimals, no trailing zeros."""
    text = f"{value:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _bytes(value: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{_n(value / size, 1)} {unit}"
    return f"{_n(value, 0)} B"


def to_text(report: CapacityReport) -> str:
    """The report: load, model, CRM, cost, checkpoints, hosting; then the hard bounds."""
    r, i, b = report, report.inputs, report.bounds
    lines = [
        f"capacity for {i.active_reps:,} reps x {_n(i.questions_per_rep_per_day)} questions/day "
        f"({_n(r.questions_per_day)} questions/day, {_n(i.peak_hour_share * 100)} % in the peak hour)",
        "",
        f"peak questions/s             {_n(r.peak_questions_per_second, 3)}"
        f" ({_n(r.peak_runs_per_second, 3)} runs/s with approval clicks)",
        f"model calls/s                {_n(r.model_calls_per_second, 3)}",
    ]
    for u in r.utilisation:
        lines.append(f"{u.limit:<44} {_n(u.load)} of {_n(u.capacity)} {u.unit} ({_n(u.share * 100, 3)} %)")
    lines += [
        f"binds first ({i.crm}): {r.binds_first}",
        f"CRM requests                 {_n(r.crm_requests_per_question)}/question, "
        f"{_n(r.crm_requests_per_rep_per_day)}/rep/day, {_n(r.crm_requests_per_org_per_day)}/org/day",
        f"LLM cost                     ${_n(r.llm_cost_per_day)}/day, ${_n(r.llm_cost_per_rep_per_day, 4)}/rep/day",
        f"checkpoints per thread       {_n(r.checkpoints_per_thread)} ({_bytes(r.checkpoint_bytes_per_thread)})"
        f" before the daily prune, 1 after; {_n(r.checkpoints_per_conversation)} per conversation"
        f" (incl. {_n(i.waiting_threads_per_conversation)} for earlier threads with a proposal waiting)",
        f"checkpoints in total         {_n(r.checkpoints_total)} ({_bytes(r.checkpoint_bytes_total)}) in "
        f"{_n(r.threads_retained)} threads under {r.retention_days}-day retention",
        f"conversation lifetime        unlimited: a new thread after {_n(r.deployment.thread_idle_rotate_hours)} h "
        f"idle or at {r.thread_calls_before_rotation} of {r.deployment.model_call_thread_limit} model calls "
        f"({_n(r.days_to_headroom_rotation, 1)} days of use without a gap); "
        f"{_n(r.rotations_per_conversation_per_day)} new thread(s)/conversation/day",
        f"runs in flight at peak       {_n(r.concurrent_runs)}",
        f"Functions instances          {r.functions_instances} (queued turns, {r.instance_concurrency} per instance)",
        f"database connections         {r.db_connections} at peak (the pools may open up to "
        f"{r.db_connections_ceiling})",
        "",
        f"hard bounds (every run at the {r.deployment.model_call_run_limit}-call limit, every prompt at the "
        f"{r.deployment.summarization_trigger_tokens:,}-token summarisation trigger):",
        f"  model calls/s {_n(b.model_calls_per_second, 3)}, prompt tokens/call {_n(b.prompt_tokens_per_call)}, "
        f"tokens/min {_n(b.model_tokens_per_minute)}, LLM cost ${_n(b.llm_cost_per_day)}/day",
    ]
    return "\n".join(lines)


def calibration_text(checks: list[Check]) -> str:
    """One line per assumption: assumed, measured, how far off, and where the measurement is from."""
    rows = [["assumption", "assumed", "measured", "off by", "", "measured by"]]
    for c in checks:
        if c.measured is None:
            rows.append([c.name, _n(c.assumed, 3), "-", "-", "not measured", c.source])
            continue
        flag = f"OFF (>{TOLERANCE:.0%})" if c.status == "off" else "ok"
        off = "∞" if c.off_by is None else f"{_n(c.off_by * 100, 1)} %"
        rows.append([c.name, _n(c.assumed, 3), _n(c.measured, 3), off, flag, c.source])
    widths = [max(len(row[n]) for row in rows) for n in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(widths[n]) for n, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    flagged = [c.name for c in checks if c.status == "off"]
    lines.append("")
    lines.append(
        f"{len(flagged)} assumption(s) off by more than {TOLERANCE:.0%}: {', '.join(flagged)}"
        if flagged
        else f"every measured assumption is within {TOLERANCE:.0%}"
    )
    return "\n".join(lines)


def to_json(report: CapacityReport, checks: list[Check] | None) -> dict[str, Any]:
    """The ``--json`` document: inputs, deployment, every output; the calibration if asked."""
    doc: dict[str, Any] = report.model_dump(mode="json")
    if checks is not None:
        doc["calibration"] = [c.model_dump(mode="json") for c in checks]
    return doc
