"""``python -m copilot ask / resume / chat`` as separate processes, on the embedded PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from copilot import cli
from copilot.persistence import threads
from copilot.persistence.database import connect
from copilot.settings import Settings
from tests.support.copilot_env import sign_in
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


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


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


def test_a_second_change_asked_on_a_waiting_thread_is_proposed_on_its_own_thread_and_resumed_there(
    cli_env, sandbox
):
    """`ask` on a thread whose proposal waits proposes the new change too; `--json` names each
    proposal's thread, and each is resumed there, in a new process, in any order, once."""
    first = _json(_run(cli_env, "ask", "--rep", "alex", "--json", "log a call with Acme about the SLA"))
    thread = first["thread_id"]
    [a] = first["proposals"]
    second = _json(
        _run(
            cli_env, "ask", "--rep", "alex", "--thread", thread, "--json", "log a task for Acme: send the SLA"
        )
    )
    assert second["thread_id"] == thread
    assert len(second["proposals"]) == 2
    assert second["proposals"][0]["tool_call_id"] == a["tool_call_id"]
    b = second["proposals"][-1]
    assert b["tool_call_id"] != a["tool_call_id"]
    assert (a["thread_id"], b["thread_id"] != thread) == (thread, True)
    text = _run(cli_env, "ask", "--rep", "alex", "--thread", thread, "how many open deals does Acme have?")
    assert text.returncode == 0, text.stderr
    for proposal in (b, a):  # the newer first
        decisions = json.dumps([{"tool_call_id": proposal["tool_call_id"], "type": "approve"}])
        args = [
            "resume",
            "--rep",
            "alex",
            "--thread",
            proposal["thread_id"],
            "--decisions",
            decisions,
            "--json",
        ]
        assert _json(_run(cli_env, *args))["proposals"] == []
        assert _run(cli_env, *args[:-1]).returncode == 2, "decided once"
    written = {a["external_id"] for a in sandbox.admin("GET", "/admin/export")["activities"]}
    assert f"{thread}:{a['tool_call_id']}" in written
    assert f"{b['thread_id']}:{b['tool_call_id']}" in written


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
    # Bad input (a thread that is not yours), like an unknown one: exit 2 (it was 1).
    assert stolen.returncode == 2
    assert _one_error_line(stolen).startswith("error: you do not have access to this conversation thread")


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


def test_an_unknown_thread_is_bad_input(cli_env):
    unknown = threads.new_thread_id()
    for command in (
        ["ask", "--rep", "alex", "--thread", unknown, "hi"],
        ["chat", "--rep", "alex", "--thread", unknown],
    ):
        result = _run(cli_env, *command, stdin="what's going on with Acme?\n")
        assert result.returncode == 2, result.stderr  # 1 before
        assert "conversation thread does not exist" in _one_error_line(result)


def test_an_unknown_rep_is_bad_input(cli_env):
    result = _run(cli_env, "ask", "--rep", "nobody-here", "what's going on with Acme?")
    assert result.returncode == 2, result.stderr  # 1 before
    assert "unknown rep 'nobody-here'" in _one_error_line(result)


@pytest.mark.parametrize("question", ["", "  \t "])
def test_an_empty_question_is_refused(cli_env, question):
    result = _run(cli_env, "ask", "--rep", "alex", question)
    assert result.returncode == 2
    assert "the question is empty" in _one_error_line(result)


def _env_of(settings: Settings) -> dict[str, str]:
    """The environment ``Settings()`` reads back as ``settings`` (for ``main`` in-process)."""
    assert settings.database_url is not None
    return {
        "DATABASE_URL": settings.database_url.get_secret_value(),
        "CRM_MCP_URL": settings.crm_mcp_url,
        "GRAPH_BASE_URL": settings.graph_base_url,
        "ENTRA_AUTHORITY": settings.entra_authority,
        "ENTRA_CA_BUNDLE": str(settings.entra_ca_bundle),
    }


async def test_an_old_thread_id_that_starts_with_a_dash_works_with_thread_equals(
    copilot_settings, monkeypatch, capsys
):
    # About 1 id in 64 made before the generator was fixed starts with "-"; those threads
    # are still valid, and `--thread=ID` reaches them (`--thread ID` is an argparse error).
    alex = await sign_in(copilot_settings, "alex")
    old_id = "-" + threads.new_thread_id()[1:]
    async with connect(copilot_settings) as conn:
        await threads.create_thread(
            conn,
            tenant_id=alex.identity.tenant_id,
            owner_aad_id=alex.identity.aad_object_id,
            thread_id=old_id,
        )
    for name, value in _env_of(copilot_settings).items():
        monkeypatch.setenv(name, value)
    argv = ["ask", "--rep", "alex", f"--thread={old_id}", "--json", "what's going on with the Acme account?"]
    # main runs its own event loop: off this test's loop, in a worker thread.
    code = await asyncio.to_thread(cli.main, argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    answer = json.loads(out)
    assert answer["thread_id"] == old_id
    assert "acc-acme" in answer["citations"]


def test_chat_shows_each_proposal_as_a_table_and_applies_an_edit(cli_env, sandbox):
    script = "\n".join(
        [
            # Not the bot test's change: in one session it already holds that one, and a
            # change to the values a record already has is not proposed.
            "push the Acme expansion to Dec 21 and move it to negotiation",
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
    assert "✓ Done: Update an opportunity" in out
    final = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-expansion")["structuredContent"]
    assert final["stage"] == "Negotiation"


def test_a_rep_without_crm_access_is_told_so(cli_env):
    answer = _json(_run(cli_env, "ask", "--rep", "adele", "--json", "my pipeline"))
    assert "don't have access to the CRM" in answer["answer"]


def test_embedded_postgres_lives_under_the_data_dir(cli_env):
    assert (Path(cli_env["COPILOT_DATA_DIR"]) / "postgres" / "PG_VERSION").exists()
