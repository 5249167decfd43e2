"""Approval delegation in the copilot: grant, use, expiry, revoke, tenants, forged decisions.

Real PostgreSQL (as the application role), the real sandbox CRM over MCP with each
person's own on-behalf-of token, and a scripted model for exact proposals. The decision
check is the one every decision passes (``threads.authorize``, purpose ``decide``).
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest

from copilot import delegation
from copilot.delegation import Colleague
from copilot.errors import InvalidDecision, InvalidInput, ThreadAccessDenied
from copilot.persistence import audit
from copilot.runner import CopilotService
from copilot.settings import Settings
from copilot.turn_state import DELEGATE_MAY_NOT_EDIT
from copilot.turns import TurnResult
from sandbox.directory import FABRIKAM
from tests.support.copilot_env import Rep, service, sign_in
from tests.support.moments import WEDNESDAY_AFTERNOON, SteppingClock
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls

pytestmark = pytest.mark.integration

NOW = WEDNESDAY_AFTERNOON
"""The service's clock in these tests: delegation windows are about "now", so they name it."""
NEXT_WEEK = NOW + dt.timedelta(days=7)


def _colleague(rep: Rep) -> Colleague:
    return Colleague(rep.identity.tenant_id, rep.identity.aad_object_id, rep.identity.name)


def _approve(result: TurnResult, n: int = 0) -> list[dict[str, Any]]:
    return [{"tool_call_id": result.proposals[n].tool_call_id, "type": "approve"}]


async def _grant(svc: CopilotService, owner: Rep, delegate: Rep) -> delegation.Delegation:
    async with svc.pool.connection() as conn:
        return await delegation.grant(
            conn, owner.identity, _colleague(delegate), until=NEXT_WEEK, now=svc.clock()
        )


def _renewal_model(next_step: str = "") -> ScriptedChatModel:
    # A step the record does not have yet (the sandbox lives for the whole run), so the
    # proposal is a real change.
    return ScriptedChatModel(
        steps=[
            calls(
                call(
                    "update_opportunity",
                    opportunity_id="opp-acme-renewal",
                    next_step=next_step or f"Send the quote {uuid.uuid4().hex[:6]}",
                )
            )
        ],
        final="Updated the next step on opp-acme-renewal.",
    )


