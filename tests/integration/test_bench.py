"""``python -m copilot bench --rep alex --quick --json``: the counts it reports, never its timings.

The bench runs in-process through the CLI's ``main`` (real PostgreSQL from the session's
server, the sandbox as its own subprocess over HTTP). Timings are noise on a shared
machine, so only what is counted is asserted: MCP sessions and OBO exchanges per scope,
model calls, and that every measured result has a baseline and a ratio.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.stats import percentile
from copilot.cli import main

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bench(postgres_server_url: str) -> dict[str, Any]:
    """One quick bench run (module-scoped: under a minute), as its JSON document."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("DATABASE_URL", postgres_server_url)
        capture = _Capture()
        monkeypatch.setattr("sys.stdout", capture)
        code = main(["bench", "--rep", "alex", "--quick", "--json"])
    assert code == 0, capture.text
    doc: dict[str, Any] = json.loads(capture.text)
    return doc


class _Capture:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def _result(doc: dict[str, Any], scenario: str) -> dict[str, Any]:
    found = [r for r in doc["results"] if r["scenario"] == scenario]
    assert len(found) == 1, [r["scenario"] for r in doc["results"]]
    return found[0]


def test_every_measured_result_has_a_baseline_and_a_ratio(bench: dict[str, Any]):
    assert bench["mode"] == "quick"
    scenarios = {r["scenario"] for r in bench["results"]}
    assert {
        "turn cost",
        "approve click",
        "bot reply x1",
        "cold import http",
        "cold import http handler",
        "cold import queue",
    } <= scenarios
    for result in bench["results"]:
        assert result["error"] is None, result
        assert result["baseline"], result
        assert isinstance(result["ratio"], float), result
        assert result["ratio"] > 0, result
        assert result["ours"]["samples"] == result["bare"]["samples"] >= 1, result
    # What the quick run leaves out says so, and carries no number (the ack needs Azurite, from npm).
    left_out = {m["scenario"] for m in bench["not_measured"]}
    assert {"http ack x50", "bot reply x50", "queue reply x10", "queue reply x50"} <= left_out
    assert ("http ack x1" in scenarios) != ("http ack x1" in left_out)
    assert ("queue reply x1" in scenarios) != ("queue reply x1" in left_out)
    for entry in bench["not_measured"]:
        assert entry["reason"], entry
        assert entry["baseline"], entry
        assert "ratio" not in entry, entry


@pytest.mark.parametrize("side", ["ours", "bare"])
def test_a_turn_opens_at_most_one_read_session_and_calls_the_model_twice(bench: dict[str, Any], side: str):
    counts = _result(bench, "turn cost")[side]["counts"]
    # Ours keeps the rep's session from their first turn (copilot/tools/session_pool.py);
    # the bare agent opens one per turn.
    assert counts["mcp_sessions_by_scope"] == ({} if side == "ours" else {"crm.read": 1}), counts
    assert "mcp_sessions_by_scope" not in counts["varying"], counts
    # The rep's token is cached after the first turn: no exchange per turn.
    assert counts["obo_exchanges"] == 0, counts
    # Two parallel reads, then the answer: two model calls, each with a prompt.
    assert counts["model_calls"] == 2, counts
    assert len(counts["prompt_tokens_per_call"]) == 2, counts
    assert min(counts["prompt_tokens_per_call"]) > 0, counts
    assert counts["mcp_requests_by_method"].get("get_account") == 1, counts
    assert counts["mcp_requests_by_method"].get("list_opportunities") == 1, counts
    assert counts["checkpoint_writes"] >= 1, counts


@pytest.mark.parametrize("side", ["ours", "bare"])
def test_the_first_turn_exchanges_each_scope_at_most_once(bench: dict[str, Any], side: str):
    first = _result(bench, "turn cost")[side]["first_counts"]
    assert first["mcp_sessions_by_scope"] == {"crm.read": 1}, first
    assert first["obo_exchanges_by_scope"] == {"crm.read": 1}, first


