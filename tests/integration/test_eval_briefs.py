"""``python -m evals`` on brief items: the held-out split's brief and digest items run through
the product's own ``briefs_at`` and ``digest_at`` as each rep (the sandbox over HTTP, real
PostgreSQL), in-process through the CLI's ``main``, plus one copy of an item whose expected ids
name one the brief does not cite: that item is reported as failing and the run exits 1, while
every stored item passes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evals.cli import main
from evals.dataset import BriefCase, dataset_path, load_dataset, thresholds_path, write_items

pytestmark = pytest.mark.integration

WRONG_ID = "opp-not-in-this-brief"


def _wrong(case: BriefCase) -> BriefCase:
    """``case`` expecting one more id, one no brief cites."""
    first = case.expect.briefs[0]
    wrong = first.model_copy(update={"cited": [*first.cited, WRONG_ID]})
    expect = case.expect.model_copy(update={"briefs": [wrong, *case.expect.briefs[1:]]})
    return case.model_copy(update={"id": f"{case.id}-wrong", "expect": expect})


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
    work = tmp_path_factory.mktemp("eval-briefs")
    stored = load_dataset(dataset_path("heldout")).briefs
    wrong = _wrong(next(c for c in stored if c.kind == "brief" and c.expect.briefs))
    dataset = work / "briefs.jsonl"
    write_items(dataset, [*stored, wrong])
    # The stored bounds (strict: recall 1.0, every count 0).
    thresholds_path(dataset).write_text(thresholds_path(dataset_path("heldout")).read_text())
    report = work / "report.json"
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("DATABASE_URL", postgres_server_url)
        monkeypatch.setenv("COPILOT_MODEL", "offline")
        monkeypatch.setenv("COPILOT_FALLBACK_MODELS", "")
        out, err = _Capture(), _Capture()
        monkeypatch.setattr("sys.stdout", out)
        monkeypatch.setattr("sys.stderr", err)
        code = main(["--dataset", str(dataset), "--report", str(report)])
    return {
        "code": code,
        "text": out.text,
        "stderr": err.text,
        "doc": json.loads(report.read_text()),
        "stored": stored,
        "wrong": wrong,
    }


def test_every_stored_brief_item_runs_and_passes_with_nothing_leaked_or_unverified(
    run: dict[str, Any],
) -> None:
    briefs = run["doc"]["briefs"]
    by_id = {i["id"]: i for i in briefs["items"]}
    assert list(by_id) == [c.id for c in run["stored"]] + [run["wrong"].id]
    for case in run["stored"]:
        item = by_id[case.id]
        assert item["ok"], (case.id, item)
        assert item["error"] is None
        assert item["leaked"] == []
        assert item["unexpected"] == []
        assert item["unverified"] == []
        assert bool(item["text"]) == bool(case.expect.briefs or case.expect.lines), case.id
    assert {c.kind for c in run["stored"]} == {"brief", "digest"}
    assert briefs["metrics"]["leaks"] == {"value": 0, "n": len(run["stored"]) + 1}
    assert briefs["metrics"]["unverified"]["value"] == 0


def test_a_meeting_that_should_get_no_brief_gets_none(run: dict[str, Any]) -> None:
    by_id = {i["id"]: i for i in run["doc"]["briefs"]["items"]}
    for case in run["stored"]:
        if case.kind == "brief" and case.expect.no_brief:
            made = {p["key"] for p in by_id[case.id]["made"]}
            assert not made & {n.meeting_id for n in case.expect.no_brief}, case.id


def test_a_wrong_expected_id_fails_its_item_and_the_run(run: dict[str, Any]) -> None:
    briefs = run["doc"]["briefs"]
    wrong = next(i for i in briefs["items"] if i["id"] == run["wrong"].id)
    assert wrong["ok"] is False
    assert wrong["missing"] == [f"{run['wrong'].expect.briefs[0].meeting_id}: {WRONG_ID}"]
    assert [b["metric"] for b in briefs["breaches"]] == ["citation_recall"]
    assert briefs["passed"] is False
    assert run["doc"]["passed"] is False
    assert run["code"] == 1


def test_the_text_report_has_a_brief_section_with_every_item_and_the_failing_one_marked(
    run: dict[str, Any],
) -> None:
    text = run["text"]
    assert (
        "briefs and digests on briefs (CRM profile reference; the product's briefs_at / digest_at, no model)"
        in text
    )
    assert "— FAIL" in text
    for case in run["stored"]:
        assert f"ok   {case.id} {case.kind}" in text
    assert f"FAIL {run['wrong'].id} brief" in text
    assert f"missing: {run['wrong'].expect.briefs[0].meeting_id}: {WRONG_ID}" in text
    assert run["doc"]["models"] == [], "a dataset of brief items only runs no model"
    assert f"eval [briefs] {len(run['stored']) + 1}/{len(run['stored']) + 1}" in run["stderr"]


def test_a_digest_cites_the_days_customer_meetings_and_deals_it_was_expected_to(run: dict[str, Any]) -> None:
    by_id = {i["id"]: i for i in run["doc"]["briefs"]["items"]}
    digests = [c for c in run["stored"] if c.kind == "digest"]
    assert digests
    for case in digests:
        item = by_id[case.id]
        made = sorted((p["key"], sorted(p["cited"])) for p in item["made"])
        assert made == sorted((line.section, sorted(line.cited)) for line in case.expect.lines)
