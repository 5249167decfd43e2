"""Approval delegation through the Teams bot: granted and ended in the rep's own words (write
tools behind the approval card), the delegations card, "my approvals" for the delegate, the
delegate's decision on the owner's proposal, and what is refused.

The bot on the dev server (local sign-in for each Teams user), real PostgreSQL, the sandbox
CRM over MCP with each person's own token, the sandbox's Graph-shaped user lookup, the
offline model. Each person chats in a 1:1 conversation of their own.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest

from copilot.persistence import audit
from copilot.persistence.database import connect
from copilot.settings import Settings
from sandbox.directory import PLAYGROUND_AAD_OBJECT_ID, find_user
from tests.support.fake_connector import card_of, find_actions
from tests.support.moments import WEDNESDAY_AFTERNOON, SteppingClock
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import Teams, running_bot

pytestmark = pytest.mark.integration

UNTIL = (WEDNESDAY_AFTERNOON.date() + dt.timedelta(days=7)).isoformat()


@pytest.fixture
async def teams(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[Teams]:
    async with running_bot(copilot_settings) as running:
        running.set_clock(SteppingClock(WEDNESDAY_AFTERNOON))
        yield running


def _aad(handle: str) -> str:
    user = find_user(handle)
    assert user is not None
    return user.aad_object_id


async def _as(teams: Teams, handle: str, text: str) -> None:
    """``handle`` says ``text`` in their own 1:1 chat with the bot."""
    teams.conversation = f"conv-{handle}"
    await teams.say(text, aad=_aad(handle))


async def _click(teams: Teams, handle: str, card_activity_id: str, data: dict[str, Any]) -> None:
    teams.conversation = f"conv-{handle}"
    await teams.submit(card_activity_id, data, aad=_aad(handle))


def _activities(sandbox: SandboxProcess, thread_id: str) -> list[dict[str, Any]]:
    return [
        a
        for a in sandbox.admin("GET", "/admin/export")["activities"]
        if str(a["external_id"]).startswith(f"{thread_id}:")
    ]


async def _approve_last(teams: Teams, handle: str, title: str) -> None:
    """Approve the proposal card just posted to ``handle``, after checking it is ``title``'s."""
    card = teams.connector.cards()[-1]
    assert title in repr(card_of(card)), teams.last_text()
    await _click(teams, handle, card.activity_id or "", find_actions(card_of(card), "Approve")[0]["data"])


async def _delegate(teams: Teams, handle: str, said: str) -> None:
    await _as(teams, handle, said)
    await _approve_last(teams, handle, "Delegate my approvals")


async def test_a_rep_delegates_and_the_delegate_decides_from_my_approvals_and_the_audit_names_both(
    teams: Teams, sandbox: SandboxProcess, copilot_settings: Settings
) -> None:
    await _as(teams, "alex", "log a task for Acme: send the delegated contract")
    alex_card = teams.connector.cards()[-1]
    approve = {**find_actions(card_of(alex_card), "Approve")[0]["data"]}

    await _delegate(teams, "alex", f"delegate approvals to Megan Bowen until {UNTIL}")
    assert "✓ Approved" in repr(card_of(teams.connector.updates()[-1]))
    await _as(teams, "alex", "my delegations")
    assert "Megan Bowen" in repr(card_of(teams.connector.cards()[-1]))

    await _as(teams, "megan", "my approvals")
    listing = card_of(teams.connector.cards()[-1])
    assert "For Alex Wilber" in repr(listing)
    [open_button] = find_actions(listing, "Open")
    await _click(teams, "megan", teams.connector.cards()[-1].activity_id or "", open_button["data"])
    megans_copy = teams.connector.cards()[-1]
    assert megans_copy.conversation_id == "conv-megan"
    await _click(
        teams,
        "megan",
        megans_copy.activity_id or "",
        find_actions(card_of(megans_copy), "Approve")[0]["data"],
    )

    assert "✓ Approved" in repr(card_of(teams.connector.updates()[-1]))
    [written] = _activities(sandbox, approve["thread_id"])
    # The CRM's own record: the delegate made it, with her own token.
    assert written["owner_id"] == "u-megan"
    async with connect(copilot_settings) as conn:
        [row] = await audit.list_entries(conn, thread_id=approve["thread_id"])
    assert row.entry.rep_aad_id == PLAYGROUND_AAD_OBJECT_ID
    assert row.entry.approver_aad_id == _aad("megan")

    # Megan's clicking again, or Alex's own stale card, writes nothing more.
    await _click(teams, "alex", alex_card.activity_id or "", approve)
    assert len(_activities(sandbox, approve["thread_id"])) == 1


