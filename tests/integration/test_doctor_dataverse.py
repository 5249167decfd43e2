"""``python -m copilot doctor`` and ``python -m copilot crm prepare`` on the ``dataverse`` profile,
against the sandbox's Dataverse emulator (a real subprocess; its knobs seed each fault).

The doctor runs in-process through the CLI's own entry point (``copilot.cli.main``) with
``--only crm``: the CRM checks and the settings checks they need. The settings name no database
or model, which those checks never reach.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from typing import Any

import pytest

from copilot import cli
from copilot.doctor.framework import CheckResult, DoctorReport
from tests.support.dataverse import dv_token, knobs, webapi
from tests.support.dataverse_env import dataverse_environment
from tests.support.sandbox_process import PROJECT_ROOT, SandboxProcess

pytestmark = pytest.mark.integration

CRM_CHECKS = ["crm.endpoint", "crm.token", "crm.tools", "crm.schema"]
OTHER_APP = "0c412cc3-0dd6-449b-987f-05b053db9457"
"""Some other client app (the Dataverse CLI's id): the allow-list holds it instead of ours."""
_OUR_PREFIXES = (
    "COPILOT_",
    "LANGSMITH_",
    "OPENAI_",
    "AZURE_OPENAI_",
    "Microsoft",
    "CRM_",
    "GRAPH_",
    "ENTRA_",
)


@pytest.fixture
def environment(sandbox: SandboxProcess, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Only the dataverse profile's settings in this process's environment (nothing leaks in)."""
    for name in list(os.environ):
        if name.startswith(_OUR_PREFIXES) or name in ("DATABASE_URL", "AzureWebJobsStorage"):
            monkeypatch.delenv(name)
    env = dataverse_environment(sandbox)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def _command(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _doctor(capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, CheckResult], str]:
    code, out, err = _command(capsys, "doctor", "--json", "--only", "crm")
    report = DoctorReport.model_validate_json(out)
    return code, {c.name: c for c in report.checks}, err


def _prepare(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = _command(capsys, "crm", "prepare", "--json", *extra)
    return code, (json.loads(out) if code == 0 else {}), err


def _one_error_line(err: str, phrase: str) -> None:
    assert err.count("\n") == 1, err
    assert err.startswith("error: "), err
    assert phrase in err, err


def _statuses(results: dict[str, CheckResult]) -> dict[str, str]:
    return {name: r.status for name, r in results.items() if name.startswith("crm.")}


def test_the_doctor_passes_every_crm_check_on_a_prepared_dataverse_environment(environment, capsys):
    code, results, progress = _doctor(capsys)
    assert _statuses(results) == dict.fromkeys(CRM_CHECKS, "pass"), progress
    assert code == 0
    assert "queries run through read_query(querytext)" in results["crm.tools"].detail
    assert environment["CRM_URL"] in results["crm.token"].detail
    assert "new_copilotkey on phonecall, appointment, task, opportunity" in results["crm.schema"].detail
    # Only the settings checks and the CRM's ran (--only crm).
    assert all(name.startswith(("settings.", "crm.")) for name in results)


def test_an_app_missing_from_the_allowed_mcp_clients_gets_the_403_named_with_the_admin_fix(
    sandbox, environment, capsys
):
    with knobs(sandbox, dataverse_allowed_mcp_clients=[OTHER_APP]):
        code, results, progress = _doctor(capsys)
        tools = results["crm.tools"]
        assert tools.status == "fail", progress
        assert "HTTP 403" in tools.detail
        assert f"the app {sandbox.settings.bot_app_id} is not an allowed MCP client" in tools.detail
        assert tools.setting == "MicrosoftAppId"
        assert tools.fix is not None
        assert "Dataverse Model Context Protocol > Advanced settings" in tools.fix
        assert f"--allow-mcp-client {sandbox.settings.bot_app_id}" in tools.fix
        assert "isenabled=true" in tools.fix
        assert code == 1

        # The fix, as the admin: the app's row is added (enabled), and the doctor passes.
        code, report, err = _prepare(capsys, "--allow-mcp-client", sandbox.settings.bot_app_id)
        assert code == 0, err
        assert report["steps"][-1] == {
            "table": None,
            "what": "allowed_mcp_client",
            "name": sandbox.settings.bot_app_id,
            "action": "created",
        }
        code, results, progress = _doctor(capsys)
        assert _statuses(results) == dict.fromkeys(CRM_CHECKS, "pass"), progress
        # Run again, it finds the row enabled and changes nothing.
        code, report, err = _prepare(capsys, "--allow-mcp-client", sandbox.settings.bot_app_id)
        assert [s["action"] for s in report["steps"]] == ["exists"] * len(report["steps"])


def test_a_disabled_allowed_mcp_client_row_is_switched_on_by_crm_prepare(sandbox, environment, capsys):
    with knobs(sandbox, dataverse_allowed_mcp_clients=[OTHER_APP]):
        admin = environment["COPILOT_CRM_ADMIN_TOKEN"]
        body = {"applicationid": sandbox.settings.bot_app_id, "name": "copilot", "isenabled": False}
        assert webapi(sandbox, "POST", "allowedmcpclients", token=admin, json=body).status_code == 204
        assert _doctor(capsys)[1]["crm.tools"].status == "fail"
        code, report, err = _prepare(capsys, "--allow-mcp-client", sandbox.settings.bot_app_id)
        assert code == 0, err
        assert report["steps"][-1]["action"] == "enabled"
        assert _doctor(capsys)[1]["crm.tools"].status == "pass"


def test_a_missing_key_column_and_alternate_key_are_named_and_crm_prepare_makes_the_doctor_pass(
    sandbox, environment, capsys
):
    with knobs(sandbox, dataverse_key_column_present=False):
        code, results, progress = _doctor(capsys)
        schema = results["crm.schema"]
        assert schema.status == "fail", progress
        assert "no column new_copilotkey on phonecall, appointment, task, opportunity" in schema.detail
        assert "no alternate key over new_copilotkey on phonecall, appointment, task" in schema.detail
        assert schema.setting == "CRM_DATAVERSE_KEY_COLUMN"
        assert "python -m copilot crm prepare" in (schema.fix or "")
        assert code == 1
        # Without the key, the writer's create-only upsert by key is refused.
        upsert = webapi(sandbox, "PATCH", "phonecalls(new_copilotkey='dv-doctor-1')", json={"subject": "x"})
        assert upsert.status_code == 400, upsert.text

        # A rep (no System Administrator role) may not create metadata: exit 1, one line, 403.
        code, _, err = _prepare(capsys, "--token-env", "COPILOT_DOCTOR_CRM_TOKEN")
        assert code == 1
        _one_error_line(err, "HTTP 403")

        code, report, err = _prepare(capsys)
        assert code == 0, err
        assert [(s["what"], s["table"], s["action"]) for s in report["steps"]] == [
            ("key_column", "phonecall", "created"),
            ("key_column", "appointment", "created"),
            ("key_column", "task", "created"),
            ("key_column", "opportunity", "created"),
            ("alternate_key", "phonecall", "created"),
            ("alternate_key", "appointment", "created"),
            ("alternate_key", "task", "created"),
        ]
        keys = webapi(sandbox, "GET", "EntityDefinitions(LogicalName='task')/Keys").json()["value"]
        assert [k["KeyAttributes"] for k in keys] == [["new_copilotkey"]]

        code, results, progress = _doctor(capsys)
        assert _statuses(results) == dict.fromkeys(CRM_CHECKS, "pass"), progress
        assert code == 0

        # Idempotent: a second run finds everything and creates nothing.
        code, report, err = _prepare(capsys)
        assert code == 0, err
        assert {s["action"] for s in report["steps"]} == {"exists"}


def test_a_crm_url_other_than_the_tokens_audience_is_named_as_an_audience_mismatch(
    sandbox, environment, capsys, monkeypatch
):
    # The same emulator under another host name: reachable, but not the environment the token is for.
    elsewhere = f"https://localhost:{sandbox.settings.https_port}"
    monkeypatch.setenv("CRM_URL", elsewhere)
    code, out, err = _command(capsys, "doctor", "--json", "--only", "crm")
    results = {c.name: c for c in DoctorReport.model_validate_json(out).checks}
    token = results["crm.token"]
    assert token.status == "fail", err
    assert token.setting == "CRM_URL"
    assert sandbox.settings.org_url in token.detail
    assert elsewhere in token.detail
    assert results["crm.endpoint"].status == "pass"
    assert [results[n].status for n in ("crm.tools", "crm.schema")] == ["skip", "skip"]
    assert code == 1
    # The token is decoded, never printed.
    assert environment["COPILOT_DOCTOR_CRM_TOKEN"] not in out + err


def test_a_token_the_mcp_server_refuses_with_401_is_named_as_a_token_problem(
    sandbox, monkeypatch, environment, capsys
):
    # The right audience, but without the mcp.tools scope: /api/mcp answers 401, not 403.
    monkeypatch.setenv("COPILOT_DOCTOR_CRM_TOKEN", dv_token(sandbox, "alex", ["user_impersonation"]))
    code, results, progress = _doctor(capsys)
    assert results["crm.token"].status == "pass", progress
    tools = results["crm.tools"]
    assert tools.status == "fail", progress
    assert "HTTP 401" in tools.detail
    assert "not an allowed MCP client" not in tools.detail
    assert tools.setting == "CRM_URL"
    assert "mcp.tools" in (tools.fix or "")
    assert code == 1


def test_a_removed_query_tool_is_named_as_the_missing_read_capability(sandbox, environment, capsys):
    with knobs(sandbox, dataverse_mcp_tool_names={"read_query": None}):
        code, results, progress = _doctor(capsys)
    tools = results["crm.tools"]
    assert tools.status == "fail", progress
    assert "no read-only tool that can run a read-only query (one SQL SELECT string)" in tools.detail
    assert "the copilot cannot answer questions over CRM records" in tools.detail
    assert "read_query" not in tools.detail.split("read-only tools:")[1].split(")")[0]
    assert code == 1


def test_a_renamed_query_tool_is_accepted_by_its_shape(sandbox, environment, capsys):
    with knobs(sandbox, dataverse_mcp_tool_names={"read_query": "run_sql"}):
        code, results, progress = _doctor(capsys)
    assert _statuses(results) == dict.fromkeys(CRM_CHECKS, "pass"), progress
    assert code == 0
    assert "queries run through run_sql(querytext) (found by its shape" in results["crm.tools"].detail


@pytest.mark.parametrize(
    ("argv", "env", "phrase"),
    [
        (["--allow-mcp-client", "not-a-guid"], {}, "a GUID"),
        (["--token-env", "COPILOT_NO_SUCH_TOKEN"], {}, "no admin token"),
        ([], {"CRM_KIND": "reference", "CRM_MCP_URL": "http://127.0.0.1:1/mcp"}, "CRM_KIND=dataverse"),
    ],
    ids=["bad_app_id", "no_token", "reference_profile"],
)
def test_crm_prepare_refuses_bad_input_with_one_line_and_exit_code_2(
    environment, capsys, monkeypatch, argv, env, phrase
):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out, err = _command(capsys, "crm", "prepare", "--json", *argv)
    assert code == 2
    assert out == ""
    _one_error_line(err, phrase)


ADMIN_SECTION = "## 11. Connect Dynamics 365 Sales"


def _section_commands() -> list[str]:
    """The ``python -m copilot`` lines of the admin guide's Dynamics section, in order."""
    text = (PROJECT_ROOT / "docs" / "ADMIN.md").read_text(encoding="utf-8")
    section = text.split(ADMIN_SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_every_command_of_the_admin_guides_dynamics_section_runs_against_the_emulator(sandbox):
    commands = _section_commands()
    assert commands == [
        'python -m copilot crm prepare --allow-mcp-client "$MicrosoftAppId"',
        "python -m copilot crm prepare",
        "python -m copilot doctor --only crm",
        "python -m copilot doctor --only crm --json",
    ]
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env = {**base, **dataverse_environment(sandbox)}
    # An environment as the guide finds it: no key column, and the app not an allowed MCP client.
    with knobs(sandbox, dataverse_key_column_present=False, dataverse_allowed_mcp_clients=[OTHER_APP]):
        runs = []
        for command in commands:
            assert command.startswith("python -m copilot ")
            line = shlex.quote(sys.executable) + command.removeprefix("python")
            runs.append(
                subprocess.run(
                    ["bash", "-c", line],
                    cwd=PROJECT_ROOT,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
            )
    for command, run in zip(commands, runs, strict=True):
        assert run.returncode == 0, f"{command}\n{run.stdout}\n{run.stderr}"
    first, again, doctor, doctor_json = (run.stdout for run in runs)
    assert f"created  allowed MCP client {sandbox.settings.bot_app_id}" in first
    assert "created  column phonecall.new_copilotkey" in first
    assert "crm prepare: 0 change(s)" in again
    assert "doctor: 7 passed, 0 failed, 0 skipped" in doctor
    report = DoctorReport.model_validate_json(doctor_json)
    assert report.ok
    assert [c.name for c in report.checks if c.name.startswith("crm.")] == CRM_CHECKS
