"""``python -m evals`` with the offline model on a small slice of the held-out split and
its brief items: the real ``CopilotService``, the sandbox over HTTP and real PostgreSQL,
in-process through the CLI's ``main``. What is asserted is what the command promises (every item
scored, the brief items run once beside the model and reported, a report file, the threshold
decides the exit code, ``--langsmith`` without a key is a no-op that says so, with one it uploads
to a fake LangSmith), never the offline model's quality (``make eval`` measures that)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from copilot.settings import Settings
from evals.cli import main
from evals.dataset import dataset_path, load_dataset, load_items, thresholds_path, write_items
from evals.langsmith import langsmith_step
from evals.run import slice_items
from tests.support.fake_langsmith import running_fake_langsmith

pytestmark = pytest.mark.integration

SLICE = 7


@pytest.fixture(scope="module")
def run(postgres_server_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("eval")
    items = slice_items(load_items(dataset_path("heldout")), SLICE)
    briefs = load_dataset(dataset_path("heldout")).briefs
    dataset = work / "slice.jsonl"
    write_items(dataset, [*items, *briefs])
    # One bound no model can meet (so the exit code must say so), the leak bound, and the
    # brief items' stored (strict) bounds.
    stored = json.loads(thresholds_path(dataset_path("heldout")).read_text())
    (work / "slice.thresholds.json").write_text(
        json.dumps({"min": {"tool_choice": 1.01}, "max": {"leaks": 0}, "briefs": stored["briefs"]})
    )
    report = work / "report.json"
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("DATABASE_URL", postgres_server_url)
        monkeypatch.setenv("COPILOT_MODEL", "offline")
        monkeypatch.setenv("COPILOT_FALLBACK_MODELS", "")
        monkeypatch.delenv("LANGSMITH_API_KEY", raising=False)
        out, err = _Capture(), _Capture()
        monkeypatch.setattr("sys.stdout", out)
        monkeypatch.setattr("sys.stderr", err)
        code = main(["--dataset", str(dataset), "--json", "--langsmith", "--report", str(report)])
    return {
        "code": code,
        "doc": json.loads(out.text),
        "stderr": err.text,
        "file": json.loads(Path(report).read_text()),
        "items": items,
        "briefs": briefs,
    }


class _Capture:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def test_every_item_of_the_slice_is_run_through_the_copilot_and_scored(run: dict[str, Any]) -> None:
    (model,) = run["doc"]["models"]
    assert model["model"] == "offline"
    assert [i["id"] for i in model["items"]] == [i.id for i in sorted(run["items"], key=lambda i: i.stateful)]
    assert all(i["model_calls"] >= 1 and i["tokens"] > 0 for i in model["items"])
    assert all(t["tool_calls"] for i in model["items"] for t in i["turns"])
    assert model["metrics"]["errors"]["value"] == 0
    assert model["metrics"]["leaks"]["value"] == 0
    assert run["file"] == run["doc"]


def test_the_offline_model_shows_no_ungrounded_answer_and_no_raw_tool_call_text(run: dict[str, Any]) -> None:
    (model,) = run["doc"]["models"]
    metrics = model["metrics"]
    assert metrics["ungrounded_shown"] == {"value": 0, "n": SLICE}, "every slice item expects CRM facts"
    assert metrics["raw_tool_call_text"] == {"value": 0, "n": SLICE}
    assert all(t["tools_run"] for i in model["items"] for t in i["turns"]), "each turn read the CRM"


def test_a_metric_below_its_stored_threshold_fails_the_run(run: dict[str, Any]) -> None:
    assert run["code"] == 1
    (model,) = run["doc"]["models"]
    assert [b["metric"] for b in model["breaches"]] == ["tool_choice"]
    assert run["doc"]["passed"] is False


def test_the_brief_items_run_once_beside_the_model_and_are_reported_passing(run: dict[str, Any]) -> None:
    briefs = run["doc"]["briefs"]
    assert [i["id"] for i in briefs["items"]] == [b.id for b in run["briefs"]]
    assert all(i["ok"] for i in briefs["items"]), [i for i in briefs["items"] if not i["ok"]]
    assert briefs["passed"] is True
    assert briefs["breaches"] == []
    assert briefs["metrics"]["citation_recall"]["value"] == 1.0
    assert f"eval [briefs] {len(run['briefs'])}/{len(run['briefs'])}" in run["stderr"]
    (model,) = run["doc"]["models"]
    assert len(model["items"]) == SLICE, "brief items are not run as the model's items"


def test_progress_is_shown_and_langsmith_without_a_key_sends_nothing(run: dict[str, Any]) -> None:
    assert f"eval [offline] {SLICE}/{SLICE}" in run["stderr"]
    assert "LANGSMITH_API_KEY is not set: nothing uploaded" in run["stderr"]


def test_a_missing_dataset_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--dataset", str(tmp_path / "none.jsonl")]) == 2
    assert "no dataset at" in capsys.readouterr().err


def test_eval_langsmith_with_a_key_uploads_the_items_once_and_records_an_experiment_per_model(
    run: dict[str, Any], postgres_server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = run["items"]
    with running_fake_langsmith() as fake:
        monkeypatch.setenv("DATABASE_URL", postgres_server_url)
        monkeypatch.setenv("LANGSMITH_API_KEY", "ls-test-key")
        monkeypatch.setenv("LANGSMITH_ENDPOINT", fake.url)
        settings = Settings()
        first = langsmith_step(settings, "slice", items, run["doc"])
        again = langsmith_step(settings, "slice", items, run["doc"])

    assert len(first) == len(again) == 1
    assert first[0].startswith("langsmith: offline: experiment slice-offline-")
    assert len(fake.examples) == len(items), "each item uploaded once, however often the eval runs"
    experiments = [s for s in fake.sessions.values() if str(s.get("name", "")).startswith("slice-offline-")]
    assert len(experiments) == 2
    scored = [r for r in fake.runs.values() if r.get("reference_example_id")]
    assert len(scored) == 2 * len(items)
    keys = {f["key"] for f in fake.feedback}
    assert {"correctness", "tool_choice", "leaks"} <= keys
