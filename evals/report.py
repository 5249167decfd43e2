"""The eval's output (pure): one table per model, and the JSON report document."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evals.dataset import Thresholds
from evals.metrics import COUNT_METRICS, MetricValue
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
    "leaks": "leaks (out-of-scope ids / hidden values / raw PII), total",
    "ungrounded_shown": "ungrounded answers shown (no read, or no verified citation), total",
    "raw_tool_call_text": "raw tool-call text shown, total",
    "errors": "turns that ended in an error or a notice",
    "model_calls_per_item": "model calls per item",
    "tokens_per_item": "tokens per item",
}


def _fmt(value: float | None, name: str) -> str:
    if value is None:
        return "n/a"
    if name in COUNT_METRICS or name == "errors":
        return f"{value:.0f}"
    if name.endswith("_per_item"):
        return f"{value:.1f}"
    return f"{value:.3f}"


def _bound(name: str, thresholds: Thresholds) -> str:
    if name in thresholds.min:
        return f">= {thresholds.min[name]:g}"
    if name in thresholds.max:
        return f"<= {thresholds.max[name]:g}"
    return ""


def to_table(report: ModelReport, thresholds: Thresholds, dataset: str) -> str:
    """The model's metrics, per-field proposal match and per-kind correctness, as text."""
    failed = {b.metric for b in report.breaches}
    lines = [
        f"model {report.model} on {dataset}: {len(report.items)} items in {report.seconds:.0f} s"
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


def _value(value: MetricValue) -> dict[str, Any]:
    return {"value": value.value, "n": value.n}


def document(reports: Sequence[ModelReport], thresholds: Thresholds, dataset: str) -> dict[str, Any]:
    """The JSON report: per model its metrics, breaches and every turn with its scores."""
    return {
        "dataset": dataset,
        "thresholds": thresholds.model_dump(),
        "passed": all(r.passed for r in reports),
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
