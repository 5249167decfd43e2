"""``python -m copilot data export|delete --rep``: one rep's data, every table group, real PostgreSQL.

Two reps are seeded in every table of every layer's data map, with real LangGraph
checkpoints and store items; each command is run as the CLI runs it, and the other rep's
data must come out exactly as it went in.
"""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from copilot.cli import main
from copilot.persistence.checkpoint import setup_langgraph
from copilot.persistence.data_map import load_data_maps
from copilot.persistence.migrations import migrate
from copilot.persistence.pool import CONNECTION_KWARGS
from copilot.persistence.rep_data import delete_rep_data
from tests.support.rep_data_seed import TENANT, SeededRep, seed_rep, snapshot

pytestmark = pytest.mark.integration


async def _connect(url: str) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(url, **CONNECTION_KWARGS)


async def _prepare(url: str) -> tuple[SeededRep, SeededRep]:
    async with await _connect(url) as conn:
        await migrate(conn)
    await setup_langgraph(url)
    async with await _connect(url) as conn:
        suffix = uuid.uuid4().hex[:8]
        return await seed_rep(conn, f"rep-a-{suffix}"), await seed_rep(conn, f"rep-b-{suffix}", turns=3)


def _snapshot(url: str, seeded: SeededRep) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async with await _connect(url) as conn:
            return await snapshot(conn, seeded)

    return asyncio.run(run())


@pytest.fixture
def two_reps(database_url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, SeededRep, SeededRep]:
    monkeypatch.setenv("DATABASE_URL", database_url)
    a, b = asyncio.run(_prepare(database_url))
    return database_url, a, b


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _seeded_counts(seeded: SeededRep) -> dict[str, int]:
    """What the seed put in: one row per mapped table (delegations: the one granted on a thread)."""
    return {t.table: 1 for m in load_data_maps() for t in m.tables}


async def test_every_table_of_the_migrated_schema_is_mapped_or_said_to_hold_no_rep_data(
    database_url, db_conn
):
    await migrate(db_conn)
    await setup_langgraph(database_url)
    cur = await db_conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
    )
    columns: dict[str, set[str]] = {}
    for row in await cur.fetchall():
        columns.setdefault(row["table_name"], set()).add(row["column_name"])
    maps = load_data_maps()
    mapped = {t.table: t for m in maps for t in m.tables}
    explained = {name for m in maps for name in m.not_rep_data}
    assert sorted(set(columns) - set(mapped) - explained) == [], "a table no data map mentions"
    assert set(mapped) & explained == set()
    for table in mapped.values():
        named = {c for match in table.match for c in match.model_dump(exclude={"kind"}).values()}
        named |= set(table.omit_on_export) | ({table.expires} if table.expires else set())
        assert named <= columns[table.table], f"{table.table} names columns it does not have"


