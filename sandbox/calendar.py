"""A Microsoft-Graph-shaped calendar: ``GET /v1.0/me/calendarView`` of the seeded meetings.

Callers present a delegated token for ``settings.graph_audience`` with the
``Calendars.Read`` scope (403 ``ErrorAccessDenied`` without it, as Graph answers) and see
the meetings they organise or attend, in their own tenant only. Like Graph's calendar
view, ``startDateTime`` and ``endDateTime`` are required (ISO 8601; no offset = UTC),
every event overlapping the window is returned ordered by start, times come back in UTC
(``timeZone: "UTC"``), and pages hold ``$top`` events (default 10, at most 1000) with an
``@odata.nextLink`` to the next one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandbox import db
from sandbox.config import SandboxSettings
from sandbox.directory import find_user
from sandbox.identity.provider import CALENDAR_SCOPE
from sandbox.identity.tokens import TokenClaims, TokenError, bearer_from_header, validate_token
from sandbox.mailbox import GraphError, graph_error_response

DEFAULT_PAGE = 10
MAX_PAGE = 1000


def calendar_routes(settings: SandboxSettings) -> list[Route]:
    """Starlette routes of the calendar under ``/v1.0/me``."""

    async def calendar_view(request: Request) -> Response:
        try:
            caller = _authenticate(settings, request)
            start, end = _window(request)
            top, skip = _paging(request)
            rows = await run_in_threadpool(
                lambda: db.list_events(
                    settings.db_path,
                    tenant_id=caller.tenant_id,
                    start_before=_iso(end),
                    end_after=_iso(start),
                )
            )
        except GraphError as exc:
            return graph_error_response(request, exc)
        mine = [r for r in rows if _on_calendar_of(r, caller)]
        body: dict[str, Any] = {"value": [graph_event(r) for r in mine[skip : skip + top]]}
        if skip + top < len(mine):
            query = {**request.query_params, "$top": str(top), "$skip": str(skip + top)}
            body["@odata.nextLink"] = f"{request.url.replace(query=urlencode(query))}"
        return JSONResponse(body)

    return [Route("/v1.0/me/calendarView", calendar_view, methods=["GET"])]


def graph_event(row: dict[str, Any]) -> dict[str, Any]:
    """A stored meeting as a Graph ``event`` resource (the fields a calendar view selects)."""
    organizer = find_user(row["organizer_id"])
    organizer_address = {"name": organizer.name, "address": organizer.email} if organizer else None
    return {
        "id": row["id"],
        "subject": row["subject"],
        "start": {"dateTime": _graph_time(row["start_at"]), "timeZone": "UTC"},
        "end": {"dateTime": _graph_time(row["end_at"]), "timeZone": "UTC"},
        "isOnlineMeeting": bool(row["is_online"]),
        "isCancelled": False,
        "organizer": {"emailAddress": organizer_address},
        "attendees": [
            {
                "type": a["type"],
                "status": {"response": "none", "time": "0001-01-01T00:00:00Z"},
                "emailAddress": {"name": a["name"], "address": a["address"]},
            }
            for a in row["attendees"]
        ],
    }


def _on_calendar_of(row: dict[str, Any], caller: TokenClaims) -> bool:
    if row["organizer_id"] == caller.user.id:
        return True
    addresses = {str(a["address"]).lower() for a in row["attendees"]}
    return caller.user.email.lower() in addresses


def _authenticate(settings: SandboxSettings, request: Request) -> TokenClaims:
    try:
        token = bearer_from_header(request.headers.get("authorization"))
        return validate_token(
            settings, token, audience=settings.graph_audience, required_scopes={CALENDAR_SCOPE}
        )
    except TokenError as exc:
        code = "InvalidAuthenticationToken" if exc.status == 401 else "ErrorAccessDenied"
        message = exc.description if exc.status == 401 else f"Access is denied. {exc.description}"
        raise GraphError(exc.status, code, message, {"WWW-Authenticate": exc.www_authenticate()}) from exc


def _window(request: Request) -> tuple[datetime, datetime]:
    raw_start = request.query_params.get("startDateTime")
    raw_end = request.query_params.get("endDateTime")
    if not raw_start or not raw_end:
        raise GraphError(
            400,
            "ErrorInvalidParameter",
            "This request requires a time window specified by the query string parameters "
            "StartDateTime and EndDateTime.",
        )
    start, end = _parse_time(raw_start, "startDateTime"), _parse_time(raw_end, "endDateTime")
    if end < start:
        raise GraphError(400, "ErrorInvalidParameter", "endDateTime must not be before startDateTime.")
    return start, end


def _parse_time(value: str, name: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise GraphError(
            400, "ErrorInvalidParameter", f"The value '{value[:60]}' of parameter '{name}' is invalid."
        ) from exc
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _paging(request: Request) -> tuple[int, int]:
    def number(name: str, default: int, low: int, high: int) -> int:
        raw = request.query_params.get(name)
        if raw is None:
            return default
        if not raw.isdigit() or not low <= int(raw) <= high:
            raise GraphError(400, "ErrorInvalidParameter", f"'{name}' must be an integer {low}-{high}.")
        return int(raw)

    return number("$top", DEFAULT_PAGE, 1, MAX_PAGE), number("$skip", 0, 0, 1_000_000)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _graph_time(stored: str) -> str:
    # Graph writes local times with seven fractional digits and no offset (the zone is beside it).
    return stored.removesuffix("Z") + ".0000000"
