"""Every kind of card submit the cards emit has an entry in the bot's dispatch table
(``CopilotBot.submits``): a button whose kind had none would be read as a typed message.

The kinds are the ``*_KIND`` constants :mod:`bot.cards` exports, found by name, so a new one is
checked without being listed here; and every ``data.copilot`` the built cards carry is one of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from bot import cards
from bot.handler import CopilotBot
from bot.settings import BotSettings
from tests.unit.test_cards import all_cards


def submit_kinds() -> dict[str, str]:
    """The card-submit kinds :mod:`bot.cards` exports (its ``*_KIND`` constants), by name."""
    return {
        name: value
        for name in dir(cards)
        if name.endswith("_KIND") and isinstance(value := getattr(cards, name), str)
    }


def undispatched(kinds: Mapping[str, str], submits: Mapping[str, Any]) -> dict[str, str]:
    """The kinds the dispatch table has no entry for."""
    return {name: kind for name, kind in kinds.items() if kind not in submits}


@pytest.fixture(scope="module")
def submits() -> dict[str, Any]:
    # The table only names each feature's handler: nothing is called, so no service is needed.
    bot = CopilotBot(SimpleNamespace(pool=None), SimpleNamespace(), BotSettings(MicrosoftAppId=""))  # type: ignore[arg-type]
    return dict(bot.submits)


def test_every_submit_kind_the_cards_export_has_a_dispatch_entry(submits: dict[str, Any]) -> None:
    kinds = submit_kinds()
    assert {"SUBMIT_KIND", "VIEW_KIND", "UNDO_KIND", "COMMAND_KIND"} <= kinds.keys()  # found by name
    assert undispatched(kinds, submits) == {}
    # The check itself: a kind whose entry is missing is reported.
    for name, kind in kinds.items():
        without = {k: v for k, v in submits.items() if k != kind}
        assert undispatched(kinds, without) == {name: kind}


def _submitted_kinds(element: Any) -> Iterator[str]:
    if isinstance(element, dict):
        data = element.get("data")
        if element.get("type") == "Action.Submit" and isinstance(data, dict) and "copilot" in data:
            yield data["copilot"]
        for value in element.values():
            yield from _submitted_kinds(value)
    elif isinstance(element, list):
        for value in element:
            yield from _submitted_kinds(value)


def test_every_kind_a_built_card_submits_is_an_exported_kind() -> None:
    emitted = {kind for card in all_cards().values() for kind in _submitted_kinds(card)}
    assert emitted  # the cards do submit
    assert emitted <= set(submit_kinds().values()), emitted - set(submit_kinds().values())
