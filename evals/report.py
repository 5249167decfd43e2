"""The eval's output (pure): one table per model, and the JSON report document."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evals.briefs import BriefRecord, BriefReport
from evals.dataset import Bounds, Thresholds
from evals.metrics import BRIEF_COUNT_METRICS, COUNT_METRICS, MetricValue
from evals.run import ModelReport, turn_ok

LABELS: dict[str, str] = {
    "correctness": "answer correctness (reference facts stated)",
    "groundedness": "groundedness (factual sentences cited from this run's tool results)",
    "citation_precision": "citation precision (cited ids that are reference records)",
    "citation_recall": "citation recall (reference records cited)",
    "tool_choice": "tool-choice accuracy",
    "schema_valid": "schema-valid proposals",
    "proposal_match": "proposal match (every expected field)",
    "nothing_found": 'honest "nothing found"',
    "injection_resisted": "planted instructions not followed",
    "honest_limit": 'honest "I can\'t … yet" to a near miss',
    "leaks": "leaks (out-of-scope ids / hidden values / raw PII), total",
    "ungrounded_shown": "ungrounded answers shown (no read, or no verified citation), total",
    "raw_tool_call_text": "raw tool-call text shown, total",
    "internal_text_shown": "internal text shown (tool errors, prompt, identifiers), total",
    "degenerate_shown": "degenerate text shown (loops, residue, one word), total",
    "proposals_without_request": "proposals the rep's message did not ask for, total",
    "answered_different_question": "answered a different question (near miss with records; other records), total",
    "errors": "turns that ended in an error or a notice",
    "gate_refused": "turns the gate refused (a fallback model would get them)",
    "model_calls_per_item": "model calls per item",
    "tokens_per_item": "tokens per item",
    "prompt_tokens_per_call": "prompt tokens per model call (n: model calls)",
}


BRIEF_LABELS: dict[str, str] = {
    "citation_recall": "citation recall (expected ids cited)",
    "leaks": "leaks (forbidden ids cited, raw email or phone), total",
    "unexpected": "briefs or digest lines made where none should be, total",
    "unverified": "citations the citation check left unverified, total",
    "errors": "items that ended in an error",
}


def _fmt(value: float | None, name: str) -> str:
    if value is None:
        return "n/a"
    if name in COUNT_METRICS or name == "errors":
        return f"{value:.0f}"
    if name.endswith("_per_item"):
        return f"{value:.1f}"
    if name.endswith("_per_call"):
        return f"{value:.0f}"
    return f"{value:.3f}"


def _bound(name: str, thresholds: Bounds) -> str:
    if name in thresholds.min:
        return f">= {thresholds.min[name]:g}"
    if name in thresholds.max:
        return f"<= {thresholds.max[name]:g}"
    return ""


def to_table(report: ModelReport, thresholds: Thresholds, dataset: str, profile: str = "reference") -> str:
    """The model's metrics, per-field proposal match and per-kind correctness, as text; the
    header names the CRM profile the items ran on (``CRM_KIND``)."""
    failed = {b.metric for b in report.breaches}
    lines = [
        f"model {report.model} on {dataset} (CRM profile {profile}):"
        f" {len(report.items)} items in {report.seconds:.0f} s"
        f" — {'PASS' if report.passed else 'FAIL'}",
        f"  {'metric':<72} {'value':>8} {'n':>4}  threshold",
    ]
    for name, value in report.values.items():
        label = LABELS.get(name) or f"  proposal field {name.removeprefix('proposal_field.')}"
        mark = "  BELOW" if name in failed else ""
        lines.append(
            f"  {label:<72} {_fmt(value.value, name):>8} {value.n:>4}  {_bound(name, thresholds)}{mark}"
        )
    lines.append("  answer correctness by item kind:")
    for kind, value in report.correctness_by_kind.items():
        if value.n:
            lines.append(f"    {kind:<70} {_fmt(value.value, kind):>8} {value.n:>4}")
    misses = [(r.item, t) for r in report.items for t in r.turns if not turn_ok(t.score)]
    if misses:
        lines.append(f"  missed turns ({len(misses)}):")
        for item, turn in misses[:40]:
            lines.append(f"    {item.id} {item.kind}: {turn.text!r}")
    return "\n".join(lines)


def _moment(record: BriefRecord) -> str:
    case = record.case
    lead = f" +{case.lead_minutes} min" if case.lead_minutes is not None else ""
    return f"{case.rep} at {record.at:%Y-%m-%dT%H:%M}Z (day+{case.at.day_offset}){lead}"


def _brief_outcome(record: BriefRecord) -> str:
    """One line of what an item made and what it got wrong."""
    score, case = record.score, record.case
    made = len(record.observation.parts)
    noun = "brief" if case.kind == "brief" else "line"
    want = len(case.expect.briefs) if case.kind == "brief" else len(case.expect.lines)
    parts = [f"{made} {noun}{'s' if made != 1 else ''} ({want} expected)"]
    if score.expected:
        parts.append(f"{score.expected - len(score.missing)}/{score.expected} expected ids cited")
    if case.expect.no_brief:
        parts.append("no brief: " + ", ".join(f"{n.meeting_id} ({n.reason})" for n in case.expect.no_brief))
    if case.expect.forbidden_ids:
        parts.append(f"{len(case.expect.forbidden_ids)} ids forbidden")
    for label, found in (
        ("missing", score.missing),
        ("leaked", score.leaked),
        ("made where none should be", score.unexpected),
        ("unverified", score.unverified),
    ):
        if found:
            parts.append(f"{label}: {', '.join(found[:6])}{' …' if len(found) > 6 else ''}")
    if score.error:
        parts.append(f"error: {score.error}")
    return "; ".join(parts)


def brief_table(report: BriefReport, bounds: Bounds, dataset: str, profile: str = "reference") -> str:
    """The brief items' metrics and every item's result, as text."""
    failed = {b.metric for b in report.breaches}
    lines = [
        f"briefs and digests on {dataset} (CRM profile {profile}; the product's briefs_at / digest_at, no model): "
        f"{len(report.items)} items in {report.seconds:.0f} s — {'PASS' if report.passed else 'FAIL'}",
        f"  {'metric':<72} {'value':>8} {'n':>4}  threshold",
    ]
    for name, value in report.values.items():
        shown = _fmt(value.value, "errors" if name in BRIEF_COUNT_METRICS else name)
        mark = "  BELOW" if name in failed and name in bounds.min else "  ABOVE" if name in failed else ""
        lines.append(f"  {BRIEF_LABELS[name]:<72} {shown:>8} {value.n:>4}  {_bound(name, bounds)}{mark}")
    lines.append("  items:")
    for record in report.items:
        verdict = "ok  " if record.score.ok else "FAIL"
        lines.append(f"    {verdict} {record.case.id} {record.case.kind:<6} {_moment(record)}")
        lines.append(f"         {_brief_outcome(record)}")
    return "\n".join(lines)


def brief_document(report: BriefReport) -> dict[str, Any]:
    """The brief items' part of the JSON report: metrics, breaches and every item's result."""
    return {
        "passed": report.passed,
        "seconds": round(report.seconds, 1),
        "metrics": {name: _value(v) for name, v in report.values.items()},
        "breaches": [
            {"metric": b.metric, "value": b.value, "bound": b.bound, "side": b.side} for b in report.breaches
        ],
        "items": [
            {
                "id": r.case.id,
                "kind": r.case.kind,
                "rep": r.case.rep,
                "at": r.at.isoformat(),
                "lead_minutes": r.case.lead_minutes,
                "ok": r.score.ok,
                "made": [{"key": p.key, "cited": list(p.cited)} for p in r.observation.parts],
                "citation_recall": r.score.citation_recall,
                "expected_ids": r.score.expected,
                "missing": r.score.missing,
                "leaked": r.score.leaked,
                "unexpected": r.score.unexpected,
                "unverified": r.score.unverified,
                "error": r.score.error,
                "text": r.observation.text,
            }
            for r in report.items
        ],
    }


def _value(value: MetricValue) -> dict[str, Any]:
    return {"value": value.value, "n": value.n}


def document(
    reports: Sequence[ModelReport],
    thresholds: Thresholds,
    dataset: str,
    briefs: BriefReport | None = None,
    profile: str = "reference",
) -> dict[str, Any]:
    """The JSON report: per model its metrics, breaches and every turn with its scores; the
    brief items' results under ``briefs`` (null when the dataset has none); the CRM profile."""
    return {
        "dataset": dataset,
        "profile": profile,
        "thresholds": thresholds.model_dump(),
        "passed": all(r.passed for r in reports) and (briefs is None or briefs.passed),
        "briefs": brief_document(briefs) if briefs is not None else None,
        "models": [
            {
                "model": r.model,
                "passed": r.passed,
                "seconds": round(r.seconds, 1),
                "metrics": {name: _value(v) for name, v in r.values.items()},
                "correctness_by_kind": {k: _value(v) for k, v in r.correctness_by_kind.items()},
                "breaches": [
                    {"metric": b.metric, "value": b.value, "bound": b.bound, "side": b.side}
                    for b in r.breaches
                ],
                "items": [
                    {
                        "id": rec.item.id,
                        "kind": rec.item.kind,
                        "template": rec.item.template,
                        "model_calls": rec.cost.model_calls,
                        "tokens": rec.cost.tokens,
                        "prompt_tokens": rec.cost.prompt_tokens,
                        "turns": [
                            {
                                "question": t.text,
                                "ok": turn_ok(t.score),
                                "answer": t.observation.answer,
                                "citations": t.observation.citations,
                                "tool_calls": t.observation.tool_calls,
                                "tools_run": t.observation.tools_run,
                                "notice": t.observation.notice,
                                "proposals": [
                                    {"tool": p.tool, "args": p.args} for p in t.observation.proposals
                                ],
                                "error": t.observation.error,
                                "scores": {
                                    k: v
                                    for k, v in vars(t.score).items()
                                    if k not in ("kind",) and v not in (None, [], {})
                                },
                            }
                            for t in rec.turns
                        ],
                    }
                    for rec in r.items
                ],
            }
            for r in reports
        ],
    }
