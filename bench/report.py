"""The bench's output: a JSON document, and the table printed from it."""

from __future__ import annotations

import json
from typing import Any

from bench.queue_replies import REPLY_TIMEOUT_SECONDS
from bench.stats import Comparison, NotMeasured, Side

COUNT_KEYS = (
    ("mcp_sessions", "MCP sessions"),
    ("mcp_requests", "MCP requests"),
    ("webapi_requests", "Web API requests"),
    ("obo_exchanges", "OBO exchanges"),
    ("pool_checkouts", "pool checkouts"),
    ("checkpoint_writes", "checkpoint writes"),
    ("checkpoint_reads", "checkpoint reads"),
    ("model_calls", "model calls"),
    ("prompt_tokens_per_call", "prompt tokens/call (≈chars/4)"),
)


def summarise_counts(counts: list[dict[str, Any]]) -> dict[str, Any]:
    """One iteration's counts, as the most any measured iteration had (per key and sub-key);
    ``varying`` names the keys that were not the same in every iteration, and ``least`` holds
    the fewest of each count (and sub-count) any iteration had."""
    if not counts:
        return {}
    summary: dict[str, Any] = {}
    least: dict[str, Any] = {}
    varying = []
    for key in counts[0]:
        values = [c.get(key) for c in counts]
        if any(v != values[0] for v in values):
            varying.append(key)
        if isinstance(values[0], dict):
            subs = {sub for value in values for sub in value or {}}
            summary[key] = {s: max(int((v or {}).get(s, 0)) for v in values) for s in sorted(subs)}
            least[key] = {s: min(int((v or {}).get(s, 0)) for v in values) for s in sorted(subs)}
        elif isinstance(values[0], list):
            summary[key] = max(values, key=lambda v: (len(v or []), sum(v or [])))
        else:
            summary[key] = max(int(v or 0) for v in values)
            least[key] = min(int(v or 0) for v in values)
    summary["varying"] = varying
    summary["least"] = least
    return summary


def _side(side: Side, kind: str) -> dict[str, Any]:
    rate = {"per_second": None if not side.median else 1 / side.median} if kind == "wall" else {}
    return {
        "median_seconds": side.median,
        "p95_seconds": side.p95,
        "p99_seconds": side.p99,
        **rate,
        "samples": len(side.seconds),
        "errors": side.errors,
        "seconds": [round(s, 6) for s in side.seconds],
        "counts": summarise_counts(side.counts),
        "first_counts": side.first_counts,
    }


CRM_PROFILES = {
    "reference": "the sandbox CRM's own MCP server: reads and writes through its MCP tools",
    "dataverse": "the sandbox's Dataverse face (HTTPS): reads through its MCP server's read-only "
    "tools; the copilot writes through the Web API v9.2, the bare agent through MCP create_record",
}
"""What each CRM profile is, as the report says it."""


def document(
    mode: str,
    iterations: int,
    comparisons: list[Comparison],
    not_measured: list[NotMeasured],
    crm_kind: str = "reference",
) -> dict[str, Any]:
    """The ``--json`` document: the CRM profile measured, every measured result with its
    baseline and ratio."""
    return {
        "mode": mode,
        "iterations": iterations,
        "crm_kind": crm_kind,
        "crm": CRM_PROFILES[crm_kind],
        "ratio": "median(ours) / median(baseline), both measured in this run, interleaved",
        "percentiles": "p50 = median; p95 / p99 interpolated between the closest samples "
        "(with fewer than 100 samples p99 is close to the slowest)",
        "results": [
            {
                "scenario": c.scenario,
                "description": c.description,
                "baseline": c.baseline,
                "kind": c.kind,
                "ratio": c.ratio,
                "ours": _side(c.ours, c.kind),
                "bare": _side(c.bare, c.kind),
                "error": c.error,
            }
            for c in comparisons
        ],
        "not_measured": [
            {"scenario": n.scenario, "description": n.description, "baseline": n.baseline, "reason": n.reason}
            for n in not_measured
        ],
    }


def to_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _count(value: Any) -> str:
    if isinstance(value, list):
        return "-" if not value else "/".join(str(v) for v in value)
    if value is None:
        return "-"
    return str(value)


