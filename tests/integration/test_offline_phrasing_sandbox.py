"""The offline model answers ordinary phrasing from the real sandbox CRM, over MCP.

Expected values are read from the sandbox at test time (other tests may have changed a
record), so each answer is checked against the CRM, not against a copy of its seed.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from offline_model import OfflineChatModel
from tests.support.copilot_env import service, sign_in
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration


def _read(sandbox: SandboxProcess, tool: str, **args: Any) -> Any:
    result = sandbox.call("alex", tool, **args)
    assert result["isError"] is False, result
    return result["structuredContent"]


async def _answers(copilot_settings: Any, *questions: str) -> list[Any]:
    rep = await sign_in(copilot_settings, "alex")
    results = []
    async with service(copilot_settings, OfflineChatModel()) as svc:
        thread = None
        for question in questions:
            result = await svc.run_turn(rep.identity, rep.broker, thread, question)
            thread = result.thread_id
            results.append(result)
    return results


async def test_counts_titles_fields_and_the_latest_activity_are_answered_from_the_crm(
    copilot_settings, sandbox
):
    acme_deals = _read(sandbox, "list_opportunities", account_id="acc-acme")["items"]
    contacts = _read(sandbox, "list_contacts", account_id="acc-acme")["items"]
    cfo = next(c for c in contacts if c["title"] == "Chief Financial Officer")
    buyer = next(c for c in contacts if "Procurement" in c["title"])
    renewal = _read(sandbox, "get_opportunity", opportunity_id="opp-acme-renewal")
    newest = _read(sandbox, "list_activities", account_id="acc-acme", limit=1)["items"][0]

    count, who, procurement, step, last = await _answers(
        copilot_settings,
        "how many open deals does acme have?",
        "who is the CFO at Acme?",
        "acme's head of procurement",
        "what's the next step on the acme renewal deal?",
        "when did we last talk to acme?",
    )
    assert f"Acme Corporation [acc-acme] has {len(acme_deals)} open opportunities" in count.answer
    assert {d["id"] for d in acme_deals} <= set(count.citations)
    assert (
        who.answer
        == f"{cfo['name']} [{cfo['id']}] is the Chief Financial Officer at Acme Corporation [acc-acme]."
    )
    assert procurement.answer.startswith(f"{buyer['name']} [{buyer['id']}] is the {buyer['title']}")
    assert step.answer == f"The next step on {renewal['name']} [opp-acme-renewal] is: {renewal['next_step']}."
    assert f"[{newest['id']}]" in last.answer
    assert last.answer.startswith("The most recent activity with Acme Corporation [acc-acme]")
    for result in (count, who, procurement, step, last):
        assert result.unverified_citations == []


async def test_another_accounts_deals_are_counted_and_a_follow_up_stays_on_the_deal(
    copilot_settings, sandbox
):
    globex = _read(sandbox, "list_opportunities", account_id="acc-globex")["items"]
    first = globex[0]
    words = first["name"].split("—")[-1].strip().lower()
    count, worth, step = await _answers(
        copilot_settings,
        "How many opps does Globex have?",
        f"how much is the globex {words} worth",
        "and its next step?",
    )
    noun = "open opportunity" if len(globex) == 1 else "open opportunities"
    assert f"Globex Industries [acc-globex] has {len(globex)} {noun}" in count.answer
    assert f"[{first['id']}] is worth" in worth.answer
    assert f"[{first['id']}]" in step.answer
    assert "next step" in step.answer


async def test_activity_in_a_relative_period_counts_only_what_happened_in_it(copilot_settings, sandbox):
    since = (dt.date.today() - dt.timedelta(days=7)).isoformat()
    recent = _read(sandbox, "list_activities", account_id="acc-acme", since=since, limit=100)["items"]
    [result] = await _answers(copilot_settings, "acme activity in the last 7 days")
    noun = "activity" if len(recent) == 1 else "activities"
    assert result.answer.startswith(
        f"{len(recent)} {noun} for Acme Corporation [acc-acme] in the last 7 days"
    )


async def test_a_relative_slip_is_proposed_as_the_deals_own_date_moved(copilot_settings, sandbox):
    renewal = _read(sandbox, "get_opportunity", opportunity_id="opp-acme-renewal")
    expected = (dt.date.fromisoformat(renewal["close_date"]) + dt.timedelta(days=14)).isoformat()
    [slip] = await _answers(copilot_settings, "slip the acme renewal two weeks")
    [proposal] = slip.proposals
    assert proposal.tool == "update_opportunity"
    assert proposal.args == {"opportunity_id": "opp-acme-renewal", "close_date": expected}


async def test_a_date_it_cannot_read_gets_a_question_and_no_proposal(copilot_settings, sandbox):
    [result] = await _answers(copilot_settings, "push the acme renewal until after their board meets")
    assert result.proposals == []
    assert result.answer is not None
    assert result.answer.startswith("What date should the close date move to?")
