"""Checkpoints per run and bytes per checkpoint, measured in PostgreSQL: the capacity model's
``checkpoint_bytes`` assumption and its "one checkpoint per run".

Real PostgreSQL, the real sandbox over HTTP, the offline model: a rep asks several questions
on one thread, and after each the thread's rows in LangGraph's tables are measured
(:mod:`bench.capacity.checkpoint_bytes`). Then the retention's prune (keep the latest)
leaves one checkpoint, whose bytes are what a thread keeps between days.
"""

from __future__ import annotations

import pytest
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from bench.capacity.checkpoint_bytes import thread_checkpoints
from bench.capacity.model import CapacityInputs
from copilot.persistence.database import connect
from copilot.settings import Settings
from tests.support.copilot_env import service, sign_in

pytestmark = pytest.mark.integration

QUESTIONS = (
    "what's going on with the Acme account?",
    "which opportunities does Acme have?",
    "what's going on with the Acme account?",
    "which opportunities does Acme have?",
)


async def test_each_run_writes_one_checkpoint_and_a_checkpoint_fits_the_capacity_assumption(
    copilot_settings: Settings, capsys
):
    rep = await sign_in(copilot_settings, "alex")
    measured = []
    async with service(copilot_settings) as svc, connect(copilot_settings) as conn:
        thread = None
        for n, question in enumerate(QUESTIONS, start=1):
            result = await svc.run_turn(rep.identity, rep.broker, thread, question)
            thread = result.thread_id
            assert result.answer, result
            now = await thread_checkpoints(conn, thread)
            assert now.checkpoints == n  # durability="exit": one checkpoint per run
            measured.append(now.bytes)
        assert thread is not None
        assert isinstance(svc.saver, AsyncPostgresSaver)
        await svc.saver.aprune([thread], strategy="keep_latest")
        kept = await thread_checkpoints(conn, thread)
    assert kept.checkpoints == 1
    per_run = [b - a for a, b in zip([0, *measured], measured, strict=False)]
    with capsys.disabled():
        print(
            f"\ncheckpoint bytes after each run {measured}; added per run {per_run}; kept after prune {kept.bytes}"
        )
    # The capacity model's default bytes per checkpoint is not below what one measures.
    assert max(per_run) <= CapacityInputs().checkpoint_bytes
    assert kept.bytes <= CapacityInputs().checkpoint_bytes