async def test_a_delegation_in_the_reps_own_words_names_the_colleague_by_first_name_until_a_weekday(
    teams: Teams,
) -> None:
    # Wednesday 9 December: "until Friday" is Friday 11 December; "megan" is Megan Bowen.
    await _as(teams, "alex", "please delegate my approvals to megan until Friday")
    proposal = repr(card_of(teams.connector.cards()[-1]))
    assert "Megan Bowen" in proposal
    assert "Dec 11, 2026" in proposal, proposal[:800]
    await _approve_last(teams, "alex", "Delegate my approvals")
    await _as(teams, "alex", "my delegations")
    listing = repr(card_of(teams.connector.cards()[-1]))
    assert "Megan Bowen" in listing
    assert "11" in listing

    # Ended by her first name, after approval; nothing ends before it.
    await _as(teams, "alex", "revoke delegation to Megan")
    revoke_card = teams.connector.cards()[-1]
    assert "Megan Bowen" in repr(card_of(revoke_card))
    await _as(teams, "megan", "my delegations")
    assert "Alex Wilber" in repr(card_of(teams.connector.cards()[-1]))
    approve = find_actions(card_of(revoke_card), "Approve")[0]["data"]
    await _click(teams, "alex", revoke_card.activity_id or "", approve)
    await _as(teams, "megan", "my delegations")
    assert "Alex Wilber" not in repr(card_of(teams.connector.cards()[-1]))


async def test_a_forged_submit_by_a_colleague_without_a_delegation_is_refused(
    teams: Teams, sandbox: SandboxProcess
) -> None:
    await _as(teams, "alex", "log a task for Acme: send the forged contract")
    approve = find_actions(card_of(teams.connector.cards()[-1]), "Approve")[0]["data"]
    await _delegate(teams, "alex", f"delegate approvals to Megan Bowen until {UNTIL}")

    # Lidia holds no delegation: her forged copy of the card's data is refused.
    await _click(teams, "lidia", "forged-card", approve)
    assert "belongs to another conversation or another person" in teams.last_text()
    await _as(teams, "lidia", "my approvals")
    assert "Nothing waits for your decision" in teams.last_text()
    assert _activities(sandbox, approve["thread_id"]) == []


async def test_after_revoke_the_delegate_no_longer_sees_or_decides_the_proposals(
    teams: Teams, sandbox: SandboxProcess
) -> None:
    await _as(teams, "alex", "log a task for Acme: send the revoked contract")
    approve = find_actions(card_of(teams.connector.cards()[-1]), "Approve")[0]["data"]
    await _delegate(teams, "alex", f"delegate approvals to Megan Bowen until {UNTIL}")
    await _as(teams, "megan", "my approvals")
    assert find_actions(card_of(teams.connector.cards()[-1]), "Open")

    await _as(teams, "alex", "revoke delegation")
    await _approve_last(teams, "alex", "Revoke a delegation")
    await _as(teams, "megan", "my approvals")
    assert "Nothing waits for your decision" in teams.last_text()
    await _click(teams, "megan", "her-old-copy", approve)
    assert "belongs to another conversation or another person" in teams.last_text()
    assert _activities(sandbox, approve["thread_id"]) == []


async def test_the_delegation_cards_revoke_button_ends_only_the_clickers_own_grant(teams: Teams) -> None:
    await _delegate(teams, "alex", f"delegate approvals to Megan Bowen until {UNTIL}")
    await _as(teams, "alex", "my delegations")
    card = teams.connector.cards()[-1]
    [revoke] = find_actions(card_of(card), "Revoke")

    await _click(teams, "diego", card.activity_id or "", revoke["data"])  # not his grant
    await _as(teams, "alex", "my delegations")
    assert "Megan Bowen" in repr(card_of(teams.connector.cards()[-1]))
    await _click(teams, "alex", card.activity_id or "", revoke["data"])
    assert "Revoked the delegation" in teams.last_text()
    await _as(teams, "megan", "my delegations")
    assert "Alex Wilber" not in teams.last_text()


async def test_a_delegate_in_another_organisation_is_not_proposed_and_the_rep_is_told(teams: Teams) -> None:
    before = len(teams.connector.cards())
    await _as(teams, "alex", f"delegate approvals to Taylor until {UNTIL}")
    assert "couldn't find 'Taylor' in your organisation" in teams.last_text()
    assert not any("Approve" in repr(card_of(c)) for c in teams.connector.cards()[before:])
    await _as(teams, "alex", "my delegations")
    assert "You have not delegated your approvals" in teams.last_text()


async def test_an_email_address_kept_from_the_model_is_not_guessed_at(teams: Teams) -> None:
    before = len(teams.connector.cards())
    await _as(teams, "alex", f"delegate approvals to megan@contoso.example until {UNTIL}")
    assert "name the colleague instead" in teams.last_text()
    assert not any("Approve" in repr(card_of(c)) for c in teams.connector.cards()[before:])


async def test_revoking_a_delegation_the_rep_does_not_have_proposes_nothing(teams: Teams) -> None:
    before = len(teams.connector.cards())
    await _as(teams, "alex", "revoke delegation to Megan")
    assert "no live approval delegation" in teams.last_text()
    assert not any("Approve" in repr(card_of(c)) for c in teams.connector.cards()[before:])
