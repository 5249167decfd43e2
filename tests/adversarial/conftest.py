"""The adversarial suites' CRM profile: a suite that takes ``profile_settings`` runs on both."""

from __future__ import annotations

import pytest

from copilot.settings import Settings
from tests.adversarial.profiles import PROFILES, Profile, settings_for
from tests.support.sandbox_process import SandboxProcess


@pytest.fixture(params=PROFILES)
def crm_profile(request: pytest.FixtureRequest) -> Profile:
    profile: Profile = request.param
    return profile


@pytest.fixture
def profile_settings(
    crm_profile: Profile, copilot_settings: Settings, database_url: str, sandbox: SandboxProcess
) -> Settings:
    """The copilot's settings on the test's CRM profile (a fresh, migrated database either way)."""
    return settings_for(crm_profile, copilot_settings, database_url, sandbox)
