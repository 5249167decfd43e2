"""``python -m evals``: the eval's command line (tooling, never shipped with the product).

``python -m evals [--model M] [--dataset D] [--json] [--langsmith] [--limit N] [--report PATH]``
scores the copilot's answers on a dataset, per model; ``python -m evals --generate [--check]``
rebuilds the datasets (:mod:`evals.command`). Errors follow ``python -m copilot``'s convention
(:func:`copilot.cli.guarded`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from copilot.cli import guarded
from copilot.settings import Settings


def _parser() -> argparse.ArgumentParser:
    evals = argparse.ArgumentParser(
        prog="python -m evals",
        description="score the copilot's answers on a dataset, per model (see README, 'Evals')",
    )
    evals.add_argument(
        "--model",
        help="evaluate this model only (default: COPILOT_MODEL and each fallback); "
        "scripted:lazy is the eval's model that answers without reading",
    )
    evals.add_argument("--dataset", help="dataset name (dev, heldout) or a .jsonl path; default heldout")
    evals.add_argument("--json", action="store_true", help="the JSON report on stdout instead of the tables")
    evals.add_argument("--langsmith", action="store_true", help="upload dataset and experiment to LangSmith")
    evals.add_argument("--limit", type=int, help="a slice of at most N items, every item kind represented")
    evals.add_argument(
        "--report", help="where to write the JSON report (default .data/eval/<dataset>-report.json)"
    )
    evals.add_argument(
        "--generate",
        action="store_true",
        help="rebuild the datasets from a freshly seeded sandbox, then exit",
    )
    evals.add_argument(
        "--check",
        action="store_true",
        help="with --generate: only compare with the stored datasets (exit 1 if stale)",
    )
    return evals


def main(argv: Sequence[str] | None = None) -> int:
    """Run the eval; returns the process exit code."""
    args = _parser().parse_args(argv)

    def evaluate(settings: Settings) -> int:
        from evals.command import main as evaluate_main

        return evaluate_main(
            settings,
            model=args.model,
            dataset=args.dataset,
            as_json=args.json,
            langsmith=args.langsmith,
            limit=args.limit,
            report_path=args.report,
            generate=args.generate,
            check=args.check,
        )

    return guarded(Settings, evaluate)
