"""The suggestion ledger end to end: briefs and the digest suggest moving a passed close date, a
declined suggestion is not made again until the record changes (its CRM version moves on), and the
suggestion goes through the normal proposal → approval card path, whose rejection declines it and
whose approval accepts it.

Real sandbox over HTTP (calendar, identity provider, CRM over MCP), real PostgreSQL (the ledger,
threads, checkpoints), the bot runtime with the fake Bot Connector, the offline model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import date, datetime, timedelta
from typing import Any

import pytest

from bot.brief_delivery import deliver_briefs
from bot.handler import SUGGESTION_DECLINED
from copilot.briefs import ledger
from copilot.briefs.digest import digest_at
from copilot.briefs.service import briefs_at
from copilot.briefs.suggestions import MOVE_BY_DAYS
from copilot.briefs.types import Suggestion
from copilot.identity import RepIdentity
from copilot.persistence.database import connect
from copilot.settings import Settings
from copilot.writes import title
from offline_model import OfflineChatModel
from tests.integration.test_brief_timer import BRIEFS_ON, WINDOW, _aad, _briefs_posted, _seeded_day, _set
from tests.integration.test_briefs import _event, _export, _start
from tests.support.copilot_env import Rep, service, sign_in
from tests.support.fake_connector import Recorded, card_of, find_actions
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import Teams, running_bot

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    """This module's sandbox is seeded from a named day (``tests/support/moments.py``)."""
    return pinned_sandbox


State = dict[str, list[dict[str, Any]]]


@pytest.fixture
async def teams(copilot_settings: Settings, sandbox: SandboxProcess) -> AsyncIterator[Teams]:
    async with running_bot(copilot_settings) as running:
        yield running


def _read(sandbox: SandboxProcess, tool: str, **args: Any) -> dict[str, Any]:
    result = sandbox.call("alex", tool, **args)
    assert result["isError"] is False, result
    content: dict[str, Any] = result["structuredContent"]
    return content


def _change(sandbox: SandboxProcess, opportunity_id: str, **changes: Any) -> dict[str, Any]:
    """Change a deal through the CRM as alex (its version moves on); returns it as read after."""
    version = _read(sandbox, "get_opportunity", opportunity_id=opportunity_id)["version"]
    _read(
        sandbox,
        "update_opportunity",
        opportunity_id=opportunity_id,
        expected_version=version,
        changes=changes,
    )
    return _read(sandbox, "get_opportunity", opportunity_id=opportunity_id)


OVERDUE_DEAL = "opp-acme-expansion"
"""alex's deal of the account of his seeded customer meetings (Acme), made overdue for these tests."""


@pytest.fixture
def overdue(sandbox: SandboxProcess) -> Iterator[str]:
    """alex's Acme expansion with its close date moved, through the CRM, to 3 days before the
    seeded day (no seeded deal of alex's whose close date passed is on an account he meets), put
    back afterwards."""
    closes = _read(sandbox, "get_opportunity", opportunity_id=OVERDUE_DEAL)["close_date"]
    passed = _seeded_day(sandbox).date() - timedelta(days=3)
    _change(sandbox, OVERDUE_DEAL, close_date=passed.isoformat())
    try:
        yield OVERDUE_DEAL
    finally:
        _change(sandbox, OVERDUE_DEAL, close_date=closes[:10])


def _overdue_of_alex(state: State, day: date) -> set[str]:
    """From the export: alex's open deals whose close date is before ``day``."""
    return {
        o["id"]
        for o in state["opportunities"]
        if o["owner_id"] == "u-alex"
        and o["stage"] not in ("Closed Won", "Closed Lost")
        and date.fromisoformat(o["close_date"][:10]) < day
    }


def _suggested(briefs: Any) -> dict[str, Suggestion]:
    return {s.record_id: s for b in briefs for s in b.suggestions}


async def _brief_suggestions(settings: Settings, rep: Rep, at: datetime) -> dict[str, Suggestion]:
    async with connect(settings) as conn:
        run = await briefs_at(settings, rep.identity, rep.broker, conn, at=at, lead_minutes=WINDOW)
    return _suggested(run.briefs)


async def _entries(settings: Settings, identity: RepIdentity, record_id: str) -> list[ledger.LedgerEntry]:
    async with connect(settings) as conn:
        return await ledger.entries(conn, identity, record_id)


