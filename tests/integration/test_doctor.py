"""``python -m copilot doctor`` against the sandbox: green on a good deployed configuration, and
each seeded misconfiguration gives its own named failure (check, setting) and exit code 1.

One environment for the whole module (embedded PostgreSQL, the sandbox, the fake OpenAI
server, the fake LangSmith, Azurite); each case changes a few settings (or one grant) and
puts them back. Most cases run the command's own function in-process (``copilot.doctor.command.main``); the good case
and one bad case also run it as a subprocess, its ``--json`` parsed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from azure.storage.queue import QueueServiceClient
from langchain_core.tracers.langchain import wait_for_all_tracers
from psycopg.conninfo import conninfo_to_dict

from copilot.crm.connector import expected_tools
from copilot.doctor.command import main as doctor
from copilot.doctor.framework import CheckResult, DoctorReport
from copilot.persistence import audit
from copilot.persistence.audit_anchor import FileAnchorStore
from copilot.persistence.audit_keys import generate_key_entry, parse_keys
from copilot.persistence.checkpoint import setup_langgraph
from copilot.persistence.migrations import load_migrations, migrate
from copilot.settings import Settings
from functions.doctor import all_checks
from tests.support.azurite import run_azurite
from tests.support.doctor_env import (
    UNGATED_WRITE_TOOL,
    StubCrm,
    app_package_for,
    closed_url,
    deployed_environment,
    sandbox_tools_with_an_ungated_write,
)
from tests.support.fake_langsmith import FakeLangSmith, running_fake_langsmith
from tests.support.fake_openai import FakeOpenAI, answer
from tests.support.postgres import fresh_database
from tests.support.sandbox_process import PROJECT_ROOT, SandboxProcess

pytestmark = pytest.mark.integration

ALL_CHECKS = [
    "settings.key_vault_references",
    "settings.copilot",
    "settings.bot",
    "bot.credentials",
    "sso.connection",
    "teams.package",
    "database.reachable",
    "database.migrations",
    "database.login",
    "database.grants",
    "database.connections",
    "audit.keys",
    "audit.chain",
    "audit.anchor_append",
    "entra.metadata",
    "crm.endpoint",
    "crm.token",
    "crm.tools",
    "crm.schema",
    "graph.reachable",
    "model.primary",
    "model.fallbacks",
    "langsmith.reachable",
    "queues",
]


async def _migrated(url: str, count: int | None = None) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn, None if count is None else load_migrations()[:count])
    if count is None:
        await setup_langgraph(url)


class Deployment:
    """The shared good environment, and the stand-ins the cases point settings at."""

    def __init__(
        self,
        env: dict[str, str],
        behind_url: str,
        stub_crm_url: str,
        superuser: str,
        langsmith: FakeLangSmith,
    ):
        self.env = env
        self.langsmith = langsmith
        self.behind_url = behind_url
        self.stub_crm_url = stub_crm_url
        self.superuser = superuser


@pytest.fixture(scope="module")
def deployment(
    postgres_server_url: str, sandbox: SandboxProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    anchors = tmp_path_factory.mktemp("doctor") / "anchors.jsonl"
    with (
        fresh_database(postgres_server_url, prefix="doctor") as url,
        fresh_database(postgres_server_url, prefix="doctor_behind") as behind_url,
        FakeOpenAI(policy=lambda request: answer("OK")) as openai,
        running_fake_langsmith() as langsmith,
        run_azurite() as azurite,
    ):
        asyncio.run(_migrated(url))
        asyncio.run(_migrated(behind_url, count=len(load_migrations()) - 1))
        queues = QueueServiceClient.from_connection_string(azurite.connection_string)
        for name in ("copilot-turns", "copilot-turns-poison"):
            queues.create_queue(name)
        packages = anchors.parent
        app_id = sandbox.settings.bot_app_id
        env = deployed_environment(
            database_url=url,
            sandbox=sandbox,
            openai_url=openai.url,
            langsmith_url=langsmith.url,
            queue_connection=azurite.connection_string,
            anchor_file=str(anchors),
            app_package=app_package_for(packages / "good.zip", app_id=app_id),
        )
        # Packages built for another bot, and for this bot at another domain.
        app_package_for(packages / "other-bot.zip", app_id="22222222-2222-4333-8444-555555555555")
        app_package_for(packages / "other-domain.zip", app_id=app_id, domain="old-bot.tailspin-toys.com")
        tools = sandbox_tools_with_an_ungated_write(sandbox, env["COPILOT_DOCTOR_CRM_TOKEN"])
        with StubCrm(tools) as stub:
            yield Deployment(env, behind_url, stub.url, str(conninfo_to_dict(url)["user"]), langsmith)


def _apply(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], changes: dict[str, str | None]) -> None:
    # Only the deployment's settings: nothing of the outer environment leaks in (e.g. DATABASE_URL).
    for name in list(os.environ):
        if name.startswith(
            ("COPILOT_", "LANGSMITH_", "OPENAI_", "AZURE_OPENAI_", "Microsoft", "CRM_", "GRAPH_", "ENTRA_")
        ) or name in ("DATABASE_URL", "AzureWebJobsStorage"):
            monkeypatch.delenv(name)
    for name, value in {**env, **changes}.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


async def _run(
    deployment: Deployment,
    capsys: pytest.CaptureFixture[str],
    changes: dict[str, str | None],
    *,
    as_json: bool,
) -> tuple[int, str, str]:
    """Run the doctor in-process, as ``python -m copilot doctor [--json]`` does: its exit code,
    stdout and stderr. On the tests' event loop: the model clients keep their HTTP client per
    process, as in the one-run-per-process command."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _apply(monkeypatch, deployment.env, changes)
        capsys.readouterr()
        code = await doctor(all_checks(), as_json=as_json)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def _doctor(
    deployment: Deployment, capsys: pytest.CaptureFixture[str], changes: dict[str, str | None] | None = None
) -> tuple[int, DoctorReport, str]:
    """``doctor --json`` in-process: (exit code, the report, the progress lines)."""
    code, out, err = await _run(deployment, capsys, changes or {}, as_json=True)
    return code, DoctorReport.model_validate_json(out), err


