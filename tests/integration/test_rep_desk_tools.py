"""The rep's desk as read tools (``copilot/agent_tools/rep_desk.py``): what waits for approval,
the brief of the next meeting, today's digest, approval delegations and stats, asked in the
rep's own words (not a command's wording) and answered by the offline model from the tools,
with the records cited. These were the bot's parsed commands; now any model understands them,
and so does the terminal chat.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from copilot.settings import Settings
from copilot.views import DeskView
from tests.support.copilot_env import service, sign_in
from tests.support.moments import SEED_MIDNIGHT, SEED_MORNING, SteppingClock
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

NOW = SEED_MIDNIGHT + timedelta(hours=15)


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    return pinned_sandbox


async def test_anything_waiting_on_my_approval_lists_the_proposal_waiting_on_another_thread(
    copilot_settings: Settings,
) -> None:
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, clock=SteppingClock(NOW)) as svc:
        proposed = await svc.run_turn(rep.identity, rep.broker, None, "log a call with Acme: pricing review")
        assert proposed.proposals
        record = proposed.proposals[0].record
        assert record is not None
        account = str(record["target"]["id"])

        result = await svc.run_turn(rep.identity, rep.broker, None, "anything waiting on my approval?")
    assert result.answer is not None
    assert "Log an activity" in result.answer
    assert account in result.citations
    assert result.unverified_citations == []
    assert not result.proposals  # a new thread: nothing of its own waits


async def test_nothing_waiting_is_said_plainly(copilot_settings: Settings) -> None:
    rep = await sign_in(copilot_settings, "megan")
    async with service(copilot_settings, clock=SteppingClock(NOW)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "is anything pending my approval?")
    assert result.answer is not None
    assert "none found" in result.answer


async def test_brief_me_for_my_next_meeting_gives_its_cited_facts(copilot_settings: Settings) -> None:
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, clock=SteppingClock(SEED_MORNING)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "brief me for my next meeting please")
    assert result.answer is not None
    assert result.answer.startswith("Brief for my next meeting"), result.answer[:300]
    assert result.citations
    assert result.unverified_citations == []


async def test_digest_me_answers_with_todays_cited_digest(copilot_settings: Settings) -> None:
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, clock=SteppingClock(SEED_MORNING)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "digest me")
    assert result.answer is not None
    assert result.answer.startswith("Digest for me"), result.answer[:300]
    assert result.citations
    assert result.unverified_citations == []


async def test_who_can_approve_for_me_lists_the_live_delegation_after_it_is_approved(
    copilot_settings: Settings,
) -> None:
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, clock=SteppingClock(NOW)) as svc:
        proposed = await svc.run_turn(
            rep.identity, rep.broker, None, "delegate my approvals to Megan Bowen until Friday"
        )
        [proposal] = proposed.proposals
        assert proposal.tool == "delegate_approvals"
        before = await svc.run_turn(rep.identity, rep.broker, None, "show my approval delegations")
        assert before.answer is not None
        assert "Megan Bowen" not in before.answer  # nothing is granted before approval
        await svc.decide(
            rep.identity,
            rep.broker,
            proposal.thread_id or proposed.thread_id,
            [{"tool_call_id": proposal.tool_call_id, "type": "approve"}],
        )
        after = await svc.run_turn(rep.identity, rep.broker, None, "show my approval delegations")
    assert after.answer is not None
    assert "Megan Bowen may approve your proposals" in after.answer
    assert "2026-12-11" in after.answer


@pytest.mark.parametrize(
    ("said", "view"),
    [
        ("my approvals", "approvals"),
        ("approvals", "approvals"),
        ("my pending approvals", "approvals"),
        ("anything waiting on my approval?", "approvals"),
        ("copilot stats", "stats"),
        ("my stats", "stats"),
        ("approval stats", "stats"),
        ("my delegations", "delegations"),
        ("show my approval delegations", "delegations"),
        ("digest me", "digest"),
        ("brief me", "brief"),
        ("brief me for my next meeting please", "brief"),
        ("deals at risk", "risk"),
        ("catch me up", "catch_up"),
    ],
)
async def test_the_desk_asked_in_its_short_words_or_free_ones_leaves_its_view_for_the_card(
    copilot_settings: Settings, said: str, view: str
) -> None:
    """What were the bot's card commands are the agent's tools: whatever the words, the turn
    carries the view the Teams bot shows as the card (and the text says the same elsewhere)."""
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, clock=SteppingClock(SEED_MORNING)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, said)
    assert result.answer is not None
    shown = [v.card if isinstance(v, DeskView) else v.view for v in result.views]
    assert shown == [view], (said, result.answer[:300])


@pytest.mark.parametrize(
    "said", ["what's the status of the Acme renewal?", "brief me on Acme before my call"]
)
async def test_a_question_about_a_record_is_not_taken_for_the_desk(
    copilot_settings: Settings, said: str
) -> None:
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, clock=SteppingClock(SEED_MORNING)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, said)
    assert result.views == []
    assert result.answer is not None
    assert "acc-acme" in result.citations, result.answer[:300]


async def test_the_digest_asked_with_a_possessive_is_the_digest(copilot_settings: Settings) -> None:
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, clock=SteppingClock(SEED_MORNING)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "give me today's digest")
    assert [v.card for v in result.views if isinstance(v, DeskView)] == ["digest"], result.answer
