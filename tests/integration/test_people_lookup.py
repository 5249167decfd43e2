"""Who a rep means by a colleague's name: the directory lookup as the rep, against the sandbox's
Graph-shaped user endpoint (``displayName eq`` first, then ``startswith(displayName, …)``)."""

from __future__ import annotations

import pytest

from copilot.auth.tokens import dev_sign_in_rep
from copilot.errors import InvalidInput
from copilot.people import find_colleague, people_scopes
from copilot.settings import Settings

pytestmark = pytest.mark.integration


async def _find(settings: Settings, who: str) -> str:
    identity, broker = await dev_sign_in_rep(settings, "alex")
    token = await broker.token_for(people_scopes(settings))
    return (await find_colleague(settings, token, identity, who)).name


async def test_a_full_name_and_a_first_name_both_find_the_one_colleague(copilot_settings: Settings) -> None:
    assert await _find(copilot_settings, "Megan Bowen") == "Megan Bowen"
    assert await _find(copilot_settings, "megan") == "Megan Bowen"


async def test_a_name_that_starts_several_colleagues_names_asks_which_one(copilot_settings: Settings) -> None:
    with pytest.raises(InvalidInput) as raised:
        await _find(copilot_settings, "A")
    assert "Alex Wilber" in raised.value.message
    assert "Adele Vance" in raised.value.message
    assert raised.value.message.endswith("Which one?")


async def test_someone_of_another_organisation_is_not_found(copilot_settings: Settings) -> None:
    with pytest.raises(InvalidInput, match="couldn't find 'Taylor' in your organisation"):
        await _find(copilot_settings, "Taylor")


async def test_an_email_placeholder_the_model_was_shown_is_refused_plainly(
    copilot_settings: Settings,
) -> None:
    with pytest.raises(InvalidInput, match="name the colleague instead"):
        await _find(copilot_settings, "[REDACTED_EMAIL]")
