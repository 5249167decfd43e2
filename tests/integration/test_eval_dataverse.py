"""``python -m evals`` on the ``dataverse`` profile (``CRM_KIND=dataverse``), in-process
through the CLI's ``main``, with the offline model on a few items of ``heldout.dataverse.jsonl``:
the real ``CopilotService`` against a freshly seeded sandbox's Dataverse face over HTTPS.

The items' expected records are the GUIDs the generator read on that face: each must be cited
(a reference id, or a GUID the answer does not cite, fails the test). Dates are offsets from the
day the eval's own sandbox is seeded (today), as on the reference profile: nothing here depends
on the date.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evals.cli import main
from evals.dataset import EvalItem, dataset_path, load_items, write_items
from sandbox.dataverse.ids import parse_guid

pytestmark = pytest.mark.integration

KINDS = ("lookup.amount", "lookup.contact_by_title", "lookup.last_activity", "pipeline")
"""One item of each: a deal, a contact, an activity and a rep's window, each cited by GUID."""


def _items() -> list[EvalItem]:
    items = load_items(dataset_path("heldout", "dataverse"))
    return [next(i for i in items if i.kind == kind) for kind in KINDS]


def uncited(doc: dict[str, Any], items: list[EvalItem]) -> list[str]:
    """``item id: record`` for every expected record a turn of the report does not cite."""
    (model,) = doc["models"]
    turns = {i["id"]: i["turns"] for i in model["items"]}
    missing: list[str] = []
    for item in items:
        for turn, seen in zip(item.turns, turns.get(item.id, []), strict=False):
            missing += [f"{item.id}: {r}" for r in turn.expect.records if r not in seen["citations"]]
        if len(turns.get(item.id, [])) != len(item.turns):
            missing.append(f"{item.id}: not run")
    return missing


class _Capture:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


@pytest.fixture(scope="module")
def run(postgres_server_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("eval-dataverse")
    items = _items()
    dataset = work / "slice.jsonl"
    write_items(dataset, items)
    (work / "slice.thresholds.json").write_text(json.dumps({"max": {"leaks": 0, "errors": 0}}))
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("DATABASE_URL", postgres_server_url)
        monkeypatch.setenv("COPILOT_MODEL", "offline")
        monkeypatch.setenv("COPILOT_FALLBACK_MODELS", "")
        monkeypatch.setenv("CRM_KIND", "dataverse")
        # The CLI's settings need one; the eval points the copilot at its own sandbox's org URL.
        monkeypatch.setenv("CRM_URL", "https://127.0.0.1:1")
        out, err = _Capture(), _Capture()
        monkeypatch.setattr("sys.stdout", out)
        monkeypatch.setattr("sys.stderr", err)
        code = main(["--dataset", str(dataset), "--report", str(work / "report.json")])
    return {
        "code": code,
        "table": out.text,
        "stderr": err.text,
        "doc": json.loads(Path(work / "report.json").read_text()),
        "items": items,
    }


def test_the_dataverse_items_expect_guids_and_dataverse_reads() -> None:
    for item in _items():
        records = [r for t in item.turns for r in t.expect.records]
        assert records, item
        assert all(parse_guid(r) == r for r in records), item
        assert all(t.expect.tools == [["read_query", "search_data"]] for t in item.turns), item


def test_every_expected_guid_is_cited_on_the_dataverse_profile(run: dict[str, Any]) -> None:
    assert run["doc"]["profile"] == "dataverse"
    assert uncited(run["doc"], run["items"]) == []
    assert run["code"] == 0, run["table"]
    (model,) = run["doc"]["models"]
    assert model["metrics"]["citation_recall"]["value"] == 1.0
    assert model["metrics"]["leaks"]["value"] == 0
    assert all("read_query" in t["tool_calls"] for i in model["items"] for t in i["turns"])


def test_a_guid_the_answer_does_not_cite_is_a_failure(run: dict[str, Any]) -> None:
    """The check above is not vacuous: an expected record nobody cited is reported."""
    item = run["items"][0]
    turn = item.turns[0]
    other = "00000000-0000-5000-8000-000000000000"
    changed = item.model_copy(
        update={
            "turns": [turn.model_copy(update={"expect": turn.expect.model_copy(update={"records": [other]})})]
        }
    )
    assert uncited(run["doc"], [changed]) == [f"{item.id}: {other}"]


def test_the_table_names_the_profile_and_gives_prompt_tokens_per_call(run: dict[str, Any]) -> None:
    assert "(CRM profile dataverse)" in run["table"]
    assert "prompt tokens per model call" in run["table"]
    (model,) = run["doc"]["models"]
    per_call = model["metrics"]["prompt_tokens_per_call"]
    assert per_call["n"] >= len(KINDS)
    assert per_call["value"] > 0
    assert f"eval [offline] {len(KINDS)}/{len(KINDS)}" in run["stderr"]
