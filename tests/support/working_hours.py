"""Setting a sandbox user's Outlook working hours for one test (Graph's mailboxSettings shape)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from tests.support.sandbox_process import SandboxProcess

EVERY_DAY = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def mailbox_settings(zone: str, days: Sequence[str], start: str, end: str) -> dict[str, object]:
    """A ``mailboxSettings`` body: ``timeZone`` and ``workingHours`` as Graph has them."""
    return {
        "timeZone": zone,
        "workingHours": {
            "daysOfWeek": list(days),
            "startTime": f"{start}.0000000",
            "endTime": f"{end}.0000000",
            "timeZone": {"name": zone},
        },
    }


@contextmanager
def working_hours(
    sandbox: SandboxProcess,
    handle: str,
    *,
    zone: str = "UTC",
    days: Sequence[str] = EVERY_DAY,
    start: str = "00:00:00",
    end: str = "23:59:59",
) -> Iterator[None]:
    """``handle`` works ``days`` from ``start`` to ``end`` in ``zone`` (default: always) until the
    block ends; then the seeded settings are back (the sandbox is shared by the session)."""
    path = f"/admin/users/{handle}/mailbox-settings"
    sandbox.admin("PUT", path, mailbox_settings(zone, days, start, end))
    try:
        yield
    finally:
        sandbox.admin("DELETE", path)
