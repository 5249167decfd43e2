"""Progress a rep sees during a turn describes that turn's own steps, never earlier ones."""

from __future__ import annotations

import pytest

from copilot.progress import ProgressEvent
from copilot.settings import Settings
from tests.support.copilot_env import copilot_settings as make_settings
from tests.support.copilot_env import service, sign_in
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration


async def test_after_a_long_conversation_a_question_reports_only_its_own_lookups(
    copilot_settings: Settings, sandbox: SandboxProcess
):
    assert copilot_settings.database_url is not None
    # Summarised early (the smallest trigger), as a long Teams conversation is: the summary
    # step rewrites the message list, earlier tool calls included.
    settings = make_settings(
        copilot_settings.database_url.get_secret_value(), sandbox, COPILOT_SUMMARY_TRIGGER_TOKENS=500
    )
    rep = await sign_in(settings, "alex")
    async with service(settings) as svc:
        first = await svc.run_turn(rep.identity, rep.broker, None, "summarise Acme")
        thread = first.thread_id
        logged = await svc.run_turn(rep.identity, rep.broker, thread, "log a call with Acme about pricing")
        call = logged.proposals[0].tool_call_id
        await svc.decide(
            rep.identity,
            rep.broker,
            thread,
            [{"tool_call_id": call, "type": "edit", "args": {"subject": "Pricing"}}],
        )
        met = await svc.run_turn(rep.identity, rep.broker, thread, "log a meeting with Acme about onboarding")
        await svc.decide(
            rep.identity,
            rep.broker,
            thread,
            [{"tool_call_id": met.proposals[0].tool_call_id, "type": "reject", "reason": "not yet"}],
        )
        await svc.run_turn(rep.identity, rep.broker, thread, "summarise Acme")

        seen: list[ProgressEvent] = []

        async def progress(event: ProgressEvent) -> None:
            seen.append(event)

        result = await svc.run_turn(
            rep.identity, rep.broker, thread, "my deals closing this quarter", progress
        )

    assert result.answer
    shown = [e.message for e in seen]
    assert shown, "the question's own lookups are reported"
    assert not [m for m in shown if "Acme" in m], shown
    assert len(shown) <= 3, shown
