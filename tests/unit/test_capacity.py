"""The capacity model's arithmetic, its inputs (YAML, flags, bounds) and its calibration.

The worked example is the README's ("Capacity"): its inputs and every output are restated
here, computed by hand; nothing is parsed from the README.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.capacity.calibrate import calibrate
from bench.capacity.config import deployment, inputs
from bench.capacity.model import CapacityInputs, Deployment, estimate
from bench.cli import main
from bench.report import document
from bench.stats import Comparison, Side
from copilot.errors import InvalidInput
from copilot.settings import DEFAULT_RETENTION_DAYS, Settings

# The README's worked example.
EXAMPLE: dict[str, Any] = {
    "active_reps": 1000,
    "questions_per_rep_per_day": 24,
    "peak_hour_share": 0.15,
    "model_calls_per_question": 3,
    "prompt_tokens_per_call": 3000,
    "completion_tokens_per_call": 200,
    "tool_calls_per_question": 4,
    "write_share": 0.25,
}
# The deployment as this repository ships it (settings defaults, host.json 4 + 2).
SHIPPED = Deployment(
    model_call_run_limit=12,
    model_call_thread_limit=200,
    summarization_trigger_tokens=4000,
    thread_idle_rotate_hours=8.0,
    retention_days=30,
    queue_batch_size=4,
    queue_new_batch_threshold=2,
    db_pool_max_size=10,
)


def test_the_deployment_is_read_from_the_settings_defaults_and_host_json():
    found = deployment(Settings())
    assert found == SHIPPED
    assert found.retention_days == DEFAULT_RETENTION_DAYS


def test_the_readme_worked_example_computes_exactly_what_the_readme_says():
    r = estimate(CapacityInputs.model_validate(EXAMPLE), SHIPPED)
    assert r.questions_per_day == 24_000
    assert r.peak_questions_per_second == pytest.approx(1.0)  # 24,000 x 0.15 / 3,600
    assert r.peak_runs_per_second == pytest.approx(1.25)  # + 0.25 approval clicks per question
    assert r.model_calls_per_second == pytest.approx(3.25)  # 3 + 0.25 x 1 per question
    assert r.model_requests_per_minute == pytest.approx(195)
    assert r.model_tokens_per_minute == pytest.approx(624_000)  # 195 x (3,000 + 200)
    shares = {u.limit: u.share for u in r.utilisation}
    assert shares["model requests/min"] == pytest.approx(195 / 2700)
    assert shares["model tokens/min"] == pytest.approx(624_000 / 450_000)  # 138.7 %: over quota
    assert r.binds_first == "model tokens/min"
    assert r.crm_requests_per_question == pytest.approx(4.5)  # 4 + 0.25 x 2
    assert r.crm_requests_per_rep_per_day == pytest.approx(108)
    assert r.crm_requests_per_org_per_day == pytest.approx(108_000)
    assert r.busiest_rep_requests_per_5min == pytest.approx(4.05)  # 24 x 0.15 x 3 / 12 x 4.5
    assert r.busiest_rep_execution_seconds_per_5min == pytest.approx(0.81)
    assert r.salesforce_daily_allocation == 1_100_000  # 100,000 + 1,000 x 1,000
    assert shares["Salesforce daily org API allocation"] == pytest.approx(108_000 / 1_100_000)
    assert r.llm_cost_per_day == pytest.approx(592.8)  # 78,000 calls x $0.0076
    assert r.llm_cost_per_rep_per_day == pytest.approx(0.5928)
    assert r.runs_per_thread_per_day == pytest.approx(30)
    assert r.checkpoints_per_thread == pytest.approx(31)
    assert r.checkpoint_bytes_per_thread == pytest.approx(1_240_000)
    assert r.checkpoints_per_conversation == pytest.approx(32)  # + 1 earlier thread waiting
    # Thread rows: the current one, a new one each day for 30 days, 0.2 others a day.
    assert r.threads_retained == pytest.approx(37_000)  # 1,000 x (1 x (1 + 1 x 30) + 0.2 x 30)
    assert r.checkpoints_total == pytest.approx(38_000)  # 1,000 x (32 + 0.2 x 30)
    assert r.checkpoint_bytes_total == pytest.approx(1_520_000_000)
    # The conversation never meets the thread limit: it rotates at 200 - 2 x 12 calls, which
    # uninterrupted use would reach in 176 / 78 days (the limit itself: 200 / 78 = 2.6 days).
    assert r.thread_calls_before_rotation == 176
    assert r.days_to_headroom_rotation == pytest.approx(176 / 78)
    assert r.rotations_per_conversation_per_day == pytest.approx(1)  # each morning
    assert r.concurrent_runs == pytest.approx(6.875)  # 1 x 6.3 s + 0.25 x 2.3 s
    assert r.functions_instances == 2  # ceil(6.3 / 6)
    assert r.db_connections == 14
    assert r.db_connections_ceiling == 52  # 2 x (10 + 10 + 6)
    assert r.bounds.model_calls_per_second == pytest.approx(15)
    assert r.bounds.prompt_tokens_per_call == pytest.approx(6200)
    assert r.bounds.model_tokens_per_minute == pytest.approx(5_760_000)
    assert r.bounds.llm_cost_per_day == pytest.approx(5040)


def test_a_heavy_rep_rotates_at_the_headroom_as_well_as_after_each_idle_gap():
    # 100 questions a day in one stretch: 325 model calls, past 176 once within the day.
    r = estimate(CapacityInputs.model_validate({**EXAMPLE, "questions_per_rep_per_day": 100}), SHIPPED)
    assert r.rotations_per_conversation_per_day == pytest.approx(2)
    # The current thread then holds half a day's runs: 1 + 125 / 2.
    assert r.checkpoints_per_thread == pytest.approx(63.5)


def test_salesforce_binds_on_its_daily_allocation_when_it_is_the_crm():
    r = estimate(
        CapacityInputs(
            **{
                **EXAMPLE,
                "crm": "salesforce",
                "salesforce_daily_allocation": 100_000,
                "model_tokens_per_minute": 1_000_000,
            }
        ),
        SHIPPED,
    )
    assert r.binds_first == "Salesforce daily org API allocation"  # 108 % (tokens: 62.4 %)
    assert r.utilisation[-1].share == pytest.approx(1.08)


def test_more_model_calls_per_question_than_the_run_limit_is_refused():
    with pytest.raises(InvalidInput, match="model-call limit per run"):
        estimate(CapacityInputs(model_calls_per_question=13), SHIPPED)


def test_flags_override_the_yaml_file_which_overrides_the_defaults(tmp_path: Path):
    path = tmp_path / "capacity.yaml"
    path.write_text("active_reps: 40\nquestions_per_rep_per_day: 5\ncrm: salesforce\n", encoding="utf-8")
    got = inputs(path, {"questions_per_rep_per_day": 9.5, "active_reps": None})
    assert (got.active_reps, got.questions_per_rep_per_day, got.crm) == (40, 9.5, "salesforce")
    assert got.write_share == CapacityInputs().write_share


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("active_reps: [1, 2", "not valid YAML"),
        ("- 1\n- 2\n", "must hold a mapping"),
        ("actve_reps: 3\n", "actve_reps: Extra inputs are not permitted"),
        ("peak_hour_share: 2\n", "peak_hour_share"),
    ],
)
def test_a_bad_config_file_is_one_clear_error_and_exit_2(tmp_path: Path, capsys, text: str, problem: str):
    path = tmp_path / "capacity.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["capacity", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert problem in err
    assert "Traceback" not in err


def test_the_command_prints_the_example_as_json_with_flags(capsys):
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in EXAMPLE.items()]
    assert main(["capacity", *flags, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["peak_questions_per_second"] == pytest.approx(1.0)
    assert doc["binds_first"] == "model tokens/min"
    assert doc["functions_instances"] == 2


def _bench_doc(model_calls: int, prompts: list[int], checkpoint_writes: int = 1) -> dict[str, Any]:
    """A bench document built with the bench's own report functions from stated counts."""

    def side(counts: dict[str, Any], seconds: float) -> Side:
        return Side(seconds=[seconds], counts=[counts])

    turn = {
        "mcp_requests_by_method": {"get_account": 1, "list_opportunities": 1, "tools/list": 1},
        "checkpoint_writes": checkpoint_writes,
        "model_calls": model_calls,
        "prompt_tokens_per_call": prompts,
    }
    click = {
        "mcp_requests_by_method": {"get_account": 1, "upsert_activity": 1, "tools/list": 1},
        "checkpoint_writes": 1,
        "model_calls": 1,
        "prompt_tokens_per_call": [2500],
    }
    comparisons = [
        Comparison("turn cost", "t", "b", ours=side(turn, 0.3), bare=side(turn, 0.3)),
        Comparison("approve click", "c", "b", ours=side(click, 0.4), bare=side(click, 0.4)),
    ]
    return json.loads(json.dumps(document("quick", 1, comparisons, [])))