async def test_a_declined_suggestion_is_not_made_again_until_the_record_changes_then_it_is(
    copilot_settings: Settings, sandbox: SandboxProcess, overdue: str
) -> None:
    state = _export(sandbox)
    brief_at = _seeded_day(sandbox)
    digest_moment = _start(_event(state, "Acme renewal pricing review")).replace(hour=7, minute=30)
    rep = await sign_in(copilot_settings, "alex")
    async with service(copilot_settings, OfflineChatModel()) as svc:

        async def digest() -> Any:
            async with connect(copilot_settings) as conn:
                return await digest_at(
                    copilot_settings, rep.identity, rep.broker, conn, svc, at=digest_moment
                )

        first_digest = await digest()
        first_briefs = await _brief_suggestions(copilot_settings, rep, brief_at)
        # The digest suggests moving each overdue deal of alex's (the export says which); a brief
        # suggests it for those of its accounts.
        assert set(s.record_id for s in first_digest.suggestions) == _overdue_of_alex(
            state, digest_moment.date()
        )
        assert overdue in first_briefs, first_briefs
        target = next(s for s in first_digest.suggestions if s.record_id == overdue)
        read = _read(sandbox, "get_opportunity", opportunity_id=target.record_id)
        assert target.record_version == read["version"] == first_briefs[target.record_id].record_version

        # Declined at the version read ...
        async with connect(copilot_settings) as conn:
            await ledger.record_decision(
                conn,
                rep.identity,
                kind=target.kind,
                record_id=target.record_id,
                record_version=target.record_version,
                decision="declined",
            )
        # ... the timer's briefs and the next digest leave it out (and only it).
        again_digest = await digest()
        again_briefs = await _brief_suggestions(copilot_settings, rep, brief_at)
        assert target.record_id not in {s.record_id for s in again_digest.suggestions}
        assert target.record_id not in again_briefs
        assert {s.record_id for s in again_digest.suggestions} == {
            s.record_id for s in first_digest.suggestions
        } - {target.record_id}
        assert f"[{target.record_id}] passed" not in again_digest.text

        # The record changes through the CRM (a new next step: the close date still passed) ...
        before = read["next_step"]
        try:
            changed = _change(sandbox, target.record_id, next_step="Agree the new timeline")
            assert changed["version"] > target.record_version
            # ... and it may be suggested again, at the new version.
            changed_digest = await digest()
            changed_briefs = await _brief_suggestions(copilot_settings, rep, brief_at)
        finally:
            _change(sandbox, target.record_id, next_step=before)
    [back] = [s for s in changed_digest.suggestions if s.record_id == target.record_id]
    assert back.record_version == changed["version"]
    assert changed_briefs[target.record_id].record_version == changed["version"]
    states = [
        (e.record_version, e.state) for e in await _entries(copilot_settings, rep.identity, target.record_id)
    ]
    assert (target.record_version, "declined") in states
    assert (changed["version"], "made") in states


async def test_every_suggestion_cites_its_record_in_the_text_and_passes_the_citation_check(
    copilot_settings: Settings, sandbox: SandboxProcess, overdue: str
) -> None:
    rep = await sign_in(copilot_settings, "alex")
    at = _seeded_day(sandbox)
    async with connect(copilot_settings) as conn:
        run = await briefs_at(copilot_settings, rep.identity, rep.broker, conn, at=at, lead_minutes=WINDOW)
    suggested = [b for b in run.briefs if b.suggestions]
    assert suggested, [b.text for b in run.briefs]
    for brief in suggested:
        assert brief.citation_check.unverified == ()
        for suggestion in brief.suggestions:
            assert suggestion.text in brief.text
            assert f"[{suggestion.record_id}]" in suggestion.text
            assert suggestion.record_id in brief.citation_check.cited
            assert suggestion.text.endswith("ago: move it?")
    # Only alex's own deals, though a brief lists colleagues' deals of the account too.
    owners = {o["id"]: o["owner_id"] for o in _export(sandbox)["opportunities"]}
    assert {owners[s.record_id] for b in suggested for s in b.suggestions} == {"u-alex"}


async def _a_posted_suggestion(teams: Teams, sandbox: SandboxProcess) -> tuple[Recorded, dict[str, Any]]:
    """alex turns briefs on and the timer runs: a posted brief card with a suggestion, and the
    data of that suggestion's "Not now" (which names it)."""
    assert BRIEFS_ON in await _set(teams, "alex", "brief on")
    assert teams.runtime is not None
    await deliver_briefs(teams.runtime, at=_seeded_day(sandbox), lead_minutes=WINDOW)
    for _, message in _briefs_posted(teams):
        buttons = find_actions(card_of(message), "Not now")
        if buttons:
            return message, dict(buttons[0]["data"])
    raise AssertionError("no posted brief has a suggestion")