def test_export_writes_one_reps_data_in_every_group_and_nothing_of_the_other_rep(two_reps, tmp_path, capsys):
    url, a, b = two_reps
    b_before = _snapshot(url, b)
    out = tmp_path / "export.json"

    code, stdout, stderr = _run(capsys, "data", "export", "--rep", a.rep, "--out", str(out))

    assert code == 0, stderr
    exported = json.loads(out.read_text(encoding="utf-8"))
    assert out.stat().st_mode & 0o077 == 0, "personal data: readable by its owner only"
    expected = _snapshot(url, a)
    checkpoints = sum(v for k, v in expected.items() if k.startswith("checkpoints:"))
    assert exported["groups"]["copilot"] == {
        "threads": 2,
        "thread_delegations": 1,
        "approval_delegations": 1,
        "answered_messages": 1,
        "idempotency_keys": 1,
        "rejections": 1,
        "suggestion_ledger": 1,
        "catchup_marks": 1,
        "checkpoints": checkpoints,
        "store_items": 1,
    }
    assert exported["groups"]["teams"] == {
        "conversations": 1,
        "approval_cards": 1,
        "user_tokens": 1,
        "pending_messages": 1,
        "answers": 1,
        "answer_feedback": 1,
        "brief_settings": 1,
        "brief_claims": 1,
        "digest_claims": 1,
        "digest_feedback": 1,
        "sign_in_prompts": 1,
    }
    assert exported["groups"]["functions"] == {}
    assert exported["audit_rows_kept"] == 1
    assert "compliance record" in exported["note"]
    data = exported["data"]
    assert sorted(t["thread_id"] for t in data["copilot"]["threads"]) == sorted(a.threads)
    assert data["copilot"]["store_items"][0]["value"] == {"tone": "brief", "signature": f"— {a.rep}"}
    assert "ciphertext" not in data["teams"]["user_tokens"][0], "an export never carries the encrypted token"
    assert data["teams"]["pending_messages"][0]["text"] == f"a question from {a.rep}"
    assert data["teams"]["answer_feedback"][0]["comment"] == "too long"
    text = out.read_text(encoding="utf-8")
    assert "question 1 about acc-acme" in text, "the conversation itself (checkpointed messages) is exported"
    assert b.rep not in text
    assert not any(t in text for t in b.threads)
    assert f"copilot: {2 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + checkpoints + 1} exported" in stdout
    assert "teams: 11 exported" in stdout
    assert f"written to {out}" in stdout
    assert "21/21" in stderr, "progress is shown, one step per table"
    assert _snapshot(url, a) == expected, "an export changes nothing"
    assert _snapshot(url, b) == b_before


def test_export_to_stdout_is_the_json_document_and_the_summary_goes_to_stderr(two_reps, capsys):
    _, a, _ = two_reps
    code, stdout, stderr = _run(capsys, "data", "export", "--rep", a.rep, "--tenant", TENANT)
    assert code == 0, stderr
    document = json.loads(stdout)
    assert document["rep"] == a.rep
    assert document["tenant"] == TENANT
    assert document["groups"]["teams"]["user_tokens"] == 1
    assert "teams: 11 exported" in stderr


def test_an_export_for_another_tenant_finds_nothing(two_reps, capsys):
    _, a, _ = two_reps
    code, stdout, _ = _run(capsys, "data", "export", "--rep", a.rep, "--tenant", "another-tenant")
    assert code == 0
    assert json.loads(stdout)["groups"]["copilot"]["threads"] == 0


def test_delete_dry_run_shows_what_would_go_and_changes_nothing(two_reps, capsys):
    url, a, b = two_reps
    a_before, b_before = _snapshot(url, a), _snapshot(url, b)

    code, stdout, stderr = _run(capsys, "data", "delete", "--rep", a.rep, "--dry-run", "--json")

    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["action"] == "dry_run"
    assert report["groups"]["teams"] == dict.fromkeys(
        [
            "sign_in_prompts",
            "digest_feedback",
            "digest_claims",
            "brief_claims",
            "brief_settings",
            "answer_feedback",
            "answers",
            "pending_messages",
            "user_tokens",
            "approval_cards",
            "conversations",
        ],
        1,
    )
    checkpoints = sum(v for k, v in a_before.items() if k.startswith("checkpoints:"))
    assert report["groups"]["copilot"]["checkpoints"] == checkpoints > 0
    assert report["audit_rows_kept"] == 1
    assert _snapshot(url, a) == a_before
    assert _snapshot(url, b) == b_before


def test_delete_asks_first_and_without_a_yes_deletes_nothing(two_reps, capsys, monkeypatch):
    url, a, _ = two_reps
    before = _snapshot(url, a)
    monkeypatch.setattr("sys.stdin", io.StringIO("no\n"))
    code, stdout, stderr = _run(capsys, "data", "delete", "--rep", a.rep)
    assert code == 1
    assert "would be deleted" in stderr
    assert "Type 'delete'" in stderr
    assert "nothing deleted" in stdout
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no terminal, no --yes: nobody said yes
    assert _run(capsys, "data", "delete", "--rep", a.rep)[0] == 1
    assert _snapshot(url, a) == before