def _by_name(report: DoctorReport) -> dict[str, CheckResult]:
    return {c.name: c for c in report.checks}


async def test_a_good_deployed_configuration_passes_every_check(deployment, capsys):
    code, report, progress = await _doctor(deployment, capsys)
    print(progress)
    assert [c.name for c in report.checks] == ALL_CHECKS
    assert {c.name: c.status for c in report.checks} == dict.fromkeys(ALL_CHECKS, "pass"), progress
    assert report.ok
    assert code == 0
    # One progress line per check, as each ran.
    assert len(progress.strip().splitlines()) == len(ALL_CHECKS)
    # Its probes are not traced (LangChain would trace the model calls with LANGSMITH_TRACING on).
    wait_for_all_tracers()
    assert not deployment.langsmith.runs
    # The CRM's expected tools come from its connector (the reference CRM's), and the doctor saw them.
    tools = _by_name(report)["crm.tools"].detail
    reads, writes = expected_tools(Settings(CRM_KIND="reference"))
    assert reads
    assert writes
    for name in (*reads, *writes):
        assert name in tools


KEY_VAULT_REF = "@Microsoft.KeyVault(SecretUri=https://doctor-kv.vault.azure.net/secrets/token-key/)"

# (case, changes, the check that must fail, the setting it must name, a phrase of its detail)
SEEDED: list[tuple[str, dict[str, str | None], str, str, str]] = [
    ("missing_setting", {"CRM_MCP_URL": None}, "settings.copilot", "CRM_MCP_URL", "needs CRM_MCP_URL"),
    ("not_deployed", {"COPILOT_ENVIRONMENT": "local"}, "settings.copilot", "COPILOT_ENVIRONMENT", "local"),
    (
        "unresolved_key_vault_reference",
        {"COPILOT_TOKEN_ENCRYPTION_KEY": KEY_VAULT_REF},
        "settings.key_vault_references",
        "COPILOT_TOKEN_ENCRYPTION_KEY",
        "unresolved Key Vault reference",
    ),
    (
        "malformed_token_key",
        {"COPILOT_TOKEN_ENCRYPTION_KEY": "not-a-fernet-key"},
        "settings.bot",
        "COPILOT_TOKEN_ENCRYPTION_KEY",
        "not a Fernet key",
    ),
    (
        "no_sso_connection",
        {"COPILOT_SSO_CONNECTION": None},
        "settings.bot",
        "COPILOT_SSO_CONNECTION",
        "token service",
    ),
    (
        "database_unreachable",
        {"DATABASE_URL": "postgresql://x@127.0.0.1:1/none"},
        "database.reachable",
        "DATABASE_URL",
        "could not connect",
    ),
    (
        "migrations_behind",
        {"DATABASE_URL": "<behind>"},
        "database.migrations",
        "DATABASE_URL",
        "missing migrations",
    ),
    (
        "superuser_login",
        {"COPILOT_DB_APP_LOGIN": "<superuser>"},
        "database.login",
        "COPILOT_DB_APP_LOGIN",
        "superuser",
    ),
    (
        "wrong_bot_secret",
        {"MicrosoftAppPassword": "a-secret-of-another-app"},
        "bot.credentials",
        "MicrosoftAppPassword",
        "AADSTS7000215",
    ),
    (
        "bot_secret_with_a_newline",
        {"MicrosoftAppPassword": "<bot-secret>\n"},
        "bot.credentials",
        "MicrosoftAppPassword",
        "whitespace",
    ),
    (
        "bot_app_id_with_a_newline",
        {"MicrosoftAppId": "<bot-app>\n"},
        "bot.credentials",
        "MicrosoftAppId",
        "whitespace",
    ),
    (
        "bot_app_id_not_a_guid",
        {"MicrosoftAppId": "crm-copilot-bot"},
        "bot.credentials",
        "MicrosoftAppId",
        "not a GUID",
    ),
    (
        "bot_app_of_another_tenant",
        {"MicrosoftAppId": "99999999-2222-4333-8444-555555555555"},
        "bot.credentials",
        "MicrosoftAppId",
        "AADSTS700016",
    ),
    (
        "bot_tenant_malformed",
        {"MicrosoftAppTenantId": "contoso"},
        "bot.credentials",
        "MicrosoftAppTenantId",
        "neither a tenant id",
    ),
    (
        "bot_tenant_unknown",
        {"MicrosoftAppTenantId": "00000000-0000-0000-0000-0000000000ff"},
        "bot.credentials",
        "MicrosoftAppTenantId",
        "names no tenant",
    ),
    (
        "single_tenant_bot_without_tenant",
        {"MicrosoftAppTenantId": None},
        "bot.credentials",
        "MicrosoftAppTenantId",
        "not set",
    ),
    (
        "sso_connection_missing_at_the_token_service",
        {"COPILOT_SSO_CONNECTION": "crm-copilot-sso-typo"},
        "sso.connection",
        "COPILOT_SSO_CONNECTION",
        "does not know the OAuth connection",
    ),
    (
        "app_package_of_another_bot",
        {"COPILOT_DOCTOR_APP_PACKAGE": "<package-dir>/other-bot.zip"},
        "teams.package",
        "MicrosoftAppId",
        "is not MicrosoftAppId",
    ),
    (
        "app_package_of_another_domain",
        {"COPILOT_DOCTOR_APP_PACKAGE": "<package-dir>/other-domain.zip"},
        "teams.package",
        "BOT_DOMAIN",
        "lack BOT_DOMAIN",
    ),
    (
        "pools_beyond_max_connections",
        {"COPILOT_DB_MAX_INSTANCES": "40"},
        "database.connections",
        "COPILOT_DB_MAX_INSTANCES",
        "usable connections",
    ),
    (
        "bad_audit_key",
        {"COPILOT_AUDIT_HMAC_KEYS": "doctor-k1:c2hvcnQ="},
        "audit.keys",
        "COPILOT_AUDIT_HMAC_KEYS",
        "bytes",
    ),
    (
        "anchor_store_not_appendable",
        {"COPILOT_AUDIT_ANCHOR_FILE": "/proc/doctor/anchors.jsonl"},
        "audit.anchor_append",
        "COPILOT_AUDIT_ANCHOR_FILE",
        "could not append",
    ),
    (
        "authority_unreachable",
        {"ENTRA_AUTHORITY": "<closed-https>"},
        "entra.metadata",
        "ENTRA_AUTHORITY",
        "unreachable",
    ),
    ("crm_unreachable", {"CRM_MCP_URL": "<closed>/mcp"}, "crm.endpoint", "CRM_MCP_URL", "unreachable"),
    (
        "mcp_exposes_an_unexpected_write_tool",
        {"CRM_MCP_URL": "<stub>"},
        "crm.tools",
        "CRM_MCP_URL",
        UNGATED_WRITE_TOOL,
    ),
    (
        "graph_unreachable",
        {"GRAPH_BASE_URL": "<closed>/v1.0"},
        "graph.reachable",
        "GRAPH_BASE_URL",
        "unreachable",
    ),
    (
        "model_endpoint_down",
        {"OPENAI_BASE_URL": "<closed>/v1"},
        "model.primary",
        "COPILOT_MODEL",
        "did not answer",
    ),
    (
        "fallback_model_endpoint_down",
        {"AZURE_OPENAI_ENDPOINT": "<closed>"},
        "model.fallbacks",
        "COPILOT_FALLBACK_MODELS (entry 1)",
        "did not answer",
    ),
    (
        "langsmith_unreachable_with_tracing_on",
        {"LANGSMITH_ENDPOINT": "<closed>"},
        "langsmith.reachable",
        "LANGSMITH_ENDPOINT",
        "unreachable",
    ),
    (
        "missing_queue",
        {"COPILOT_TURN_QUEUE": "copilot-turns-typo"},
        "queues",
        "COPILOT_TURN_QUEUE",
        "copilot-turns-typo",
    ),
]


