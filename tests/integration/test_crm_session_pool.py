"""Kept CRM sessions: a rep's runs share one MCP session per token, reps never share one,
and a session the CRM refuses is not kept (real PostgreSQL, the sandbox over MCP/HTTP)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from copilot.citations import message_text
from tests.support.copilot_env import service, sign_in
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls

pytestmark = pytest.mark.integration


def _read_then_answer(messages: list[BaseMessage]) -> AIMessage:
    if isinstance(messages[-1], ToolMessage):
        return AIMessage(content="Acme Corporation [acc-acme] is doing fine.")
    return calls(call("get_account", account_id="acc-acme"))


def _reads_acme() -> ScriptedChatModel:
    """Each turn: one read of Acme, then an answer."""
    return ScriptedChatModel(steps=[_read_then_answer] * 20)


def _tool_texts(model: ScriptedChatModel) -> list[str]:
    """The tool results the model saw, one per turn (the last request of each turn)."""
    seen: list[str] = []
    for request in model.received:
        for m in request:
            if isinstance(m, ToolMessage) and message_text(m) not in seen:
                seen.append(message_text(m))
    return seen


async def test_a_reps_consecutive_turns_share_one_crm_session(copilot_settings, sandbox):
    rep = await sign_in(copilot_settings, "alex")
    model = _reads_acme()
    async with service(copilot_settings, model) as svc:
        assert svc.crm_sessions is not None
        for _ in range(3):
            result = await svc.run_turn(rep.identity, rep.broker, None, "how is Acme doing?")
            assert result.notice is None, result
        assert svc.crm_sessions.opened == 1
        assert len(svc.crm_sessions) == 1
    assert all("Acme" in text for text in _tool_texts(model)), _tool_texts(model)


async def test_two_reps_never_share_a_crm_session(copilot_settings, sandbox):
    alex = await sign_in(copilot_settings, "alex")
    other = await sign_in(copilot_settings, "jordan")
    async with service(copilot_settings, _reads_acme()) as svc:
        assert svc.crm_sessions is not None
        await svc.run_turn(alex.identity, alex.broker, None, "how is Acme doing?")
        await svc.run_turn(other.identity, other.broker, None, "how is Acme doing?")
        await svc.run_turn(alex.identity, alex.broker, None, "how is Acme doing?")
        assert svc.crm_sessions.opened == 2
        assert len(svc.crm_sessions) == 2


@pytest.fixture
def restore_alex(sandbox: SandboxProcess) -> Iterator[None]:
    try:
        yield
    finally:
        sandbox.admin("PUT", "/admin/users/alex/crm-access", {"enabled": True})


async def test_a_kept_session_the_crm_refuses_is_dropped_and_the_rep_is_told_plainly(
    copilot_settings, sandbox: SandboxProcess, restore_alex: None
):
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, _reads_acme()) as svc:
        assert svc.crm_sessions is not None
        first = await svc.run_turn(rep.identity, rep.broker, None, "how is Acme doing?")
        assert first.notice is None
        # Revoked while the session is kept; the rep's CRM token is still cached, so only
        # the CRM itself can refuse it (at the next call through the kept session).
        sandbox.admin("PUT", "/admin/users/alex/crm-access", {"enabled": False})
        refused = await svc.run_turn(rep.identity, rep.broker, first.thread_id, "how is Acme doing?")
        assert refused.notice == "no_crm_access", refused
        assert refused.answer is not None
        assert "don't have access to the CRM" in refused.answer
        assert len(svc.crm_sessions) == 0, "the refused session is still kept"
        again = await svc.run_turn(rep.identity, rep.broker, first.thread_id, "how is Acme doing?")
        assert again.notice == "no_crm_access", again
        assert len(svc.crm_sessions) == 0

        sandbox.admin("PUT", "/admin/users/alex/crm-access", {"enabled": True})
        restored = await svc.run_turn(rep.identity, rep.broker, first.thread_id, "how is Acme doing?")
        assert restored.notice is None, restored
        assert len(svc.crm_sessions) == 1
        # Opened: the first turn's, then one per turn after the refusal (the refused turn
        # itself went through the kept session).
        assert svc.crm_sessions.opened == 3
