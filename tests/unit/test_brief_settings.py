"""The admin's brief lead time: its default is the brief service's own."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bot.settings import BotSettings
from copilot.briefs.service import DEFAULT_LEAD_MINUTES


def test_the_brief_lead_time_defaults_to_the_brief_services_default() -> None:
    assert BotSettings().brief_lead_minutes == DEFAULT_LEAD_MINUTES


def test_the_admin_sets_the_brief_lead_time_and_a_nonsense_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COPILOT_BRIEF_LEAD_MINUTES", "15")
    assert BotSettings().brief_lead_minutes == 15
    monkeypatch.setenv("COPILOT_BRIEF_LEAD_MINUTES", "0")
    with pytest.raises(ValidationError, match="COPILOT_BRIEF_LEAD_MINUTES"):
        BotSettings()
