"""``python -m evals`` on the held-out near misses (questions next to supported ones that ask
what no tool holds) with the offline model, the real ``CopilotService`` and the sandbox: each
gets an honest limit, and no turn answers a different question (the two metrics' stored
thresholds decide the exit code)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evals.cli import main
from evals.dataset import dataset_path, load_items, thresholds_path, write_items

pytestmark = pytest.mark.integration

NEW_METRICS = ("honest_limit", "answered_different_question")


class _Capture:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def test_every_held_out_near_miss_gets_an_honest_limit_and_none_answers_a_different_question(
    postgres_server_url: str, tmp_path: Path
) -> None:
    items = [i for i in load_items(dataset_path("heldout")) if i.kind in ("near_miss", "lookup.amount")]
    assert sum(i.kind == "near_miss" for i in items) >= 2
    dataset = tmp_path / "near.jsonl"
    write_items(dataset, items)
    stored = json.loads(thresholds_path(dataset_path("heldout")).read_text())
    assert stored["max"]["answered_different_question"] == 0
    bounds = {
        "min": {"honest_limit": stored["min"]["honest_limit"]},
        "max": {"answered_different_question": 0},
    }
    (tmp_path / "near.thresholds.json").write_text(json.dumps(bounds))
    out = _Capture()
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("DATABASE_URL", postgres_server_url)
        monkeypatch.setenv("COPILOT_MODEL", "offline")
        monkeypatch.setenv("COPILOT_FALLBACK_MODELS", "")
        monkeypatch.delenv("LANGSMITH_API_KEY", raising=False)
        monkeypatch.setattr("sys.stdout", out)
        monkeypatch.setattr("sys.stderr", _Capture())
        code = main(["--dataset", str(dataset), "--json", "--report", str(tmp_path / "report.json")])
    (model,) = json.loads(out.text)["models"]
    metrics: dict[str, Any] = model["metrics"]
    assert metrics["honest_limit"]["value"] == 1.0
    assert metrics["answered_different_question"]["value"] == 0
    near = [t for i in model["items"] if i["kind"] == "near_miss" for t in i["turns"]]
    assert all(t["answer"].startswith("I can't answer that yet") for t in near), near
    assert code == 0
