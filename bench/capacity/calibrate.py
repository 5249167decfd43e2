"""``capacity --calibrate BENCH_JSON``: each assumption next to what the bench measured (pure).

The bench (``python -m bench run --json``, :mod:`bench.report`) counts one
question's turn (``turn cost``: the copilot's ``run_turn``) and one approval click
(``approve click``: ``decide``) with a scripted model: model calls, the prompt size of
each call (characters / 4), MCP requests by method, checkpoint writes, and the wall time
of each. What it cannot measure (the real model's output tokens and latency, the CRM's
own cost per request, how often reps ask) is said to be "not measured", never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import fmean
from typing import Any, Literal

from pydantic import BaseModel

from bench.capacity.model import CapacityInputs
from copilot.errors import InvalidInput

TOLERANCE = 0.25
"""An assumption more than 25 % away from its measurement is flagged."""

TURN = "turn cost"
CLICK = "approve click"
_SESSION_SETUP = "tools/list"
"""MCP requests that are the session's own set-up, not a CRM tool call."""

Status = Literal["ok", "off", "not measured"]


class Check(BaseModel):
    """One assumption and its measurement (``measured`` is None when the bench has none)."""

    name: str
    assumed: float
    measured: float | None
    status: Status
    off_by: float | None
    """(assumed - measured) / measured; None when not measured, or measured 0 and assumed not."""
    source: str


def _result(doc: Mapping[str, Any], scenario: str) -> Mapping[str, Any] | None:
    for result in doc.get("results") or []:
        if isinstance(result, Mapping) and result.get("scenario") == scenario and not result.get("error"):
            return result
    return None


def _ours(doc: Mapping[str, Any], scenario: str) -> Mapping[str, Any]:
    result = _result(doc, scenario)
    ours = result.get("ours") if result is not None else None
    return ours if isinstance(ours, Mapping) else {}


def _tool_calls(counts: Mapping[str, Any]) -> float | None:
    by_method = counts.get("mcp_requests_by_method")
    if not isinstance(by_method, Mapping):
        return None
    return float(sum(int(n) for method, n in by_method.items() if method != _SESSION_SETUP))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def measurements(doc: Mapping[str, Any]) -> dict[str, tuple[float | None, str]]:
    """What the bench document measured, per input name (None: not measured), with where from."""
    if not isinstance(doc.get("results"), list):
        raise InvalidInput("the calibration file is not a `python -m bench run --json` document (no results)")
    turn, click = _ours(doc, TURN), _ours(doc, CLICK)
    turn_counts, click_counts = turn.get("counts") or {}, click.get("counts") or {}
    prompts = [
        float(n)
        for counts in (turn_counts, click_counts)
        for n in (counts.get("prompt_tokens_per_call") or [])
        if _number(n) is not None
    ]
    mode = doc.get("mode", "?")
    where = f"bench ({mode}) {TURN!r}"
    click_where = f"bench ({mode}) {CLICK!r}"
    not_by_bench = "not measured: the bench's model is scripted"
    return {
        "model_calls_per_question": (_number(turn_counts.get("model_calls")), f"{where}: model calls"),
        "model_calls_per_approval": (_number(click_counts.get("model_calls")), f"{click_where}: model calls"),
        "prompt_tokens_per_call": (
            fmean(prompts) if prompts else None,
            "bench: mean prompt of every measured call (characters / 4)",
        ),
        "fixed_prompt_tokens": (
            min(prompts) if prompts else None,
            "bench: smallest prompt, a fresh thread's first call (characters / 4; includes the question)",
        ),
        "tool_calls_per_question": (_tool_calls(turn_counts), f"{where}: MCP tool calls (not tools/list)"),
        "crm_calls_per_approval": (
            _tool_calls(click_counts),
            f"{click_where}: MCP tool calls (not tools/list)",
        ),
        "overhead_seconds_per_run": (
            _number(turn.get("median_seconds")),
            f"{where}: median seconds of a turn with the scripted (instant) model",
        ),
        "completion_tokens_per_call": (None, not_by_bench),
        "model_latency_seconds": (None, not_by_bench),
        "checkpoint_bytes": (
            None,
            "not measured by the bench: tests/integration/test_checkpoint_bytes.py measures it in PostgreSQL",
        ),
        "crm_requests_per_tool_call": (None, "not measured: the sandbox is not the CRM"),
        "crm_seconds_per_request": (None, "not measured: the sandbox is not the CRM"),
    }


def checkpoints_per_run(doc: Mapping[str, Any]) -> list[Check]:
    """The model's structural assumption, one checkpoint per run, against the bench's count."""
    checks = []
    for scenario in (TURN, CLICK):
        writes = _number((_ours(doc, scenario).get("counts") or {}).get("checkpoint_writes"))
        checks.append(_check(f"checkpoint writes per run ({scenario})", 1.0, writes, f"bench {scenario!r}"))
    return checks


def _check(name: str, assumed: float, measured: float | None, source: str) -> Check:
    if measured is None:
        return Check(
            name=name, assumed=assumed, measured=None, status="not measured", off_by=None, source=source
        )
    # Measured 0 against a non-zero assumption is off by an unbounded share (None).
    off = (0.0 if assumed == 0 else None) if measured == 0 else (assumed - measured) / measured
    return Check(
        name=name,
        assumed=assumed,
        measured=measured,
        status="off" if off is None or abs(off) > TOLERANCE else "ok",
        off_by=off,
        source=source,
    )


def calibrate(inputs: CapacityInputs, doc: Mapping[str, Any]) -> list[Check]:
    """Every assumption the bench can speak to, compared; then the ones it cannot, said so."""
    checks = [
        _check(name, float(getattr(inputs, name)), measured, source)
        for name, (measured, source) in measurements(doc).items()
    ]
    return checks + checkpoints_per_run(doc)