ALSO_FAILS: dict[str, tuple[str, ...]] = {
    # An unresolved reference is also a malformed value to the setting's own check.
    "settings.key_vault_references": ("settings.bot",),
    # A wrong MicrosoftAppId is also not the app id the uploaded package names.
    "bot.credentials": ("teams.package",),
    # Without the bot's own token the connection cannot be asked about: skipped, not failed.
}
"""Checks that may fail after a case's own, because they see the same fault."""


def _resolve(deployment: Deployment, changes: dict[str, str | None]) -> dict[str, str | None]:
    resolved: dict[str, str | None] = {}
    for name, value in changes.items():
        if value is not None:
            value = (
                value.replace("<behind>", deployment.behind_url)
                .replace("<superuser>", deployment.superuser)
                .replace("<stub>", deployment.stub_crm_url)
                .replace("<closed-https>", closed_url("https"))
                .replace("<closed>", closed_url())
                .replace("<bot-app>", deployment.env["MicrosoftAppId"])
                .replace("<package-dir>", str(Path(deployment.env["COPILOT_DOCTOR_APP_PACKAGE"]).parent))
                .replace("<bot-secret>", deployment.env["MicrosoftAppPassword"])
            )
        resolved[name] = value
    return resolved


@pytest.mark.parametrize(
    ("changes", "check", "setting", "phrase"), [case[1:] for case in SEEDED], ids=[case[0] for case in SEEDED]
)
async def test_each_seeded_misconfiguration_gives_its_named_failure_and_exit_code_1(
    deployment, capsys, changes, check, setting, phrase
):
    code, report, progress = await _doctor(deployment, capsys, _resolve(deployment, changes))
    print(progress)
    failed = [c.name for c in report.failures]
    # Its own failure comes first; anything after it is the same fault seen again downstream.
    assert failed[:1] == [check], progress
    assert set(failed) <= {check, *ALSO_FAILS.get(check, ())}, progress
    result = _by_name(report)[check]
    assert result.status == "fail", progress
    assert setting in (result.setting or ""), result
    assert phrase in result.detail, result
    assert result.fix, result
    assert code == 1
    assert not report.ok


