"""The copilot layer's checks, in the order they run (the bot's and the Functions app's follow)."""

from __future__ import annotations

from copilot.doctor import audit_checks, database_checks, service_checks, settings_checks
from copilot.doctor.framework import Check

COPILOT_CHECKS: tuple[Check, ...] = (
    *settings_checks.CHECKS,
    *database_checks.CHECKS,
    *audit_checks.CHECKS,
    *service_checks.CHECKS,
)