def test_calibration_flags_an_assumption_off_by_more_than_a_quarter_and_passes_the_rest():
    doc = _bench_doc(model_calls=2, prompts=[2200, 2800])
    checks = {c.name: c for c in calibrate(CapacityInputs(model_calls_per_question=3), doc)}
    assert checks["model_calls_per_question"].status == "off"
    assert checks["model_calls_per_question"].off_by == pytest.approx(0.5)
    assert checks["model_calls_per_approval"].status == "ok"
    assert checks["tool_calls_per_question"].measured == 2  # tools/list is not a tool call
    assert checks["crm_calls_per_approval"].measured == 2
    assert checks["prompt_tokens_per_call"].measured == pytest.approx(2500)  # (2,200 + 2,800 + 2,500) / 3
    assert checks["fixed_prompt_tokens"].measured == 2200
    assert checks["checkpoint writes per run (turn cost)"].status == "ok"
    for unmeasured in ("completion_tokens_per_call", "model_latency_seconds", "checkpoint_bytes"):
        assert checks[unmeasured].status == "not measured"
        assert checks[unmeasured].measured is None


def test_calibration_flags_a_run_that_writes_more_than_one_checkpoint():
    doc = _bench_doc(model_calls=2, prompts=[2500], checkpoint_writes=50)
    checks = {c.name: c for c in calibrate(CapacityInputs(), doc)}
    assert checks["checkpoint writes per run (turn cost)"].status == "off"


def test_calibrate_on_a_file_that_is_not_a_bench_document_is_a_clear_error(tmp_path: Path, capsys):
    path = tmp_path / "bench.json"
    path.write_text('{"something": "else"}', encoding="utf-8")
    assert main(["capacity", "--calibrate", str(path)]) == 2
    assert "not a `python -m bench run --json` document" in capsys.readouterr().err


def test_a_flag_can_satisfy_a_check_across_fields_that_the_file_alone_would_fail(tmp_path: Path):
    path = tmp_path / "capacity.yaml"
    path.write_text("fixed_prompt_tokens: 3000\n", encoding="utf-8")  # above the default prompt (2,500)
    with pytest.raises(InvalidInput, match="fixed_prompt_tokens cannot exceed"):
        inputs(path, {})
    assert inputs(path, {"prompt_tokens_per_call": 4000}).fixed_prompt_tokens == 3000
