"""``eval --langsmith``: upload the dataset and record one experiment per model, kept apart from the run.

Without ``LANGSMITH_API_KEY`` this step sends nothing and says so; the eval's exit code is
the metrics' either way. With a key, each item is uploaded once as a LangSmith example
(``evals.experiments.record_experiment``: re-running adds no duplicate) and each
model's results become an experiment of scored runs, named after the dataset, the model, the
time and a random tail.
"""

from __future__ import annotations

import datetime as dt
import statistics
import uuid
from collections.abc import Sequence
from typing import Any

from copilot.settings import Settings
from evals.dataset import EvalItem
from evals.experiments import ExperimentExample, ExperimentResult, record_experiment


def examples(items: Sequence[EvalItem]) -> list[ExperimentExample]:
    """The dataset's items as LangSmith examples: the rep's turns in, the expectations as reference."""
    return [
        ExperimentExample(
            id=item.id,
            inputs={"rep": item.rep, "turns": [turn.text for turn in item.turns]},
            reference={"expect": [turn.expect.model_dump(mode="json") for turn in item.turns]},
            split=item.split,
            metadata={"kind": item.kind, "template": item.template},
        )
        for item in items
    ]


def results(model_report: dict[str, Any]) -> list[ExperimentResult]:
    """One model's per-item results (from the JSON report): answers out, each metric's mean over the turns."""
    found = []
    for item in model_report.get("items", []):
        turns = item.get("turns", [])
        by_metric: dict[str, list[float]] = {}
        for turn in turns:
            for metric, score in (turn.get("scores") or {}).items():
                if isinstance(score, int | float) and not isinstance(score, bool):
                    by_metric.setdefault(metric, []).append(float(score))
        errors = [str(t["error"]) for t in turns if t.get("error")]
        found.append(
            ExperimentResult(
                example_id=str(item["id"]),
                outputs={
                    "answers": [t.get("answer") for t in turns],
                    "tool_calls": [t.get("tool_calls", []) for t in turns],
                    "model_calls": item.get("model_calls"),
                    "tokens": item.get("tokens"),
                },
                scores={metric: statistics.fmean(values) for metric, values in by_metric.items()},
                error="; ".join(errors) or None,
            )
        )
    return found


def langsmith_step(
    settings: Settings, dataset: str, items: Sequence[EvalItem], report: dict[str, Any]
) -> list[str]:
    """Upload when a key is set; the lines to print either way."""
    if settings.langsmith_api_key is None:
        return ["langsmith: LANGSMITH_API_KEY is not set: nothing uploaded"]
    # The time plus a random tail: two runs in one second are two experiments, not a clash.
    stamp = f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
    uploaded = examples(items)
    lines = []
    for model_report in report.get("models", []):
        model = str(model_report.get("model", "model"))
        recorded = record_experiment(
            settings,
            dataset_name=f"crm-copilot-{dataset}",
            examples=uploaded,
            results=results(model_report),
            experiment_name=f"{dataset}-{model}-{stamp}",
            description=f"python -m evals --dataset {dataset}",
            metadata={"model": model, "passed": bool(model_report.get("passed"))},
        )
        where = recorded.url or recorded.experiment_id
        lines.append(f"langsmith: {model}: experiment {recorded.experiment_name} recorded at {where}")
    return lines