async def test_not_now_on_a_brief_card_records_the_suggestion_declined_and_the_next_briefs_leave_it_out(
    teams: Teams, sandbox: SandboxProcess, copilot_settings: Settings, overdue: str
) -> None:
    card, not_now = await _a_posted_suggestion(teams, sandbox)
    rep = await sign_in(copilot_settings, "alex")
    record_id, version = not_now["record_id"], not_now["record_version"]
    assert [
        (e.record_version, e.state) for e in await _entries(copilot_settings, rep.identity, record_id)
    ] == [(version, "made")]

    teams.conversation = "conv-alex-personal"
    await teams.submit(card.activity_id or "", not_now, aad=_aad("alex"))

    assert SUGGESTION_DECLINED in teams.last_text()
    [entry] = await _entries(copilot_settings, rep.identity, record_id)
    assert (entry.kind, entry.record_version, entry.state) == ("close_date_passed", version, "declined")
    assert entry.decided_at is not None
    assert record_id not in await _brief_suggestions(copilot_settings, rep, _seeded_day(sandbox))


async def _propose_the_move(teams: Teams, sandbox: SandboxProcess) -> tuple[dict[str, Any], Recorded, str]:
    """The suggestion's button on a posted brief: the proposal's approval card that follows, and
    the text the button sent."""
    card, not_now = await _a_posted_suggestion(teams, sandbox)
    [move] = [
        b
        for b in find_actions(card_of(card), "Move the close date")
        if f"({not_now['record_id']})" in b["data"]["text"]
    ]
    before = len(teams.connector.messages())
    teams.conversation = "conv-alex-personal"
    await teams.submit(card.activity_id or "", move["data"], aad=_aad("alex"))
    approvals = [
        m
        for m in teams.connector.messages()[before:]
        if m.body.get("attachments") and find_actions(card_of(m), "Approve")
    ]
    assert len(approvals) == 1, teams.last_text()
    assert title("update_opportunity") in repr(card_of(approvals[0]))
    return not_now, approvals[0], str(move["data"]["text"])


async def test_rejecting_the_approval_card_of_a_suggested_move_records_the_suggestion_declined(
    teams: Teams, sandbox: SandboxProcess, copilot_settings: Settings, overdue: str
) -> None:
    not_now, approval, _ = await _propose_the_move(teams, sandbox)
    record_id, version = not_now["record_id"], not_now["record_version"]
    closes = _read(sandbox, "get_opportunity", opportunity_id=record_id)["close_date"]

    rejecting = await teams.open_panel(approval, "Reject…")
    [reject] = find_actions(rejecting, "Reject")
    await teams.submit(approval.activity_id or "", {**reject["data"], "reject.reason": "the date stands"})

    rep = await sign_in(copilot_settings, "alex")
    [entry] = await _entries(copilot_settings, rep.identity, record_id)
    assert (entry.record_version, entry.state) == (version, "declined")
    assert _read(sandbox, "get_opportunity", opportunity_id=record_id)["close_date"] == closes
    assert record_id not in await _brief_suggestions(copilot_settings, rep, _seeded_day(sandbox))


async def test_approving_the_approval_card_of_a_suggested_move_records_it_accepted_and_moves_the_date(
    teams: Teams, sandbox: SandboxProcess, copilot_settings: Settings, overdue: str
) -> None:
    not_now, approval, move_text = await _propose_the_move(teams, sandbox)
    record_id, version = not_now["record_id"], not_now["record_version"]
    closes = _read(sandbox, "get_opportunity", opportunity_id=record_id)["close_date"]
    [approve] = find_actions(card_of(approval), "Approve")
    try:
        await teams.submit(approval.activity_id or "", approve["data"], aad=_aad("alex"))

        moved = _read(sandbox, "get_opportunity", opportunity_id=record_id)
        rep = await sign_in(copilot_settings, "alex")
        [entry] = await _entries(copilot_settings, rep.identity, record_id)
        assert (entry.record_version, entry.state) == (version, "accepted")
        assert moved["version"] > version
        # The move the rep was offered: MOVE_BY_DAYS after the brief's day, which is the rep's
        # own day (their time zone): the seeded UTC midnight's date or the day before it.
        offered = date.fromisoformat(moved["close_date"][:10]) - timedelta(days=MOVE_BY_DAYS)
        seeded = _seeded_day(sandbox).date()
        assert offered in (seeded, seeded - timedelta(days=1)), moved["close_date"]
        assert f"to {moved['close_date'][:10]}" in move_text
        # No longer passed: nothing to suggest for it.
        assert record_id not in await _brief_suggestions(copilot_settings, rep, _seeded_day(sandbox))
    finally:
        _change(sandbox, record_id, close_date=closes[:10])