async def test_app_role_grants_wider_than_the_code_gives_are_named(deployment, capsys):
    url = deployment.env["DATABASE_URL"]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("GRANT UPDATE, TRUNCATE ON audit_log TO copilot_app")
    try:
        code, report, progress = await _doctor(deployment, capsys)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("REVOKE UPDATE, TRUNCATE ON audit_log FROM copilot_app")
    assert [c.name for c in report.failures] == ["database.grants"], progress
    result = _by_name(report)["database.grants"]
    assert result.setting == "COPILOT_DB_APP_ROLE"
    assert "TRUNCATE, UPDATE on audit_log" in result.detail
    assert code == 1


async def test_a_chain_written_with_a_key_no_longer_configured_fails_the_chain_check(deployment, capsys):
    env = deployment.env
    config = audit.AuditConfig(
        keyring=parse_keys(env["COPILOT_AUDIT_HMAC_KEYS"]),
        anchors=FileAnchorStore(Path(env["COPILOT_AUDIT_ANCHOR_FILE"])),
        anchor_every=1,
    )
    now = datetime.now(UTC)
    entry = audit.AuditEntry(
        tenant_id="tenant-doctor",
        rep_aad_id="rep-doctor",
        thread_id="thread-" + "d" * 24,
        tool_call_id="call-doctor-1",
        tool="log_activity",
        target_record_id="acc-001",
        record_version_read=1,
        original_args={"account_id": "acc-001", "subject": "Call"},
        edited_args=None,
        decision="approve",
        crm_response={"id": "act-1", "version": 1},
        proposed_at=now,
        decided_at=now,
        executed_at=now,
    )
    async with await psycopg.AsyncConnection.connect(env["DATABASE_URL"], autocommit=True) as conn:
        await audit.append(conn, entry, config=config)

    code, report, progress = await _doctor(deployment, capsys)
    assert code == 0, progress
    assert "1 row(s) verified" in _by_name(report)["audit.chain"].detail

    # The key rows were chained with was dropped from the setting (a botched rotation).
    code, report, progress = await _doctor(
        deployment, capsys, {"COPILOT_AUDIT_HMAC_KEYS": generate_key_entry("k2")}
    )
    assert [c.name for c in report.failures] == ["audit.chain"], progress
    result = _by_name(report)["audit.chain"]
    assert result.setting == "COPILOT_AUDIT_HMAC_KEYS"
    assert "doctor-k1" in result.detail
    assert code == 1


