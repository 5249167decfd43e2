"""The README's demo questions on the ``dataverse`` profile, answered by the offline model.

The real ``CopilotService`` runs against the sandbox's Dataverse face over HTTPS: the model is
bound the Dataverse MCP server's read-only tools (and the copilot's write tools), gets the
compact schema the copilot built from the server's ``describe`` tool, composes ``read_query``
SQL, and cites the GUIDs the rows hold; the writes it proposes carry those GUIDs.

Expected records are read from the sandbox at test time (the session sandbox is shared and
other tests change records) through its own reference tools, and turned into the GUIDs its
Dataverse face gives them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from copilot.crm.sql_schema import SCHEMAS, prompt_tokens
from copilot.settings import Settings
from copilot.turns import TurnResult
from offline_model import OfflineChatModel
from offline_model.text import quarter_bounds
from sandbox.dataverse.ids import guid_for
from tests.support.copilot_env import prepare_database, service, sign_in
from tests.support.dataverse_env import dataverse_settings
from tests.support.moments import SEED_DAY
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

ACME = guid_for("account", "acc-acme")


@pytest.fixture
async def dv_settings(database_url: str, sandbox: SandboxProcess) -> Settings:
    from copilot.middleware.resilience import reset_breakers

    reset_breakers()
    SCHEMAS.clear()
    settings = dataverse_settings(database_url, sandbox)
    await prepare_database(settings)
    return settings


def _read(sandbox: SandboxProcess, tool: str, **args: Any) -> Any:
    result = sandbox.call("alex", tool, **args)
    assert result["isError"] is False, result
    return result["structuredContent"]


async def _answers(settings: Settings, *questions: str, thread: bool = True) -> list[TurnResult]:
    """Each question's result, in one thread (``thread``) or each in its own."""
    rep = await sign_in(settings, "alex")
    results: list[TurnResult] = []
    async with service(settings, OfflineChatModel(today=SEED_DAY)) as svc:
        thread_id = None
        for question in questions:
            result = await svc.run_turn(rep.identity, rep.broker, thread_id if thread else None, question)
            thread_id = result.thread_id
            results.append(result)
    return results


async def test_the_readme_questions_are_answered_with_cited_guids(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    acme_deals = _read(sandbox, "list_opportunities", account_id="acc-acme")["items"]
    contacts = _read(sandbox, "list_contacts", account_id="acc-acme")["items"]
    cfo = next(c for c in contacts if c["title"] == "Chief Financial Officer")
    renewal = _read(sandbox, "get_opportunity", opportunity_id="opp-acme-renewal")
    start, end = quarter_bounds(SEED_DAY)
    mine = _read(
        sandbox,
        "list_opportunities",
        owner="me",
        closing_after=start.isoformat(),
        closing_before=end.isoformat(),
    )["items"]

    summary, quarter, count, who, step, amount = await _answers(
        dv_settings,
        "summarise Acme",
        "my deals closing this quarter",
        "how many open deals does Acme have?",
        "who is the CFO at Acme?",
        "what's the next step on the acme renewal?",
        "and its amount?",
    )
    deal_guids = {guid_for("opportunity", d["id"]) for d in acme_deals}
    assert {ACME, *deal_guids} <= set(summary.citations), summary.answer
    assert {guid_for("opportunity", d["id"]) for d in mine} <= set(quarter.citations), quarter.answer
    assert f"{len(acme_deals)} open opportunities" in (count.answer or "")
    assert deal_guids <= set(count.citations)
    assert cfo["name"] in (who.answer or "")
    assert guid_for("contact", cfo["id"]) in who.citations
    renewal_guid = guid_for("opportunity", "opp-acme-renewal")
    assert renewal["next_step"] in (step.answer or "")
    assert renewal_guid in step.citations
    assert renewal_guid in amount.citations
    assert f"{renewal['amount']:,.0f}" in (amount.answer or "")
    for result in (summary, quarter, count, who, step, amount):
        assert result.unverified_citations == []
        assert result.proposals == []
    # The model was given the compact schema, built once from the CRM's describe tool.
    assert dv_settings.crm_url is not None
    note = SCHEMAS.cached(dv_settings.crm_url)
    assert note is not None
    assert "- opportunity: opportunityid key" in note
    print(
        f"\ncompact CRM schema from the live describe tool: {prompt_tokens(note)} prompt tokens per model call"
    )


async def test_the_readme_writes_are_proposed_with_the_guids_read(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    contacts = _read(sandbox, "list_contacts", account_id="acc-acme")["items"]
    maria = next(c for c in contacts if c["name"].startswith("Maria"))
    log, update, draft = await _answers(
        dv_settings,
        "log a call with Acme — discussed pricing, next step send proposal",
        "push the Acme renewal to Dec 15 and move it to negotiation",
        "draft a follow-up to Maria at Acme about pricing",
        thread=False,
    )
    assert [p.tool for p in log.proposals] == ["log_activity"]
    assert log.proposals[0].args["account_id"] == ACME
    assert [p.tool for p in update.proposals] == ["update_opportunity"]
    assert update.proposals[0].args["opportunity_id"] == guid_for("opportunity", "opp-acme-renewal")
    assert update.proposals[0].args["stage"] == "Negotiation"
    assert len(draft.proposals) == 1
    assert draft.proposals[0].args["contact_id"] == guid_for("contact", maria["id"])


async def test_an_approved_update_is_written_and_confirmed_citing_the_deal(
    dv_settings: Settings, sandbox: SandboxProcess
) -> None:
    """The approval resumes the run from the checkpoint in a fresh service: the model reads its
    own earlier queries back from the restored messages and confirms the change it proposed."""
    renewal = guid_for("opportunity", "opp-acme-renewal")
    before = _read(sandbox, "get_opportunity", opportunity_id="opp-acme-renewal")
    target = "2027-03-31" if before["close_date"] != "2027-03-31" else "2027-04-30"
    month_day = dt.date.fromisoformat(target).strftime("%b %d").replace(" 0", " ")
    rep = await sign_in(dv_settings, "alex")
    async with service(dv_settings, OfflineChatModel(today=SEED_DAY)) as svc:
        asked = await svc.run_turn(
            rep.identity, rep.broker, None, f"push the Acme renewal to {month_day} {target[:4]}"
        )
    assert [p.tool for p in asked.proposals] == ["update_opportunity"]
    proposal = asked.proposals[0]
    assert proposal.args["opportunity_id"] == renewal
    assert proposal.args["close_date"] == target
    try:
        async with service(dv_settings, OfflineChatModel(today=SEED_DAY)) as svc:
            done = await svc.decide(
                rep.identity,
                rep.broker,
                asked.thread_id,
                [{"tool_call_id": proposal.tool_call_id, "type": "approve"}],
            )
        assert done.outcomes[0]["result"]["status"] == "done", done.outcomes
        assert _read(sandbox, "get_opportunity", opportunity_id="opp-acme-renewal")["close_date"] == target
        assert done.answer is not None
        assert renewal in done.citations
        assert done.unverified_citations == []
    finally:
        # The session sandbox is shared: put the close date back.
        now = _read(sandbox, "get_opportunity", opportunity_id="opp-acme-renewal")
        sandbox.call(
            "alex",
            "update_opportunity",
            opportunity_id="opp-acme-renewal",
            expected_version=now["version"],
            changes={"close_date": before["close_date"]},
        )
