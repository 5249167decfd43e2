"""``bot.credentials`` names the setting and the fix for each refusal Entra gives a bot's
client-credentials request (the codes the sandbox cannot produce, such as an expired secret)."""

from __future__ import annotations

import pytest

from bot.doctor_credentials import authority_failure


@pytest.mark.parametrize(
    ("message", "setting", "phrase"),
    [
        (
            "AADSTS7000222: The provided client secret keys for app '1111' are expired.",
            "MicrosoftAppPassword",
            "has expired",
        ),
        (
            "AADSTS7000215: Invalid client secret provided.",
            "MicrosoftAppPassword",
            "not a client secret",
        ),
        (
            "AADSTS700016: Application with identifier '1111' was not found in the directory 'Contoso'.",
            "MicrosoftAppId",
            "not an app of the tenant",
        ),
        (
            "AADSTS90002: Tenant 'ffff' not found.",
            "MicrosoftAppTenantId",
            "names no tenant",
        ),
        (
            "Authentication failed: Unable to get authority configuration for https://login.example/ffff.",
            "MicrosoftAppTenantId",
            "names no tenant",
        ),
    ],
    ids=["expired-secret", "wrong-secret", "unknown-app", "unknown-tenant", "tenant-metadata"],
)
def test_each_refusal_names_its_setting_and_a_fix(message, setting, phrase):
    failure = authority_failure(message)
    assert setting in (failure.setting or "")
    assert phrase in failure.message
    assert failure.fix


def test_a_refusal_without_a_known_code_names_all_three_settings():
    failure = authority_failure("AADSTS50000: There was an error issuing a token.")
    assert failure.setting == "MicrosoftAppId, MicrosoftAppPassword, MicrosoftAppTenantId"
