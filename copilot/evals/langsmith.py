"""``eval --langsmith``: the upload of a dataset and its experiment, kept apart from the run.

Without ``LANGSMITH_API_KEY`` this step sends nothing and says so. With a key it hands the
dataset and the JSON report to :data:`uploader`, the one function a LangSmith integration
module fills in (``copilot.evals.langsmith.uploader = ...``); until one does, the step says
that no uploader is installed. Neither case changes the eval's exit code.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from copilot.evals.dataset import EvalItem

Uploader = Callable[[str, Sequence[EvalItem], dict[str, Any]], str]
"""(dataset name, its items, the JSON report) → where the experiment can be seen."""

uploader: Uploader | None = None


def langsmith_step(dataset: str, items: Sequence[EvalItem], report: dict[str, Any]) -> str:
    """Upload when configured; the line to print either way."""
    if not os.environ.get("LANGSMITH_API_KEY"):
        return "langsmith: LANGSMITH_API_KEY is not set: nothing uploaded"
    if uploader is None:
        return "langsmith: no uploader is installed in this build: nothing uploaded"
    return f"langsmith: experiment recorded at {uploader(dataset, items, report)}"
