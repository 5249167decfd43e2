"""The rep's working hours and time zone, from Microsoft Graph's ``GET /me/mailboxSettings``.

Read with the rep's own delegated token for ``MailboxSettings.Read``. When they cannot be read
(no consent, Graph refusing or unreachable, an unreadable answer) the rep's schedule falls back
to the Teams time zone with Mon–Fri 08:00–18:00 (:func:`copilot.briefs.schedule.fallback_schedule`):
quiet hours then still hold, just less precisely.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import httpx

from copilot.briefs.schedule import RepSchedule, fallback_schedule, schedule_from_mailbox
from copilot.errors import AuthError, MailboxSettingsUnavailable
from copilot.settings import Settings
from copilot.tools.mcp_http import shared_transport

MAILBOX_SETTINGS_SCOPE = "MailboxSettings.Read"

logger = logging.getLogger(__name__)


class SettingsTokens(Protocol):
    """What reading mailbox settings needs of a token broker: a delegated token for some scopes."""

    async def token_for(self, scopes: list[str]) -> str: ...


def mailbox_settings_scopes(settings: Settings) -> list[str]:
    """The one delegated scope the mailbox settings are read with."""
    return [f"{settings.graph_resource}/{MAILBOX_SETTINGS_SCOPE}"]


async def read_mailbox_settings(settings: Settings, tokens: SettingsTokens) -> dict[str, Any]:
    """The rep's Graph ``mailboxSettings`` resource.

    ``AuthError`` without consent or when Graph refuses the token; ``MailboxSettingsUnavailable``
    when Graph cannot be read or answers something that is not a mailboxSettings resource.
    """
    token = await tokens.token_for(mailbox_settings_scopes(settings))
    async with httpx.AsyncClient(
        timeout=settings.crm_timeout_seconds, transport=shared_transport()
    ) as client:
        try:
            response = await client.get(
                f"{settings.graph_base_url}/me/mailboxSettings",
                headers={"Authorization": f"Bearer {token}"},
            )
        except httpx.HTTPError as exc:
            raise MailboxSettingsUnavailable(
                f"the mailbox settings are unavailable ({type(exc).__name__})"
            ) from exc
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if response.status_code in (401, 403):
        raise AuthError(
            f"the mailbox settings refused to be read ({response.status_code}) (the copilot needs "
            f"the delegated {MAILBOX_SETTINGS_SCOPE} permission)"
        )
    if response.status_code != 200 or not isinstance(body, dict):
        raise MailboxSettingsUnavailable(f"the mailbox settings answered HTTP {response.status_code}")
    return body


async def rep_schedule(settings: Settings, tokens: SettingsTokens, teams_zone: str | None) -> RepSchedule:
    """The rep's working week from their mailbox settings, else the fallback (logged, not raised)."""
    try:
        return schedule_from_mailbox(await read_mailbox_settings(settings, tokens), teams_zone)
    except (AuthError, MailboxSettingsUnavailable, ValueError) as exc:
        logger.info("mailbox settings not readable (%s): Teams time zone, Mon-Fri 08:00-18:00", exc)
        return fallback_schedule(teams_zone)
