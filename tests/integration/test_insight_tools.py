"""``deals_at_risk`` and ``catch_up`` as the agent's read tools (``copilot/agent_tools/insight.py``):
any model may call them (a scripted one here, as a real model would), and the offline model
routes a rep's question to them by their titles; the answers cite exactly the records the
tools returned, which are those the rep's own reads give (computed here as the truth).
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from datetime import timedelta

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from copilot.crm import connector
from copilot.evidence import Evidence
from copilot.insight.catchup import last_catch_up
from copilot.insight.risk import RiskSettings, deal_risks
from copilot.persistence.database import connect
from copilot.settings import Settings
from tests.support.copilot_env import service, sign_in
from tests.support.moments import SEED_DAY, SEED_MIDNIGHT, SteppingClock
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls

pytestmark = pytest.mark.integration

NOW = SEED_MIDNIGHT + timedelta(hours=15)


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    return pinned_sandbox


async def _truth(settings: Settings) -> set[str]:
    rep = await sign_in(settings, "alex")
    async with AsyncExitStack() as stack:
        report = await deal_risks(
            Evidence(connector.reads(stack, settings, rep.broker)), RiskSettings(), NOW, today=SEED_DAY
        )
    return {d.id for d in report.deals}


async def test_the_offline_model_answers_which_deals_are_at_risk_from_the_tool_citing_each_one(
    copilot_settings: Settings,
):
    truth = await _truth(copilot_settings)
    assert truth
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, clock=SteppingClock(NOW)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "which of my deals are at risk?")
    assert result.answer is not None
    assert result.answer.startswith("Deals at risk")
    assert truth <= set(result.citations)
    assert result.unverified_citations == []
    assert "language model" in result.answer  # the notes signal was skipped, and it says so


async def test_the_offline_model_reads_since_friday_for_a_catch_up_and_the_stored_moment_moves(
    copilot_settings: Settings,
):
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, clock=SteppingClock(NOW)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "what changed since Friday?")
    assert result.answer is not None
    # Friday before Wednesday 2026-12-09: the 4th. The analytics add-on moved to Negotiation on the 5th.
    assert result.answer.startswith("What changed since 2026-12-04")
    assert "opp-acme-analytics" in result.citations
    assert "Proposal → Negotiation" in result.answer
    assert "(opp-" not in result.answer  # the tool's own citations are given once, as citations
    assert result.unverified_citations == []
    async with connect(copilot_settings) as conn:
        assert await last_catch_up(conn, rep.identity) == NOW


async def test_any_model_can_call_the_risk_tool_and_cite_what_it_returned(copilot_settings: Settings):
    truth = await _truth(copilot_settings)
    deal = sorted(truth)[0]
    model = ScriptedChatModel(
        steps=[
            calls(call("deals_at_risk")),
            lambda messages: AIMessage(content=f"This deal is at risk [{deal}]; not this one [opp-0000]."),
        ]
    )
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, model, clock=SteppingClock(NOW)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "anything at risk?")
    assert "deals_at_risk" in model.bound_tools  # offered: the question speaks of risk (its cues)
    results = [m for seen in model.received for m in seen if isinstance(m, ToolMessage)]
    assert any(deal in str(m.content) for m in results)
    assert result.citations == [deal]
    assert result.unverified_citations == ["opp-0000"]


async def test_the_offline_model_reads_an_account_named_in_a_catch_up_question_and_keeps_to_it(
    copilot_settings: Settings, sandbox: SandboxProcess
):
    state = sandbox.admin("GET", "/admin/export")
    acme = {"acc-acme"} | {o["id"] for o in state["opportunities"] if o["account_id"] == "acc-acme"}
    acme |= {a["id"] for a in state["activities"] if a["account_id"] == "acc-acme"}
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, clock=SteppingClock(NOW)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "what changed on Acme this week?")
    assert result.answer is not None
    assert result.answer.startswith("What changed since 2026-12-07"), result.answer
    assert result.citations
    assert set(result.citations) <= acme, result.answer
    async with connect(copilot_settings) as conn:
        assert await last_catch_up(conn, rep.identity) is None  # an account's catch-up is not the book's
