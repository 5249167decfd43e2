"""What one Approve click costs inside the copilot, counted through the bot.

The click goes from the bot into the copilot once (``CopilotService.decide``): the agent
is compiled at most once per process (not again once compiled), the thread is authorised
once, its state read at most twice (the pending proposals, then the result), and each
token scope is exchanged and each backend's session opened at most once. Counted on a
real bot (aiohttp dev server), real PostgreSQL and the sandbox over HTTP, by wrapping the
functions that do each of these things.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import jwt
import pytest
from azure.identity import OnBehalfOfCredential
from langgraph.pregel import Pregel

import copilot.context
import copilot.runner
from copilot.persistence import threads
from copilot.settings import Settings
from tests.support.fake_connector import card_of, find_actions
from tests.support.sandbox_process import SandboxProcess
from tests.support.teams_client import running_bot

pytestmark = pytest.mark.integration


class Costs:
    """Counts of the expensive things, by kind (and scope where there is one)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def reset(self) -> None:
        self.counts.clear()

    def __getitem__(self, kind: str) -> int:
        return self.counts[kind]

    def by_prefix(self, prefix: str) -> dict[str, int]:
        return {k: v for k, v in self.counts.items() if k.startswith(prefix)}


def _counting(costs: Costs, kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        costs.counts[kind] += 1
        return original(*args, **kwargs)

    return wrapper


@pytest.fixture
def costs(monkeypatch: pytest.MonkeyPatch) -> Costs:
    costs = Costs()
    monkeypatch.setattr(
        copilot.runner, "build_agent", _counting(costs, "compile", copilot.runner.build_agent)
    )
    monkeypatch.setattr(threads, "authorize", _counting(costs, "authorize", threads.authorize))
    monkeypatch.setattr(Pregel, "aget_state", _counting(costs, "state_read", Pregel.aget_state))

    original_get_token = OnBehalfOfCredential.get_token

    def get_token(self: OnBehalfOfCredential, *scopes: str, **kwargs: Any) -> Any:
        costs.counts["obo " + " ".join(sorted(scopes))] += 1
        return original_get_token(self, *scopes, **kwargs)

    monkeypatch.setattr(OnBehalfOfCredential, "get_token", get_token)

    original_open = copilot.context.open_crm_session

    @asynccontextmanager
    async def open_crm_session(settings: Settings, token: str) -> AsyncIterator[Any]:
        scopes = jwt.decode(token, options={"verify_signature": False}).get("scp", "")
        costs.counts["mcp " + " ".join(sorted(str(scopes).split()))] += 1
        async with original_open(settings, token) as session:
            yield session

    monkeypatch.setattr(copilot.context, "open_crm_session", open_crm_session)
    return costs


def _approve(card: dict[str, Any]) -> dict[str, Any]:
    actions = find_actions(card, "Approve") or find_actions(card, "Save to Outlook drafts")
    assert actions, "no Approve action on the card"
    return dict(actions[0]["data"])


def _assert_one_click_budget(costs: Costs, *, compilations: int) -> None:
    assert costs["compile"] == compilations, costs.counts
    assert costs["authorize"] == 1, costs.counts
    assert costs["state_read"] <= 2, costs.counts
    assert all(n == 1 for n in costs.by_prefix("obo ").values()), costs.counts
    assert all(n == 1 for n in costs.by_prefix("mcp ").values()), costs.counts


@pytest.mark.parametrize(
    ("question", "backend_scope"),
    [
        ("log a call with Acme about the renewal", "crm.write"),
        ("draft a follow-up to Maria at Acme about the pricing discussion", "Mail.ReadWrite"),
    ],
)
async def test_one_approve_click_compiles_nothing_and_authorises_reads_and_exchanges_once(
    copilot_settings: Settings, sandbox: SandboxProcess, costs: Costs, question: str, backend_scope: str
):
    async with running_bot(copilot_settings) as teams:
        await teams.say(question)
        card_activity = teams.connector.cards()[-1]
        assert costs["compile"] == 1, "the first turn of the process compiles the agent"
        costs.reset()

        await teams.submit(card_activity.activity_id or "", _approve(card_of(card_activity)))

        assert "Approved" in repr(card_of(teams.connector.updates()[-1]))
        _assert_one_click_budget(costs, compilations=0)
        # The approved write's backend was reached with its own scope, exactly once.
        assert any(backend_scope in kind for kind in costs.counts if kind.startswith("obo ")), costs.counts
        if backend_scope == "crm.write":
            assert any("crm.write" in kind for kind in costs.counts if kind.startswith("mcp ")), costs.counts


async def test_a_click_in_a_process_that_never_compiled_compiles_once(
    copilot_settings: Settings, sandbox: SandboxProcess, costs: Costs
):
    async with running_bot(copilot_settings) as first:
        await first.say("log a call with Acme about the renewal")
        card_activity = first.connector.cards()[-1]
        approve = _approve(card_of(card_activity))
    costs.reset()

    # Another process (a restarted worker) takes the click: it compiles once, the rest holds.
    async with running_bot(copilot_settings) as second:
        await second.submit(card_activity.activity_id or "", approve)
        assert "Approved" in repr(card_of(second.connector.updates()[-1]))
    _assert_one_click_budget(costs, compilations=1)


async def test_a_rejection_exchanges_no_token_and_opens_no_session(
    copilot_settings: Settings, sandbox: SandboxProcess, costs: Costs
):
    async with running_bot(copilot_settings) as teams:
        await teams.say("log a call with Acme about the renewal")
        card_activity = teams.connector.cards()[-1]
        actions = find_actions(await teams.open_panel(card_activity, "Reject…"), "Reject")
        costs.reset()
        await teams.submit(
            card_activity.activity_id or "", {**actions[0]["data"], "reject.reason": "not now"}
        )
        assert "not now" in repr(card_of(teams.connector.updates()[-1]))

    _assert_one_click_budget(costs, compilations=0)
    assert costs.by_prefix("obo ") == {}, costs.counts
    assert costs.by_prefix("mcp ") == {}, costs.counts
