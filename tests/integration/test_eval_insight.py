"""The risk, change and follow-through eval items (``evals/insight.py``, ``evals/datasets/insight.jsonl``), run on
both CRM profiles against a sandbox seeded from a named day, scored against the truth computed
from the sandbox's export: precision and recall of the at-risk set and of the change list,
citation precision 100 %, no leak. The table is printed (``-s``) and written to
``test-artifacts/eval-insight.md``.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path

import pytest

from copilot.crm import connector
from copilot.evidence import Evidence
from copilot.followthrough import follow_throughs_at
from copilot.insight.catchup import catch_up_reads
from copilot.insight.risk import RiskSettings, deal_risks
from copilot.persistence.database import connect
from copilot.settings import Settings
from evals.insight import (
    Score,
    World,
    change_facts,
    change_truth,
    follow_facts,
    follow_truth,
    load_items,
    risk_facts,
    risk_truth,
    supporting,
    table,
)
from sandbox.dataverse.ids import guid_for
from tests.support.copilot_env import prepare_database, sign_in
from tests.support.dataverse_env import dataverse_settings
from tests.support.moments import SEED_DAY, SEED_MIDNIGHT
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

NOW = SEED_MIDNIGHT + timedelta(hours=12)
ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "eval-insight.md"


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    return pinned_sandbox


def _mapper(world: World, profile: str):
    if profile == "reference":
        return lambda record_id: record_id
    kinds = {
        "account": "accounts",
        "opportunity": "opportunities",
        "contact": "contacts",
        "activity": "activities",
    }
    back = {
        guid_for(kind, row["id"]): row["id"]
        for kind, table_name in kinds.items()
        for row in world.export[table_name]
    }
    return back.get


async def test_risk_and_change_items_score_full_marks_on_both_profiles(
    sandbox: SandboxProcess, copilot_settings: Settings, database_url: str
):
    world = World(sandbox.admin("GET", "/admin/export"))
    thresholds = RiskSettings()
    dataverse = dataverse_settings(database_url, sandbox)
    await prepare_database(dataverse)
    rows: dict[tuple[str, str, str], Score] = {}
    for profile, settings in (("reference", copilot_settings), ("dataverse", dataverse)):
        to_sandbox = _mapper(world, profile)
        for item in load_items():
            rep = await sign_in(settings, item.rep)
            readable = world.readable(item.rep)
            async with AsyncExitStack() as stack:
                evidence = Evidence(connector.reads(stack, settings, rep.broker))
                if item.kind == "follow":
                    assert item.at_minutes is not None
                    at = SEED_MIDNIGHT + timedelta(minutes=item.at_minutes)
                    async with connect(settings) as conn:
                        found = await follow_throughs_at(settings, rep.identity, rep.broker, conn, at=at)
                    made, cited = follow_facts(found, to_sandbox)
                    expected = follow_truth(world, item.rep, at)
                elif item.kind == "risk":
                    report = await deal_risks(evidence, thresholds, NOW, today=SEED_DAY)
                    made, cited = risk_facts(report, to_sandbox)
                    expected = risk_truth(world, item.rep, NOW, SEED_DAY, thresholds)
                else:
                    since = NOW - timedelta(days=item.days)
                    _, _, items, _ = await catch_up_reads(evidence, since, NOW)
                    made, cited = change_facts(items, to_sandbox)
                    expected = change_truth(world, item.rep, since, NOW)
            score = rows.setdefault((profile, item.split, item.kind), Score())
            relevant = supporting(world, item.rep, item.kind, expected)
            score.add(item, made, expected, cited, to_sandbox, readable, relevant)
    report_table = table(rows)
    print("\n" + report_table)
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_text(report_table + "\n", encoding="utf-8")
    assert {key[1] for key in rows} == {"dev", "heldout"}
    for key, score in rows.items():
        assert score.expected > 0 or key[2] == "follow", key
        assert (score.precision, score.recall) == (1.0, 1.0), (key, score.misses[:10])
        assert score.citation_precision == 1.0, key
        assert score.leaks == [], key
