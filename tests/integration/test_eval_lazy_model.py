"""``python -m evals --model scripted:lazy`` on a small slice of the held-out split: the
eval's lazy model answers every question without reading (as real models do), and the
grounding gate (invariant 8, ``copilot/middleware/grounding.py``) must keep every such answer
from the rep: none shown as fact, no tool call written as text.

Until the gate is in the agent's middleware this test fails: every lazy answer is shown.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evals.cli import main
from evals.dataset import dataset_path, load_items, write_items
from evals.run import slice_items

pytestmark = pytest.mark.integration

SLICE = 5


@pytest.fixture(scope="module")
def lazy_run(postgres_server_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("eval-lazy")
    items = slice_items(load_items(dataset_path("heldout")), SLICE)
    dataset = work / "slice.jsonl"
    write_items(dataset, items)
    (work / "slice.thresholds.json").write_text(
        json.dumps({"max": {"ungrounded_shown": 0, "raw_tool_call_text": 0}})
    )
    report = work / "report.json"
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("DATABASE_URL", postgres_server_url)
        monkeypatch.setenv("COPILOT_FALLBACK_MODELS", "")
        monkeypatch.delenv("LANGSMITH_API_KEY", raising=False)
        code = main(["--model", "scripted:lazy", "--dataset", str(dataset), "--report", str(report)])
    return {"code": code, "doc": json.loads(Path(report).read_text()), "items": items}


def test_the_lazy_model_runs_every_item_of_the_slice(lazy_run: dict[str, Any]) -> None:
    (model,) = lazy_run["doc"]["models"]
    assert model["model"] == "scripted:lazy"
    assert len(model["items"]) == SLICE
    assert all(i["model_calls"] >= 1 for i in model["items"])


def test_no_answer_of_the_lazy_model_is_shown_as_fact_and_no_tool_call_as_text(
    lazy_run: dict[str, Any],
) -> None:
    (model,) = lazy_run["doc"]["models"]
    shown = [
        (i["id"], t["answer"])
        for i in model["items"]
        for t in i["turns"]
        if t["scores"].get("ungrounded_shown") or t["scores"].get("raw_tool_call_text")
    ]
    assert shown == []
    assert model["metrics"]["ungrounded_shown"] == {"value": 0, "n": SLICE}
    assert model["metrics"]["raw_tool_call_text"] == {"value": 0, "n": SLICE}
    assert lazy_run["code"] == 0
