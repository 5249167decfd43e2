"""A write tool added as one registry entry is usable end to end with the offline model:
asked for by its title, proposed, approved through the real service, executed once
(issue 23: the offline model's write roles are not a closed list)."""

from __future__ import annotations

import pytest

from offline_model.model import OfflineChatModel
from tests.support.copilot_env import service, sign_in
from tests.support.dummy_write import DUMMY_TOOL, EXECUTED, dummy_write

__all__ = ["dummy_write"]  # the fixture, used by name

pytestmark = pytest.mark.integration


async def test_the_offline_model_proposes_a_new_write_tool_asked_for_by_its_title_and_runs_it_once_approved(
    copilot_settings, dummy_write
):
    rep = await sign_in(copilot_settings, "alex")
    EXECUTED.clear()
    async with service(copilot_settings, OfflineChatModel()) as svc:
        asked = await svc.run_turn(
            rep.identity, rep.broker, None, "Pin a silver dummy badge on acc-acme, please"
        )
        [proposal] = asked.proposals
        assert proposal.tool == DUMMY_TOOL
        assert proposal.args["account_id"] == "acc-acme"
        assert proposal.args["colour"] == "silver"
        assert EXECUTED == []  # nothing runs before the rep decides

        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": proposal.tool_call_id, "type": "edit", "args": {"label": "Champion"}}],
        )

    [plan] = EXECUTED
    assert plan.args.model_dump()["label"] == "Champion"
    assert plan.args.model_dump()["colour"] == "silver"
    assert "pin a dummy badge" in (done.answer or "").lower()
    assert not done.proposals


async def test_a_rejected_proposal_of_a_new_write_tool_runs_nothing_and_says_so(
    copilot_settings, dummy_write
):
    rep = await sign_in(copilot_settings, "alex")
    EXECUTED.clear()
    async with service(copilot_settings, OfflineChatModel()) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "Pin a gold dummy badge on acc-acme")
        [proposal] = asked.proposals
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": proposal.tool_call_id, "type": "reject", "reason": "not yet"}],
        )

    assert EXECUTED == []
    assert "did not pin a dummy badge" in (done.answer or "").lower()
    assert "not yet" in (done.answer or "")


async def test_a_message_that_does_not_use_the_new_tools_title_is_not_a_proposal_of_it(
    copilot_settings, dummy_write
):
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, OfflineChatModel()) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "What deals do I have open?")

    assert all(p.tool != DUMMY_TOOL for p in asked.proposals)
    assert asked.answer


async def test_the_offline_models_help_names_the_new_write_tool_by_its_title(copilot_settings, dummy_write):
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, OfflineChatModel()) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "What can you do?")

    assert "pin a dummy badge, for your approval" in (asked.answer or "").lower()
