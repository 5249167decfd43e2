"""``python -m bench run --rep alex --quick [--json]``: the counts it reports, never its timings,
on the reference profile (JSON) and on the dataverse profile (``CRM_KIND=dataverse``, the table).

The bench runs in-process through the CLI's ``main`` (real PostgreSQL from the session's
server, the sandbox as its own subprocess over HTTP). Timings are noise on a shared
machine, so only what is counted is asserted: MCP sessions and OBO exchanges per scope,
model calls, and that every measured result has a baseline and a ratio.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from bench.cli import main
from bench.stats import percentile

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bench(postgres_server_url: str) -> dict[str, Any]:
    """One quick bench run (module-scoped: under a minute), as its JSON document."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("DATABASE_URL", postgres_server_url)
        capture = _Capture()
        monkeypatch.setattr("sys.stdout", capture)
        code = main(["run", "--rep", "alex", "--quick", "--json"])
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
    assert counts["webapi_requests"] == 0, counts  # the reference CRM has no Web API
    assert counts["checkpoint_writes"] >= 1, counts


@pytest.mark.parametrize("scenario", ["lookup cost", "turn cost"])
def test_a_lookup_and_a_summary_cost_within_a_fifth_of_the_bare_agents_prompt_and_calls(
    bench: dict[str, Any], scenario: str
):
    """Issue 34: the copilot's safety must not make a question cost more than 1.2x a bare
    agent's prompt tokens per call or model calls (counts, not timings: the same every run)."""
    ours = _result(bench, scenario)["ours"]["counts"]
    bare = _result(bench, scenario)["bare"]["counts"]
    assert ours["model_calls"] <= bare["model_calls"] * 1.2, (ours, bare)
    for mine, theirs in zip(ours["prompt_tokens_per_call"], bare["prompt_tokens_per_call"], strict=True):
        assert mine <= theirs * 1.2, (ours["prompt_tokens_per_call"], bare["prompt_tokens_per_call"])


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


# --- The dataverse profile ----------------------------------------------------------------------

RATIO = re.compile(r"^\d+\.\d\dx$")


@pytest.fixture(scope="module")
def dataverse_table(postgres_server_url: str) -> str:
    """One quick bench run on the dataverse profile (``CRM_KIND=dataverse``, no ``CRM_URL``: the
    bench's CRM is its own sandbox's Dataverse face), as the table it prints."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("DATABASE_URL", postgres_server_url)
        monkeypatch.setenv("CRM_KIND", "dataverse")
        for name in ("CRM_URL", "CRM_MCP_URL", "CRM_RESOURCE", "CRM_CA_BUNDLE"):
            monkeypatch.delenv(name, raising=False)
        capture = _Capture()
        monkeypatch.setattr("sys.stdout", capture)
        code = main(["run", "--rep", "alex", "--quick"])
    assert code == 0, capture.text
    return capture.text


def _table_rows(text: str) -> dict[str, list[str]]:
    """The results table's rows by scenario: the cells split on runs of two or more spaces."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("scenario "))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = cells
    return rows


def _count_row(text: str, label: str) -> list[str]:
    """A row of the counts table (``label`` as printed, indented for a breakdown): its numbers."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("count "))
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        indent = line[: len(line) - len(line.lstrip())]
        cells = re.split(r"\s{2,}", line.strip())
        if indent + cells[0] == label:
            return cells[1:]
    raise AssertionError(f"no {label!r} row in the counts table:\n{text}")


def test_the_dataverse_profile_prints_a_table_naming_its_profile_with_ratios(dataverse_table: str):
    header = dataverse_table.splitlines()[0]
    assert header == "copilot bench (quick, 3 interleaved iterations, CRM profile: dataverse)", header
    assert dataverse_table.splitlines()[1].startswith("CRM: the sandbox's Dataverse face"), dataverse_table
    rows = _table_rows(dataverse_table)
    assert {"turn cost", "approve click"} <= rows.keys(), rows
    for scenario in ("turn cost", "approve click", "cold import http"):
        cells = rows[scenario]
        assert any(RATIO.match(cell) for cell in cells), cells
        assert cells[-1].startswith(("bare ", "import ")), cells
    assert "HumanInTheLoopMiddleware on create_record" in rows["approve click"][-1]
    # What stays with the reference profile is listed, with no number, and says why.
    for scenario in ("http ack x1", "bot reply x1", "queue reply x1", "bot reply x50"):
        assert rows[scenario][1:3] == ["not measured", "not measured"], rows[scenario]
    assert "not measured: bot reply x1: reference profile only" in dataverse_table
    assert "not measured: http ack x1: reference profile only" in dataverse_table
    assert "error in" not in dataverse_table


def test_on_dataverse_both_sides_read_with_the_query_tool_and_only_ours_writes_through_the_web_api(
    dataverse_table: str,
):
    # Columns: lookup cost ours, bare, turn cost ours, bare, approve click ours, bare.
    assert _count_row(dataverse_table, "  read_query") == ["1", "1", "2", "2", "0", "0"]
    assert _count_row(dataverse_table, "  create_record") == ["0", "0", "0", "0", "0", "1"]
    assert _count_row(dataverse_table, "  mcp.tools user_impersonation")[1] == "1"  # bare: a session a turn
    assert _count_row(dataverse_table, "model calls") == ["2", "2", "2", "2", "1", "1"]
    # Ours writes the call once through the Web API, by its alternate key (a PATCH on phonecalls).
    web = _count_row(dataverse_table, "  PATCH phonecalls")
    assert web[4] == "1", web
    assert web[5] == "0", web
    assert "upsert_activity" not in dataverse_table


def test_a_crm_kind_that_is_no_profile_is_one_line_and_exit_1(monkeypatch, capsys):
    monkeypatch.setenv("CRM_KIND", "salesforce")
    assert main(["run", "--rep", "alex", "--quick"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: invalid configuration (CRM_KIND)"), err
