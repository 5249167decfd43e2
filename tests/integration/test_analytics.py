"""``python -m copilot analytics`` on a seeded history in a real PostgreSQL.

The history is written through the product's own functions (``audit.append``,
``rejections.record``, an idempotency ``claim`` completed with a conflict outcome), so the
queries read rows exactly as the write guard and the runner leave them.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from copilot.analytics.queries import Filters, fetch
from copilot.analytics.report import AnalyticsReport, summarise, to_text
from copilot.cli import main
from copilot.persistence import audit, idempotency, rejections
from copilot.persistence.audit import AuditEntry
from copilot.persistence.migrations import migrate
from copilot.persistence.pool import open_pool
from copilot.settings import Settings
from copilot.writes import WriteOutcome, write_tool

pytestmark = pytest.mark.integration

NOW = datetime.now(UTC)
THREAD = "thread-" + "a" * 24


def _entry(n: int, tool: str, original: dict[str, Any], edited: dict[str, Any] | None = None, **extra: Any):
    return AuditEntry(
        tenant_id=extra.get("tenant_id", "tenant-a"),
        rep_aad_id="rep-alex",
        thread_id=THREAD,
        tool_call_id=f"call-{n}",
        tool=tool,
        target_record_id=None,
        record_version_read=1,
        original_args=original,
        edited_args=edited,
        decision="edit" if edited is not None else "approve",
        crm_response={"status": "done"},
        proposed_at=NOW,
        decided_at=extra.get("at", NOW),
        executed_at=extra.get("at", NOW),
    )


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return Settings.model_validate(
        {"COPILOT_DATA_DIR": tmp_path, "DATABASE_URL": database_url, "COPILOT_DB_POOL_MIN": 1}
    )


@pytest.fixture
async def seeded(
    db_conn: psycopg.AsyncConnection[Any], database_url: str, settings: Settings
) -> psycopg.AsyncConnection[Any]:
    """The seeded history (see each line), on a migrated database."""
    await migrate(db_conn)
    audit.bind(db_conn, audit.audit_config(settings))
    update, log = "update_opportunity", "log_activity"
    for entry in (
        _entry(1, update, {"opportunity_id": "opp-1", "stage": "Negotiation"}),
        _entry(
            2,
            update,
            {"opportunity_id": "opp-2", "amount": 1000, "close_date": "2026-03-01"},
            {"opportunity_id": "opp-2", "amount": 1500.0, "close_date": "2026-03-11"},
        ),
        _entry(
            3,
            update,
            {"opportunity_id": "opp-3", "amount": 2000, "stage": "Proposal"},
            {
                "opportunity_id": "opp-3",
                "amount": 1800.0,
                "stage": "Negotiation",
                "next_step": "Call the CFO",
            },
        ),
        _entry(6, log, {"type": "call", "subject": "Intro", "account_id": "acc-1"}),
        # Another tenant, and one decided long ago: filtered out below.
        _entry(9, log, {"type": "call", "subject": "Other", "account_id": "acc-9"}, tenant_id="tenant-b"),
        _entry(
            10, log, {"type": "call", "subject": "Old", "account_id": "acc-1"}, at=NOW - timedelta(days=400)
        ),
    ):
        await audit.append(db_conn, entry)
    for n, tool, args, reason in (
        (4, update, {"opportunity_id": "opp-4", "stage": "Closed Won"}, "Wrong stage."),
        (7, log, {"type": "call", "subject": "Follow-up", "account_id": "acc-1"}, "  wrong   STAGE "),
        (8, log, {"type": "meeting", "subject": "Demo", "account_id": "acc-1"}, "Not now"),
    ):
        await rejections.record(
            db_conn,
            tenant_id="tenant-a",
            rep_aad_id="rep-alex",
            thread_id=THREAD,
            tool_call_id=f"call-{n}",
            tool=tool,
            args=args,
            reason=reason,
        )
    await db_conn.execute(
        "INSERT INTO threads (thread_id, tenant_id, owner_aad_id) VALUES (%s, 'tenant-a', 'rep-alex')"
        " ON CONFLICT DO NOTHING",
        (THREAD,),
    )
    pool: AsyncConnectionPool[psycopg.AsyncConnection[DictRow]] = await open_pool(database_url, settings)
    try:
        # An approved update the record had changed under: a conflict, nothing written.
        async with idempotency.claim(
            pool,
            key=idempotency.idempotency_key(THREAD, "call-5"),
            tenant_id="tenant-a",
            rep_aad_id="rep-alex",
            thread_id=THREAD,
            tool_call_id="call-5",
            tool=update,
            args_hash=idempotency.args_hash({"opportunity_id": "opp-5", "stage": "Proposal"}),
        ) as claim:
            await claim.complete(
                WriteOutcome.conflict("changed meanwhile", {"stage": "Closed Lost"}).model_dump()
            )
    finally:
        await pool.close()
    return db_conn


async def _report(conn: psycopg.AsyncConnection[Any], **filters: Any) -> AnalyticsReport:
    return summarise(await fetch(conn, Filters(**filters)), since=None, tenant=filters.get("tenant"))


async def test_seeded_history_gives_exact_rates_per_tool_and_per_field(seeded):
    report = await _report(seeded, tenant="tenant-a", since=NOW - timedelta(days=30))
    tools = {t.tool: t for t in report.tools}
    update, log = tools["update_opportunity"], tools["log_activity"]
    assert (update.proposals, update.approved, update.edited, update.rejected) == (5, 1, 2, 1)
    assert (update.not_executed, update.conflicts) == (1, 1)
    assert (update.approve_rate, update.edit_rate, update.reject_rate) == (0.2, 0.4, 0.2)
    assert (log.proposals, log.approved, log.edited, log.rejected) == (3, 1, 0, 2)
    assert log.reject_rate == pytest.approx(2 / 3)
    assert report.decided == 8
    assert report.conflicts == 1

    fields = {(f.tool, f.field): f for f in report.fields}
    stage = fields[("update_opportunity", "stage")]
    assert (stage.proposals, stage.kept, stage.edited, stage.rejected) == (3, 1, 1, 1)
    amount = fields[("update_opportunity", "amount")]
    assert (amount.proposals, amount.kept, amount.edited, amount.edit_rate) == (2, 0, 2, 1.0)
    assert fields[("update_opportunity", "close_date")].edited == 1
    assert fields[("update_opportunity", "opportunity_id")].edited == 0
    assert fields[("update_opportunity", "next_step")].added_by_rep == 1
    assert fields[("log_activity", "subject")].proposals == 3

    deltas = {(d.tool, d.field): d for d in report.edit_deltas}
    assert deltas[("update_opportunity", "amount")].kind == "number"
    assert deltas[("update_opportunity", "amount")].mean_change == pytest.approx(150.0)  # (+500 - 200) / 2
    assert deltas[("update_opportunity", "close_date")].kind == "date"
    assert deltas[("update_opportunity", "close_date")].mean_change == pytest.approx(10.0)
    assert deltas[("update_opportunity", "stage")].kind == "text"
    assert ("update_opportunity", "opportunity_id") not in deltas

    reasons = [(r.reason, r.count, r.tools) for r in report.top_rejection_reasons]
    assert reasons == [
        ("wrong stage", 2, ["log_activity", "update_opportunity"]),
        ("not now", 1, ["log_activity"]),
    ]
    assert report.model_call_limit_hits == "not recorded"
    assert report.fallbacks == "not recorded"
    assert report.feedback == {"like": 0, "dislike": 0}  # the bot's migration made the table
    if write_tool("undo_write") is None:
        assert report.undo == "0 (there is no undo_write tool yet)"
    else:
        assert report.undo == 0.0


async def test_the_filters_keep_other_tenants_and_older_decisions_out(seeded):
    everything = {t.tool: t for t in (await _report(seeded)).tools}
    assert everything["log_activity"].approved == 3  # tenant-a, tenant-b and the old one
    recent = {t.tool: t for t in (await _report(seeded, since=NOW - timedelta(days=30))).tools}
    assert recent["log_activity"].approved == 2
    tenant_b = {t.tool: t for t in (await _report(seeded, tenant="tenant-b")).tools}
    assert set(tenant_b) == {"log_activity"}
    assert tenant_b["log_activity"].proposals == 1


async def test_the_report_names_fields_and_counts_but_no_record_values(seeded):
    text = to_text(await _report(seeded, tenant="tenant-a"))
    assert "update_opportunity" in text
    assert "close_date" in text
    assert "mean shift +10.0 days" in text
    for value in ("opp-2", "1500", "Call the CFO", "Negotiation", "acc-1", "Intro", "Closed Lost"):
        assert value not in text


async def test_feedback_counts_appear_when_the_feedback_table_exists(seeded):
    # The Teams feedback table comes from the bot's migration when that branch is merged;
    # until then the test creates the columns the query reads.
    await seeded.execute(
        "CREATE TABLE IF NOT EXISTS answer_feedback (id bigserial PRIMARY KEY, conversation_id text NOT NULL,"
        " tenant_id text NOT NULL, aad_object_id text NOT NULL, rating text NOT NULL,"
        " received_at timestamptz NOT NULL DEFAULT now())"
    )
    for tenant, rating in (
        ("tenant-a", "like"),
        ("tenant-a", "like"),
        ("tenant-a", "dislike"),
        ("tenant-b", "like"),
    ):
        await seeded.execute(
            "INSERT INTO answer_feedback (conversation_id, tenant_id, aad_object_id, rating) VALUES ('c', %s, 'r', %s)",
            (tenant, rating),
        )
    assert (await _report(seeded, tenant="tenant-a")).feedback == {"like": 2, "dislike": 1}


async def test_the_command_prints_the_same_figures_as_json(seeded, settings, monkeypatch, capsys):
    monkeypatch.setenv("DATABASE_URL", settings.database_url.get_secret_value())
    monkeypatch.setenv("COPILOT_DATA_DIR", str(settings.data_dir))
    since = (NOW - timedelta(days=30)).date().isoformat()
    # In a thread: the command runs its own event loop, as from a shell.
    assert (
        await asyncio.to_thread(main, ["analytics", "--tenant", "tenant-a", "--since", since, "--json"]) == 0
    )
    doc = json.loads(capsys.readouterr().out)
    tools = {t["tool"]: t for t in doc["tools"]}
    assert tools["update_opportunity"]["edit_rate"] == 0.4
    assert doc["conflicts"] == 1
    with pytest.raises(SystemExit) as exited:  # argparse's own usage error, before any query
        main(["analytics", "--since", "yesterday"])
    assert exited.value.code == 2
    assert "not a date" in capsys.readouterr().err


async def test_filtering_by_reps_counts_exactly_those_reps_decisions(seeded):
    # Megan, same tenant: one approved and one edited update, one rejected call, one thumbs down.
    megan = "rep-megan"
    for entry in (
        _entry(21, "update_opportunity", {"opportunity_id": "opp-21", "stage": "Proposal"}),
        _entry(
            22,
            "update_opportunity",
            {"opportunity_id": "opp-22", "amount": 10},
            {"opportunity_id": "opp-22", "amount": 20},
        ),
    ):
        await audit.append(seeded, replace(entry, rep_aad_id=megan))
    await rejections.record(
        seeded,
        tenant_id="tenant-a",
        rep_aad_id=megan,
        thread_id=THREAD,
        tool_call_id="call-23",
        tool="log_activity",
        args={"type": "call", "subject": "Megan's", "account_id": "acc-1"},
        reason="Duplicate",
    )
    for rep, rating in (("rep-alex", "like"), (megan, "dislike"), (megan, "dislike")):
        await seeded.execute(
            "INSERT INTO answer_feedback (conversation_id, tenant_id, aad_object_id, rating)"
            " VALUES ('c', 'tenant-a', %s, %s)",
            (rep, rating),
        )
    recent = NOW - timedelta(days=30)

    only_megan = await _report(seeded, tenant="tenant-a", since=recent, reps=frozenset({megan}))
    only_alex = await _report(seeded, tenant="tenant-a", since=recent, reps=frozenset({"rep-alex"}))
    both = await _report(seeded, tenant="tenant-a", since=recent, reps=frozenset({"rep-alex", megan}))
    no_one = await _report(seeded, tenant="tenant-a", reps=frozenset())

    tools = {t.tool: t for t in only_megan.tools}
    update, log = tools["update_opportunity"], tools["log_activity"]
    assert (update.proposals, update.approved, update.edited, update.rejected) == (2, 1, 1, 0)
    assert (update.approve_rate, update.edit_rate) == (0.5, 0.5)
    assert (log.proposals, log.rejected, log.reject_rate) == (1, 1, 1.0)
    assert only_megan.decided == 3
    assert only_megan.conflicts == 0
    assert only_megan.feedback == {"like": 0, "dislike": 2}
    assert [(r.reason, r.count) for r in only_megan.top_rejection_reasons] == [("duplicate", 1)]
    fields = {(f.tool, f.field): f for f in only_megan.fields}
    assert (
        fields[("update_opportunity", "amount")].proposals,
        fields[("update_opportunity", "amount")].edit_rate,
    ) == (
        1,
        1.0,
    )
    # Alex's figures are exactly the tenant's before Megan's rows were added.
    alex_tools = {t.tool: t for t in only_alex.tools}
    assert (alex_tools["update_opportunity"].proposals, alex_tools["update_opportunity"].conflicts) == (5, 1)
    assert alex_tools["log_activity"].proposals == 3
    assert only_alex.feedback == {"like": 1, "dislike": 0}
    assert both.decided == only_alex.decided + only_megan.decided == 11
    assert (no_one.decided, no_one.tools, no_one.top_rejection_reasons) == (0, [], [])