def test_delete_removes_one_reps_data_keeps_the_audit_log_and_leaves_the_other_rep_untouched(
    two_reps, capsys, monkeypatch
):
    url, a, b = two_reps
    b_before = _snapshot(url, b)
    deleted_threads: list[str] = []
    real = AsyncPostgresSaver.adelete_thread

    async def spy(self: AsyncPostgresSaver, thread_id: str) -> None:
        deleted_threads.append(thread_id)
        await real(self, thread_id)

    monkeypatch.setattr(AsyncPostgresSaver, "adelete_thread", spy)
    _, planned, _ = _run(capsys, "data", "delete", "--rep", a.rep, "--dry-run", "--json")
    monkeypatch.setattr("sys.stdin", io.StringIO("delete\n"))  # the confirmation, typed

    code, stdout, stderr = _run(capsys, "data", "delete", "--rep", a.rep, "--json")

    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["action"] == "delete"
    assert report["groups"] == json.loads(planned)["groups"], "it deleted exactly what the dry run showed"
    after = _snapshot(url, a)
    assert {k: v for k, v in after.items() if k != "audit_log"} == {
        k: ([] if k == "store" else 0) for k in after if k != "audit_log"
    }
    assert after["audit_log"] == 1, "the audit row is kept as the compliance record"
    assert _snapshot(url, b) == b_before
    assert sorted(deleted_threads) == sorted(t for thread in a.threads for t in (thread, f"{thread}~side"))
    # Again: nothing left to delete, and saying so is not an error.
    code, stdout, _ = _run(capsys, "data", "delete", "--rep", a.rep, "--yes")
    assert code == 0
    assert "total: 0 deleted; audit_log: 1 kept" in stdout


async def test_a_failure_in_a_group_rolls_that_group_back(two_reps_async):
    """One transaction per table group: a deletion that fails midway leaves the group whole."""
    url, a = two_reps_async
    async with await _connect(url) as conn:
        before = await snapshot(conn, a)
        await conn.execute(
            """CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN RAISE EXCEPTION 'refused'; END $$"""
        )
        await conn.execute(
            "CREATE TRIGGER refuse BEFORE DELETE ON rejections FOR EACH ROW EXECUTE FUNCTION refuse()"
        )
        with pytest.raises(psycopg.errors.RaiseException):
            await delete_rep_data(conn, rep=a.rep)
        after = await snapshot(conn, a)
    teams = {t.table for m in load_data_maps() if m.group == "teams" for t in m.tables}
    assert all(after[t] == 0 for t in teams), "the teams group, done first, stays deleted"
    assert {k: v for k, v in after.items() if k not in teams} == {
        k: v for k, v in before.items() if k not in teams
    }, "the copilot group (checkpoints and store included) is rolled back whole"


@pytest.fixture
async def two_reps_async(database_url: str) -> tuple[str, SeededRep]:
    async with await _connect(database_url) as conn:
        await migrate(conn)
    await setup_langgraph(database_url)
    async with await _connect(database_url) as conn:
        return database_url, await seed_rep(conn, f"rep-a-{uuid.uuid4().hex[:8]}")


@pytest.mark.parametrize(
    "argv", [["--rep", ""], ["--rep", " x"], ["--rep", "a\nb"], ["--rep", "a", "--tenant", ""]]
)
def test_a_malformed_rep_is_one_line_and_exit_2(argv, capsys):
    code, _, stderr = _run(capsys, "data", "export", *argv)
    assert code == 2
    assert stderr.startswith("error: --")


def test_export_refuses_an_out_path_in_a_missing_folder(capsys, tmp_path: Path):
    code, _, stderr = _run(
        capsys, "data", "export", "--rep", "x", "--out", str(tmp_path / "no" / "such.json")
    )
    assert code == 2
    assert "--out" in stderr