def _subprocess(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "SSL_CERT_FILE")}
    return subprocess.run(
        [sys.executable, "-m", "copilot", "doctor", "--json"],
        cwd=PROJECT_ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_cli_as_a_subprocess_is_green_on_the_good_configuration_and_names_a_fault(deployment):
    good = _subprocess(deployment.env)
    report = DoctorReport.model_validate(json.loads(good.stdout))
    assert good.returncode == 0, good.stderr
    assert report.ok
    assert [c.status for c in report.checks] == ["pass"] * len(ALL_CHECKS)
    assert len(good.stderr.strip().splitlines()) == len(ALL_CHECKS), "one progress line per check"

    bad = _subprocess({**deployment.env, "COPILOT_TURN_QUEUE": "copilot-turns-typo"})
    payload: dict[str, Any] = json.loads(bad.stdout)
    failed = [c for c in payload["checks"] if c["status"] == "fail"]
    assert bad.returncode == 1
    assert [(c["name"], c["setting"]) for c in failed] == [("queues", "COPILOT_TURN_QUEUE")]
    assert "FAIL queues" in bad.stderr


async def test_without_a_crm_token_the_tool_listing_is_skipped_not_passed(deployment, capsys):
    code, report, progress = await _doctor(deployment, capsys, {"COPILOT_DOCTOR_CRM_TOKEN": None})
    assert [(c.name, c.status) for c in report.checks if c.status != "pass"] == [
        ("crm.token", "skip"),
        ("crm.tools", "skip"),
    ], progress
    assert code == 0


async def test_the_text_output_names_the_setting_and_the_fix(deployment, capsys):
    code, out, _ = await _run(deployment, capsys, {"COPILOT_TURN_QUEUE": "copilot-turns-typo"}, as_json=False)
    print(out)
    line = next(line for line in out.splitlines() if line.startswith("FAIL queues"))
    assert "[setting: COPILOT_TURN_QUEUE]" in line
    assert "fix:" in line
    assert out.strip().splitlines()[-1].startswith("doctor: 23 passed, 1 failed")
    assert code == 1


def test_the_doctor_has_its_own_section_in_the_cli_reference():
    text = (Path(PROJECT_ROOT) / "docs" / "CLI.md").read_text(encoding="utf-8")
    for name in ALL_CHECKS:
        assert f"`{name}`" in text, name
