"""A follow-up draft carries what the rep asked it to say, in their tone and signature (the
offline model, the sandbox CRM over MCP, the rep's stored preferences): never a generic body."""

from __future__ import annotations

import pytest

from copilot.settings import Settings
from copilot.tools.preferences import Preferences, save_preferences
from tests.support.copilot_env import service, sign_in
from tests.support.moments import WEDNESDAY_AFTERNOON, SteppingClock
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

ASKED = (
    "draft a follow-up to Sarah Chen at Acme: thank her for confirming budget, say the proposal "
    "comes by the 15th, and ask her about the pilot timeline"
)


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    return pinned_sandbox


async def test_a_draft_carries_the_reps_points_in_their_tone_and_signature(
    copilot_settings: Settings,
) -> None:
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, clock=SteppingClock(WEDNESDAY_AFTERNOON)) as svc:
        await save_preferences(
            svc.store, rep.identity, Preferences(email_tone="formal", signature="Alex Wilber, Contoso")
        )
        result = await svc.run_turn(rep.identity, rep.broker, None, ASKED)
    [proposal] = result.proposals
    assert proposal.tool == "draft_followup_email"
    body = str(proposal.args["body"])
    assert body.split("\n\n") == [
        "Thank you for confirming budget.",
        "The proposal comes by the 15th.",
        "Could you tell me about the pilot timeline?",
    ]
    assert "Thank you for your time recently" not in body
    preview = str((proposal.record or {}).get("preview"))
    assert preview.startswith("Dear Sarah")
    assert preview.rstrip().endswith("Alex Wilber, Contoso")


async def test_a_draft_asked_with_no_points_keeps_the_follow_up_on_its_topic(
    copilot_settings: Settings,
) -> None:
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, clock=SteppingClock(WEDNESDAY_AFTERNOON)) as svc:
        result = await svc.run_turn(
            rep.identity, rep.broker, None, "draft a follow-up to Sarah Chen at Acme about the renewal"
        )
    [proposal] = result.proposals
    assert "renewal" in str(proposal.args["body"])
