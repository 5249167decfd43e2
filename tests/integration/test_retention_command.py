"""``python -m copilot retention status|run`` on a seeded database: ``status`` lists what the
policy keeps and removes, and ``run`` removes exactly that (compared before and after, through
the checkpointer's own API)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from copilot.cli import main
from copilot.persistence import threads
from copilot.persistence.checkpoint import setup_langgraph
from copilot.persistence.migrations import migrate
from copilot.persistence.pool import CONNECTION_KWARGS
from tests.support.rep_data_seed import TENANT, run_turns, seed_rep

pytestmark = pytest.mark.integration


async def _connect(url: str) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(url, **CONNECTION_KWARGS)


async def _seed(url: str) -> dict[str, Any]:
    async with await _connect(url) as conn:
        await migrate(conn)
    await setup_langgraph(url)
    async with await _connect(url) as conn:
        suffix = uuid.uuid4().hex[:8]
        a = await seed_rep(conn, f"rep-a-{suffix}", turns=2)
        b = await seed_rep(conn, f"rep-b-{suffix}", turns=3, token_expired=True)
        # A live thread already at its newest checkpoint: nothing of it goes.
        saver = AsyncPostgresSaver(conn=conn)
        tidy = await threads.create_thread(conn, tenant_id=TENANT, owner_aad_id=a.rep)
        await run_turns(saver, tidy, 2)
        await saver.aprune([tidy], strategy="keep_latest")
        await conn.execute(
            "UPDATE threads SET last_active_at = %s WHERE thread_id = %s",
            (
                datetime.now(UTC) - timedelta(days=40),
                a.threads[0],
            ),
        )
        return {"idle": a.threads[0], "live": [a.threads[1], *b.threads], "tidy": tidy}


async def _state(url: str) -> dict[str, Any]:
    """Checkpoints per graph thread (the saver's alist), thread rows, tokens, audit rows."""
    async with await _connect(url) as conn:
        saver = AsyncPostgresSaver(conn=conn)
        rows = await (await conn.execute("SELECT thread_id FROM threads")).fetchall()
        graph_threads = {r["thread_id"] for r in rows} | {
            f"{r['thread_id']}{threads.SIDE_SUFFIX}" for r in rows
        }
        checkpoints = {}
        for thread_id in sorted(graph_threads):
            checkpoints[thread_id] = [
                c.config["configurable"]["checkpoint_id"]
                async for c in saver.alist({"configurable": {"thread_id": thread_id}})
            ]
        tokens = await (
            await conn.execute(
                "SELECT aad_object_id, expires_at < %s AS expired FROM user_tokens", (datetime.now(UTC),)
            )
        ).fetchall()
        audit = await (await conn.execute("SELECT count(*) AS n FROM audit_log")).fetchone()
        rejections = await (await conn.execute("SELECT count(*) AS n FROM rejections")).fetchone()
        assert audit is not None
        assert rejections is not None
        return {
            "threads": {r["thread_id"] for r in rows},
            "checkpoints": checkpoints,
            "tokens": sorted((t["aad_object_id"], t["expired"]) for t in tokens),
            "audit": audit["n"],
            "rejections": rejections["n"],
        }


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return code, out


@pytest.fixture
def seeded(database_url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, Any]]:
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("COPILOT_RETENTION_DAYS", "30")
    return database_url, asyncio.run(_seed(database_url))


def test_status_lists_what_the_policy_keeps_and_removes_and_run_removes_exactly_that(seeded, capsys):
    url, ids = seeded
    before = asyncio.run(_state(url))

    _, out = _run(capsys, "retention", "status", "--json")
    plan = json.loads(out)

    assert asyncio.run(_state(url)) == before, "status changes nothing"
    assert plan["older_than_days"] == 30
    assert [t["thread_id"] for t in plan["threads"]["expire"]] == [ids["idle"]]
    expire = plan["threads"]["expire"][0]
    assert expire["checkpoints"] == len(before["checkpoints"][ids["idle"]]) + len(
        before["checkpoints"][threads.side_thread_id(ids["idle"])]
    )
    assert sorted(t["thread_id"] for t in plan["threads"]["prune"]) == sorted(ids["live"])
    assert [t["thread_id"] for t in plan["threads"]["keep"]] == [ids["tidy"]]
    assert plan["threads"]["skip"] == []
    assert plan["rows"] == {
        "user_tokens": {"remove": 1, "keep": 1},
        "sign_in_prompts": {"remove": 1, "keep": 1},
    }

    _, out = _run(capsys, "retention", "run", "--json")
    report = json.loads(out)
    after = asyncio.run(_state(url))

    # The expired thread is gone, with every checkpoint of it and of its side thread.
    assert report["expired_threads"] == 1
    assert report["checkpoints_expired"] == expire["checkpoints"]
    assert after["threads"] == before["threads"] - {ids["idle"]}
    assert ids["idle"] not in after["checkpoints"]
    # Each pruned thread lost exactly the checkpoints status said, and kept its newest.
    for entry in plan["threads"]["prune"]:
        thread_id = entry["thread_id"]
        kept = after["checkpoints"][thread_id]
        assert len(before["checkpoints"][thread_id]) - len(kept) == entry["removes"]
        assert len(kept) == entry["keeps"]
        assert kept[0] == before["checkpoints"][thread_id][0], "the newest checkpoint stays"
    assert report["pruned_threads"] == len(plan["threads"]["prune"])
    assert report["checkpoints_deleted"] == sum(t["removes"] for t in plan["threads"]["prune"])
    # The thread already at its newest checkpoint is untouched; so are the side threads of live threads.
    unchanged = {k: v for k, v in before["checkpoints"].items() if k == ids["tidy"] or k.endswith("~side")}
    unchanged.pop(threads.side_thread_id(ids["idle"]))
    assert {k: after["checkpoints"][k] for k in unchanged} == unchanged
    # Expired tokens go, live ones stay; records of what happened are never touched.
    assert report["rows_deleted"] == {"user_tokens": 1, "sign_in_prompts": 1}
    assert after["tokens"] == [t for t in before["tokens"] if not t[1]]
    assert (after["audit"], after["rejections"]) == (before["audit"], before["rejections"])

    # Nothing is left to remove.
    _, out = _run(capsys, "retention", "status", "--json")
    again = json.loads(out)
    assert again["checkpoints"]["remove"] == 0
    assert again["threads"]["expire"] == again["threads"]["prune"] == []
    assert again["rows"] == {
        "user_tokens": {"remove": 0, "keep": 1},
        "sign_in_prompts": {"remove": 0, "keep": 1},
    }
    assert again["checkpoints"]["keep"] == plan["checkpoints"]["keep"]


def test_status_in_text_says_what_goes_and_what_stays(seeded, capsys):
    _, ids = seeded
    _, out = _run(capsys, "retention", "status", "--days", "30")
    assert "policy: threads idle more than 30 days expire" in out
    assert "remove: 1 expired threads" in out
    assert ids["idle"] in out
    assert "remove: 1 expired user_tokens rows" in out
    assert "keep:   1 live user_tokens rows" in out
    assert "keep:   4 live threads" in out
    _, out = _run(capsys, "retention", "run", "--days", "30")
    assert "expired 1 threads" in out
    assert "pruned 3 threads" in out
    assert "deleted 1 expired user_tokens rows" in out


def test_retention_refuses_a_period_under_a_day(capsys):
    assert main(["retention", "status", "--days", "0"]) == 2
    assert "--days" in capsys.readouterr().err