def _rows(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def _tail(side: dict[str, Any], kind: str) -> list[str]:
    """The p95 and p99 cells: latencies only; a wall-time row shows requests per second instead."""
    if kind == "latency":
        return [_ms(side.get("p95_seconds")), _ms(side.get("p99_seconds"))]
    if kind == "wall" and side.get("per_second"):
        return [f"{side['per_second']:.1f}/s", ""]
    return ["", ""]


def _errors(r: dict[str, Any]) -> str:
    if r.get("kind", "time") == "time":
        return ""
    return f"{r['ours'].get('errors', 0)}/{r['bare'].get('errors', 0)}"


def to_table(doc: dict[str, Any]) -> str:
    """The results table, then the counts of one turn / click (ours | bare)."""
    rows = [
        [
            "scenario",
            "ours p50",
            "p95",
            "p99",
            "baseline p50",
            "p95",
            "p99",
            "ratio",
            "n",
            "errors",
            "baseline is",
        ]
    ]
    for r in doc["results"]:
        ratio = "error" if r["error"] else ("-" if r["ratio"] is None else f"{r['ratio']:.2f}x")
        kind = r.get("kind", "time")
        rows.append(
            [
                r["scenario"],
                _ms(r["ours"]["median_seconds"]),
                *_tail(r["ours"], kind),
                _ms(r["bare"]["median_seconds"]),
                *_tail(r["bare"], kind),
                ratio,
                str(r["ours"]["samples"]),
                _errors(r),
                r["baseline"],
            ]
        )
    for n in doc["not_measured"]:
        rows.append(
            [n["scenario"], "not measured", "", "", "not measured", "", "", "-", "-", "", n["baseline"]]
        )
    crm_kind = doc.get("crm_kind", "reference")  # documents from before the profiles were reference
    lines = [
        f"copilot bench ({doc['mode']}, {doc['iterations']} interleaved iterations, CRM profile: {crm_kind})",
        f"CRM: {CRM_PROFILES.get(crm_kind, crm_kind)}",
        "",
    ]
    lines += _rows(rows)
    counted = [r for r in doc["results"] if r["ours"]["counts"]]
    if counted:
        lines += ["", "counts per turn / click (a–b: the fewest–most of the measured iterations)", ""]
        lines += _rows(_count_rows(counted))
    errors = [r for r in doc["results"] if r["error"]]
    for r in errors:
        lines.append(f"error in {r['scenario']}: {r['error']}")
    for n in doc["not_measured"]:
        lines.append(f"not measured: {n['scenario']}: {n['reason']}")
    lines.append("")
    lines.append(f"ratio = {doc['ratio']}; no absolute thresholds. Numbers are noisy on a busy machine.")
    lines.append(
        "p95 / p99: latency rows only (with fewer than 100 samples p99 is close to the slowest); "
        "wall/req rows show requests (turns) per second in the p95 column; errors = ours/baseline "
        f"requests that failed (for queue reply rows: no answer within {REPLY_TIMEOUT_SECONDS:.0f} s), "
        "not in the samples."
    )
    return "\n".join(lines)


SHOWN_WHEN_COUNTED = frozenset({"webapi_requests"})
"""Counts whose row is left out when nothing counted any (Web API requests: ``reference`` makes none)."""

BREAKDOWNS = (
    ("mcp_sessions_by_scope", "MCP sessions"),
    ("mcp_requests_by_method", "MCP requests"),
    ("webapi_requests_by_method", "Web API requests"),
    ("obo_exchanges_by_scope", "OBO exchanges"),
    ("pool_checkouts_by_pool", "pool checkouts"),
)


def _range(counts: dict[str, Any], key: str, sub: str | None = None) -> str:
    """A count as ``n``, or ``least–most`` when the iterations did not all have the same."""
    most, least = counts.get(key), (counts.get("least") or {}).get(key)
    if sub is not None:
        most, least = (most or {}).get(sub, 0), (least or {}).get(sub, 0)
    if isinstance(most, int) and isinstance(least, int) and least != most:
        return f"{least}–{most}"
    return _count(most)


def _count_rows(counted: list[dict[str, Any]]) -> list[list[str]]:
    """One row per count (and per scope / method / pool under it), two columns per scenario."""
    header = ["count"]
    for r in counted:
        header += [f"{r['scenario']}: ours", "bare"]
    rows = [header]
    breakdowns = dict(BREAKDOWNS)
    for key, label in COUNT_KEYS:
        if key in SHOWN_WHEN_COUNTED and not any(
            r[side]["counts"].get(key) for r in counted for side in ("ours", "bare")
        ):
            continue
        rows.append(
            [label, *(_count(r[side]["counts"].get(key)) for r in counted for side in ("ours", "bare"))]
        )
        by = next((k for k, name in breakdowns.items() if name == label), None)
        if by is None:
            continue
        subs = sorted(
            {sub for r in counted for side in ("ours", "bare") for sub in r[side]["counts"].get(by) or {}}
        )
        for sub in subs:
            rows.append(
                [
                    f"  {sub}",
                    *(
                        str((r[side]["counts"].get(by) or {}).get(sub, 0))
                        for r in counted
                        for side in ("ours", "bare")
                    ),
                ]
            )
    return rows
