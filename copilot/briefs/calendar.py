"""The rep's meetings in a time window, from Microsoft Graph's ``/me/calendarView``.

Read with the rep's own delegated token for ``Calendars.Read`` (no application permission
to every mailbox's calendar): a rep sees what their own calendar holds, nothing else.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol

import httpx
from pydantic import ValidationError

from copilot.briefs.types import Attendee, Meeting
from copilot.errors import AuthError, CalendarUnavailable
from copilot.settings import Settings
from copilot.tools.mcp_http import shared_transport

CALENDAR_SCOPE = "Calendars.Read"
MAX_PAGES = 50
"""A calendar view longer than this many pages is refused rather than read forever."""


class CalendarTokens(Protocol):
    """What reading the calendar needs of a token broker: a delegated token for some scopes."""

    async def token_for(self, scopes: list[str]) -> str: ...


def calendar_scopes(settings: Settings) -> list[str]:
    """The one delegated scope the calendar is read with."""
    return [f"{settings.graph_resource}/{CALENDAR_SCOPE}"]


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _graph_time(value: Any) -> datetime:
    """A Graph ``dateTimeTimeZone`` (``Prefer: outlook.timezone="UTC"``, so UTC) as an aware time."""
    if not isinstance(value, dict) or not isinstance(value.get("dateTime"), str):
        raise ValueError("not a dateTimeTimeZone")
    if str(value.get("timeZone", "UTC")).upper() not in ("UTC", "ETC/UTC", "Z"):
        raise ValueError(f"time zone {value.get('timeZone')!r} although UTC was asked for")
    text = value["dateTime"]
    head = text.partition(".")[0]
    moment = datetime.fromisoformat(head)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _attendee(value: Any) -> Attendee | None:
    email = value.get("emailAddress") if isinstance(value, dict) else None
    if not isinstance(email, dict) or not isinstance(email.get("address"), str):
        return None
    kind = value.get("type", "required")
    return Attendee(
        name=str(email.get("name") or ""),
        address=email["address"],
        type=kind if kind in ("required", "optional", "resource") else "required",
    )


def parse_event(event: Any) -> Meeting:
    """One Graph ``event`` as a :class:`Meeting` (``ValueError`` if it is not one)."""
    if not isinstance(event, dict) or not isinstance(event.get("id"), str):
        raise ValueError("an event without an id")
    organizer = _attendee(event.get("organizer"))
    try:
        return Meeting(
            id=event["id"],
            subject=str(event.get("subject") or ""),
            start=_graph_time(event.get("start")),
            end=_graph_time(event.get("end")),
            is_online=bool(event.get("isOnlineMeeting", False)),
            organizer=organizer,
            attendees=tuple(a for a in map(_attendee, event.get("attendees") or []) if a is not None),
        )
    except ValidationError as exc:
        raise ValueError(str(exc)) from exc


async def read_meetings(
    settings: Settings, tokens: CalendarTokens, start: datetime, end: datetime
) -> list[Meeting]:
    """The rep's meetings overlapping ``[start, end)``, by start time, cancelled ones left out.

    ``AuthError`` when the rep has not consented to ``Calendars.Read`` (the token service
    says so) or Graph refuses the token; ``CalendarUnavailable`` when Graph cannot be read.
    """
    token = await tokens.token_for(calendar_scopes(settings))
    url: str | None = f"{settings.graph_base_url}/me/calendarView"
    params: dict[str, str] | None = {"startDateTime": _utc(start), "endDateTime": _utc(end), "$top": "100"}
    headers = {"Authorization": f"Bearer {token}", "Prefer": 'outlook.timezone="UTC"'}
    meetings: list[Meeting] = []
    async with httpx.AsyncClient(
        timeout=settings.crm_timeout_seconds, transport=shared_transport()
    ) as client:
        for _ in range(MAX_PAGES):
            if url is None:
                break
            try:
                response = await client.get(url, params=params, headers=headers)
            except httpx.HTTPError as exc:
                raise CalendarUnavailable(f"the calendar is unavailable ({type(exc).__name__})") from exc
            page = _page(response)
            for event in page.get("value") or []:
                if isinstance(event, dict) and event.get("isCancelled"):
                    continue
                try:
                    meetings.append(parse_event(event))
                except ValueError as exc:
                    raise CalendarUnavailable(f"the calendar answered an unreadable event: {exc}") from exc
            next_link = page.get("@odata.nextLink")
            url, params = (next_link, None) if isinstance(next_link, str) else (None, None)
        else:
            raise CalendarUnavailable(f"the calendar view has more than {MAX_PAGES} pages")
    return sorted(meetings, key=lambda m: (m.start, m.id))


def _page(response: httpx.Response) -> dict[str, Any]:
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    message = str(error.get("message", "")) if isinstance(error, dict) else ""
    if response.status_code in (401, 403):
        raise AuthError(
            f"the calendar refused to be read ({response.status_code}): {message or 'access denied'} "
            f"(the copilot needs the delegated {CALENDAR_SCOPE} permission)"
        )
    if response.status_code != 200 or not isinstance(body, dict):
        raise CalendarUnavailable(
            f"the calendar answered HTTP {response.status_code}{': ' + message if message else ''}"
        )
    return body