async def test_a_delegate_sees_the_owners_proposal_and_approves_it_under_their_own_token(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    alex = await sign_in(copilot_settings, "alex")
    nestor = await sign_in(copilot_settings, "nestor")  # Alex's manager: the CRM lets him write it
    step = f"Send the quote {uuid.uuid4().hex[:6]}"
    async with service(copilot_settings, _renewal_model(step), clock=SteppingClock(NOW)) as svc:
        asked = await svc.run_turn(alex.identity, alex.broker, None, "set the renewal's next step")
        assert asked.proposals
        with pytest.raises(ThreadAccessDenied):
            await svc.pending(nestor.identity, asked.thread_id)
        granted = await _grant(svc, alex, nestor)
        seen = await svc.pending(nestor.identity, asked.thread_id)
        assert [p.tool_call_id for p in seen.proposals] == [asked.proposals[0].tool_call_id]

        done = await svc.decide(nestor.identity, nestor.broker, asked.thread_id, _approve(asked))
        async with svc.pool.connection() as conn:
            rows = await audit.list_entries(conn, thread_id=asked.thread_id)
        # The owner's next turn finishes the run (the model's follow-up) with the owner's token.
        later = await svc.run_turn(alex.identity, alex.broker, asked.thread_id, "thanks")

    assert granted.delegate_aad_id == nestor.identity.aad_object_id
    assert done.writes[asked.proposals[0].tool_call_id].status == "done"
    # Nothing of the owner's conversation is answered to the delegate.
    assert done.answer is None
    assert done.citations == []
    # The CRM's record of who changed it is the delegate, whose token made the write.
    opp = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-renewal")["structuredContent"]
    assert opp["next_step"] == step
    exported = sandbox.admin("GET", "/admin/export")["opportunities"]
    assert next(o for o in exported if o["id"] == "opp-acme-renewal")["modified_by"] == "u-nestor"
    # The audit row names both: whose write it is, and who approved it.
    assert len(rows) == 1
    assert rows[0].entry.rep_aad_id == alex.identity.aad_object_id
    assert rows[0].entry.approver_aad_id == nestor.identity.aad_object_id
    assert later.answer is not None
    async with service(copilot_settings, clock=SteppingClock(NOW)) as svc, svc.pool.connection() as conn:
        assert (await audit.verify(conn)).ok


async def test_a_delegate_never_gains_the_owners_scope_the_crm_refuses_what_the_delegate_may_not_change(
    copilot_settings: Settings, sandbox: SandboxProcess
) -> None:
    alex = await sign_in(copilot_settings, "alex")
    megan = await sign_in(copilot_settings, "megan")  # a peer: may not change Alex's deal
    step = f"Send the quote {uuid.uuid4().hex[:6]}"
    async with service(copilot_settings, _renewal_model(step), clock=SteppingClock(NOW)) as svc:
        asked = await svc.run_turn(alex.identity, alex.broker, None, "set the renewal's next step")
        await _grant(svc, alex, megan)
        tried = await svc.decide(megan.identity, megan.broker, asked.thread_id, _approve(asked))
        async with svc.pool.connection() as conn:
            rows = await audit.list_entries(conn, thread_id=asked.thread_id)

    outcome = tried.writes[asked.proposals[0].tool_call_id]
    assert outcome.status != "done", outcome
    opp = sandbox.call("alex", "get_opportunity", opportunity_id="opp-acme-renewal")["structuredContent"]
    assert opp["next_step"] != step
    assert rows == []


async def test_a_delegate_may_not_edit_a_proposal_nor_ask_in_the_owners_conversation(
    copilot_settings: Settings,
) -> None:
    alex = await sign_in(copilot_settings, "alex")
    nestor = await sign_in(copilot_settings, "nestor")
    async with service(copilot_settings, _renewal_model(), clock=SteppingClock(NOW)) as svc:
        asked = await svc.run_turn(alex.identity, alex.broker, None, "set the renewal's next step")
        await _grant(svc, alex, nestor)
        edit = [{"tool_call_id": asked.proposals[0].tool_call_id, "type": "edit", "args": {"next_step": "x"}}]
        with pytest.raises(InvalidDecision) as refused:
            await svc.decide(nestor.identity, nestor.broker, asked.thread_id, edit)
        # The delegation is for decisions only: the conversation itself stays the owner's.
        with pytest.raises(ThreadAccessDenied):
            await svc.run_turn(nestor.identity, nestor.broker, asked.thread_id, "what did Alex ask?")
        still = await svc.pending(alex.identity, asked.thread_id)
    assert refused.value.message == DELEGATE_MAY_NOT_EDIT
    assert len(still.proposals) == 1


async def test_an_expired_delegation_no_longer_lets_the_delegate_decide(copilot_settings: Settings) -> None:
    alex = await sign_in(copilot_settings, "alex")
    nestor = await sign_in(copilot_settings, "nestor")
    async with service(copilot_settings, _renewal_model(), clock=SteppingClock(NOW)) as svc:
        asked = await svc.run_turn(alex.identity, alex.broker, None, "set the renewal's next step")
        granted = await _grant(svc, alex, nestor)
        async with svc.pool.connection() as conn:
            assert [d.id for d in await delegation.held_by(conn, nestor.identity, now=svc.clock())] == [
                granted.id
            ]
        # The service's clock moves past the window's end: the grant is over.
        assert isinstance(svc.clock, SteppingClock)
        svc.clock.now = granted.ends_at + dt.timedelta(seconds=1)
        async with svc.pool.connection() as conn:
            assert await delegation.held_by(conn, nestor.identity, now=svc.clock()) == []
        with pytest.raises(ThreadAccessDenied):
            await svc.pending(nestor.identity, asked.thread_id)
        with pytest.raises(ThreadAccessDenied):
            await svc.decide(nestor.identity, nestor.broker, asked.thread_id, _approve(asked))
        still = await svc.pending(alex.identity, asked.thread_id)
    assert len(still.proposals) == 1


async def test_a_revoked_delegation_no_longer_lets_the_delegate_decide(copilot_settings: Settings) -> None:
    alex = await sign_in(copilot_settings, "alex")
    nestor = await sign_in(copilot_settings, "nestor")
    megan = await sign_in(copilot_settings, "megan")
    async with service(copilot_settings, _renewal_model(), clock=SteppingClock(NOW)) as svc:
        asked = await svc.run_turn(alex.identity, alex.broker, None, "set the renewal's next step")
        granted = await _grant(svc, alex, nestor)
        async with svc.pool.connection() as conn:
            # Someone else cannot revoke it; the owner can.
            assert await delegation.revoke(conn, megan.identity, granted.id, now=NOW) == 0
            assert [d.id for d in await delegation.granted_by(conn, alex.identity, now=NOW)] == [granted.id]
            assert await delegation.revoke(conn, alex.identity, granted.id, now=NOW) == 1
            assert await delegation.granted_by(conn, alex.identity, now=NOW) == []
        with pytest.raises(ThreadAccessDenied):
            await svc.decide(nestor.identity, nestor.broker, asked.thread_id, _approve(asked))


async def test_a_delegate_in_another_tenant_is_refused(copilot_settings: Settings) -> None:
    alex = await sign_in(copilot_settings, "alex")
    taylor = await sign_in(copilot_settings, "taylor")  # Fabrikam's manager
    assert taylor.identity.tenant_id == FABRIKAM.id
    async with service(copilot_settings, _renewal_model(), clock=SteppingClock(NOW)) as svc:
        asked = await svc.run_turn(alex.identity, alex.broker, None, "set the renewal's next step")
        with pytest.raises(InvalidInput, match="your own organisation"):
            await _grant(svc, alex, taylor)
        async with svc.pool.connection() as conn:
            assert await delegation.granted_by(conn, alex.identity, now=NOW) == []
            # Even a row naming her under Alex's tenant (written around the grant's check)
            # admits no one signed in to another tenant.
            await conn.execute(
                "INSERT INTO approval_delegations (tenant_id, owner_aad_id, delegate_aad_id, ends_at)"
                " VALUES (%s, %s, %s, %s)",
                (
                    alex.identity.tenant_id,
                    alex.identity.aad_object_id,
                    taylor.identity.aad_object_id,
                    NEXT_WEEK,
                ),
            )
        with pytest.raises(ThreadAccessDenied):
            await svc.decide(taylor.identity, taylor.broker, asked.thread_id, _approve(asked))


async def test_a_decision_by_someone_without_a_delegation_is_refused(copilot_settings: Settings) -> None:
    alex = await sign_in(copilot_settings, "alex")
    nestor = await sign_in(copilot_settings, "nestor")
    diego = await sign_in(copilot_settings, "diego")
    async with service(copilot_settings, _renewal_model(), clock=SteppingClock(NOW)) as svc:
        asked = await svc.run_turn(alex.identity, alex.broker, None, "set the renewal's next step")
        await _grant(svc, alex, nestor)  # a delegation to someone else admits only them
        with pytest.raises(ThreadAccessDenied):
            await svc.decide(diego.identity, diego.broker, asked.thread_id, _approve(asked))
        still = await svc.pending(alex.identity, asked.thread_id)
    assert len(still.proposals) == 1


async def test_a_grant_is_refused_for_oneself_a_past_date_or_too_long_a_window(
    copilot_settings: Settings,
) -> None:
    alex = await sign_in(copilot_settings, "alex")
    nestor = await sign_in(copilot_settings, "nestor")
    now = NOW
    async with service(copilot_settings, clock=SteppingClock(NOW)) as svc, svc.pool.connection() as conn:
        with pytest.raises(InvalidInput, match="yourself"):
            await delegation.grant(conn, alex.identity, _colleague(alex), until=NEXT_WEEK, now=now)
        with pytest.raises(InvalidInput, match="already passed"):
            await delegation.grant(
                conn, alex.identity, _colleague(nestor), until=now - dt.timedelta(hours=1), now=now
            )
        with pytest.raises(InvalidInput, match="at most"):
            await delegation.grant(
                conn, alex.identity, _colleague(nestor), until=now + dt.timedelta(days=400), now=now
            )
        assert await delegation.granted_by(conn, alex.identity, now=NOW) == []
        # A second grant to the same colleague replaces the first.
        first = await delegation.grant(conn, alex.identity, _colleague(nestor), until=NEXT_WEEK, now=now)
        second = await delegation.grant(
            conn, alex.identity, _colleague(nestor), until=NEXT_WEEK + dt.timedelta(days=1), now=now
        )
        assert [d.id for d in await delegation.granted_by(conn, alex.identity, now=NOW)] == [second.id]
        assert first.id != second.id
