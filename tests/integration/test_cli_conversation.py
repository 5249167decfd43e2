"""``python -m copilot ask / resume / chat`` as separate processes, on the embedded PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.sandbox_process import PROJECT_ROOT, SandboxProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cli_env(sandbox: SandboxProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A copilot environment with NO ``DATABASE_URL``: the embedded PostgreSQL is used."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        {
            "COPILOT_DATA_DIR": str(tmp_path_factory.mktemp("copilot-data")),
            "CRM_MCP_URL": sandbox.settings.mcp_url,
            "GRAPH_BASE_URL": f"{sandbox.settings.http_base_url}/v1.0",
            "ENTRA_AUTHORITY": sandbox.settings.idp_base_url,
            "ENTRA_CA_BUNDLE": str(sandbox.settings.ca_cert_path),
        }
    )
    migrated = _run(env, "db", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    return env


def _run(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "copilot", *args],
        cwd=PROJECT_ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _json(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def test_ask_stops_at_a_proposal_and_resume_in_a_new_process_executes_it(cli_env, sandbox):
    asked = _json(
        _run(
            cli_env,
            "ask",
            "--rep",
            "alex",
            "--json",
            "log a call with Acme — discussed pricing, next step send proposal",
        )
    )
    assert asked["answer"] is None
    assert {"thread_id", "answer", "citations", "proposals"} <= set(asked)
    proposal = asked["proposals"][0]
    assert proposal["tool"] == "log_activity"
    assert proposal["args"]["account_id"] == "acc-acme"
    assert proposal["args"]["type"] == "call"
    assert proposal["record"]["target"]["id"] == "acc-acme"
    key = f"{asked['thread_id']}:{proposal['tool_call_id']}"
    assert not [a for a in sandbox.admin("GET", "/admin/export")["activities"] if a["external_id"] == key]

    decisions = json.dumps([{"tool_call_id": proposal["tool_call_id"], "type": "approve"}])
    resumed = _json(
        _run(
            cli_env,
            "resume",
            "--rep",
            "alex",
            "--thread",
            asked["thread_id"],
            "--decisions",
            decisions,
            "--json",
        )
    )

    assert resumed["proposals"] == []
    assert resumed["answer"]
    assert resumed["citations"]
    rows = [a for a in sandbox.admin("GET", "/admin/export")["activities"] if a["external_id"] == key]
    assert len(rows) == 1
    assert "pricing" in (rows[0]["notes"] + rows[0]["subject"]).lower()
    # The same decision again, from yet another process: refused, nothing written twice.
    again = _run(cli_env, "resume", "--rep", "alex", "--thread", asked["thread_id"], "--decisions", decisions)
    assert again.returncode == 2
    assert "not waiting for a decision" in again.stderr
    assert (
        len([a for a in sandbox.admin("GET", "/admin/export")["activities"] if a["external_id"] == key]) == 1
    )
    verified = _run(cli_env, "audit", "verify")
    assert verified.returncode == 0
    assert "intact" in verified.stdout


def test_ask_answers_with_citations_the_crm_returned(cli_env):
    answer = _json(_run(cli_env, "ask", "--rep", "alex", "--json", "what's going on with the Acme account?"))
    assert "acc-acme" in answer["citations"]
    assert answer["unverified_citations"] == []
    assert all(f"[{cited}]" in answer["answer"] for cited in answer["citations"])


def test_an_empty_result_is_said_plainly(cli_env):
    answer = _json(_run(cli_env, "ask", "--rep", "alex", "--json", "summarise Zyxwv Quantum Holdings"))
    assert "found no" in answer["answer"].lower()
    assert answer["citations"] == []


def test_another_rep_cannot_resume_the_thread(cli_env):
    asked = _json(_run(cli_env, "ask", "--rep", "alex", "--json", "log a call with Acme about onboarding"))
    decisions = json.dumps([{"tool_call_id": asked["proposals"][0]["tool_call_id"], "type": "approve"}])
    stolen = _run(
        cli_env, "resume", "--rep", "megan", "--thread", asked["thread_id"], "--decisions", decisions
    )
    assert stolen.returncode == 1
    assert "error:" in stolen.stderr
    assert "Traceback" not in stolen.stderr


def test_malformed_decisions_get_a_clear_error(cli_env):
    asked = _json(_run(cli_env, "ask", "--rep", "alex", "--json", "log a task for Acme: send contract"))
    bad = _run(
        cli_env,
        "resume",
        "--rep",
        "alex",
        "--thread",
        asked["thread_id"],
        "--decisions",
        '[{"type": "maybe"}]',
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: invalid decisions")
    not_json = _run(
        cli_env, "resume", "--rep", "alex", "--thread", asked["thread_id"], "--decisions", "{oops"
    )
    assert not_json.returncode == 2
    assert "not valid JSON" in not_json.stderr


def test_chat_shows_each_proposal_as_a_table_and_applies_an_edit(cli_env, sandbox):
    script = "\n".join(
        [
            "push the Acme expansion to Dec 20 and move it to proposal",
            "edit stage=Daydreaming",  # invalid: re-prompted, nothing written
            "edit stage=Negotiation",
            "quit",
        ]
    )
    chat = _run(cli_env, "chat", "--rep", "alex", stdin=script + "\n")
    assert chat.returncode == 0, chat.stderr
    out = chat.stdout
    assert "Proposal 1 of 1: Update an opportunity" in out
    assert "field" in out
    assert "current" in out
    assert "proposed" in out
    assert "Daydreaming" in out  # the error names the bad value
    assert "✓ update_opportunity executed" in out
    final = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-expansion")["structuredContent"]
    assert final["stage"] == "Negotiation"


def test_a_rep_without_crm_access_is_told_so(cli_env):
    answer = _json(_run(cli_env, "ask", "--rep", "adele", "--json", "my pipeline"))
    assert "don't have access to the CRM" in answer["answer"]


def test_embedded_postgres_lives_under_the_data_dir(cli_env):
    assert (Path(cli_env["COPILOT_DATA_DIR"]) / "postgres" / "PG_VERSION").exists()