@pytest.mark.parametrize("side", ["ours", "bare"])
def test_an_approve_click_opens_at_most_one_session_per_scope_and_calls_the_model_once(
    bench: dict[str, Any], side: str
):
    result = _result(bench, "approve click")
    for counts in (result[side]["counts"], result[side]["first_counts"]):
        if side == "bare":
            assert counts["mcp_sessions_by_scope"] == {"crm.read crm.write": 1}, counts
        else:
            assert all(n <= 1 for n in counts["mcp_sessions_by_scope"].values()), counts
        assert all(n <= 1 for n in counts["obo_exchanges_by_scope"].values()), counts
    if side == "ours":
        # Kept from the first click: later clicks of the rep open none.
        assert result[side]["counts"]["mcp_sessions_by_scope"] == {}, result[side]["counts"]
        assert counts["model_calls"] == 1, counts
    counts = result[side]["counts"]
    assert "mcp_sessions_by_scope" not in counts["varying"], counts
    assert counts["obo_exchanges"] == 0, counts
    # The write itself went to the CRM exactly once per click.
    assert counts["mcp_requests_by_method"].get("upsert_activity") == 1, counts


def test_latency_rows_report_tails_and_errors(bench: dict[str, Any]):
    latency = [r for r in bench["results"] if r["kind"] == "latency"]
    assert "bot reply x1" in {r["scenario"] for r in latency}
    for result in latency:
        for side in ("ours", "bare"):
            assert result[side]["errors"] == 0, result
            assert result[side]["p95_seconds"] is not None, result
            assert result[side]["p99_seconds"] is not None, result
    for result in (r for r in bench["results"] if r["kind"] == "wall"):
        assert result["ours"]["per_second"] is not None, result


def test_queue_worker_replies_to_every_turn_of_the_quick_run(bench: dict[str, Any]):
    """Through the HTTP trigger, Azurite and the ``turns`` worker: every turn answered (needs Azurite)."""
    if not any(r["scenario"] == "queue reply x1" for r in bench["results"]):
        pytest.skip("no Azurite: the queue path is listed as not measured")
    latency, wall = _result(bench, "queue reply x1"), _result(bench, "queue reply wall/req x1")
    assert latency["ours"]["errors"] == latency["bare"]["errors"] == 0, latency
    assert latency["ours"]["samples"] == latency["bare"]["samples"] == wall["ours"]["samples"], latency


def test_percentiles_interpolate_between_the_closest_samples():
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    samples = [float(n) for n in range(1, 101)]
    assert percentile(samples, 95) == pytest.approx(95.05)
    assert percentile(samples, 99) == pytest.approx(99.01)
    assert percentile(samples, 100) == 100.0


def test_capacity_calibrate_on_this_bench_run_flags_a_deliberately_wrong_assumption(
    bench: dict[str, Any], tmp_path, capsys
):
    """``capacity --calibrate`` on the real ``bench --json`` document of this module's run:
    the measured turn (2 model calls, 2 CRM reads, 1 checkpoint) confirms those defaults,
    and an assumption of 6 model calls per question is flagged."""
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(bench), encoding="utf-8")
    assert main(["capacity", "--calibrate", str(path), "--model-calls-per-question", "6", "--json"]) == 0
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["calibration"]}
    assert checks["model_calls_per_question"]["measured"] == 2
    assert checks["model_calls_per_question"]["status"] == "off"
    assert checks["model_calls_per_question"]["off_by"] == pytest.approx(2.0)
    assert checks["tool_calls_per_question"]["status"] == "ok"
    assert checks["model_calls_per_approval"]["status"] == "ok"
    assert checks["checkpoint writes per run (turn cost)"]["status"] == "ok"
    assert checks["checkpoint writes per run (approve click)"]["status"] == "ok"
    assert checks["model_latency_seconds"]["status"] == "not measured"
    assert main(["capacity", "--calibrate", str(path)]) == 0
    text = capsys.readouterr().out
    assert "model_calls_per_question" in text
    assert "not measured" in text
