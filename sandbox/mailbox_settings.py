"""A Microsoft-Graph-shaped ``GET /v1.0/me/mailboxSettings``: the caller's time zone and working hours.

Callers present a delegated token for ``settings.graph_audience`` with the
``MailboxSettings.Read`` scope (403 ``ErrorAccessDenied`` without it, as Graph answers). The
answer has Graph's shape: ``timeZone`` and ``workingHours`` (``daysOfWeek``, ``startTime``,
``endTime``, ``timeZone.name``), plus the other properties Graph returns (automatic replies,
language, formats). As in Exchange, zones may be Windows names (``Pacific Standard Time``) or
IANA names.

Seeded (:data:`SEEDED`): most users work Monday–Friday 08:00–17:00 in their own zone; megan
works Sunday–Thursday in Dubai. ``PUT /admin/users/{handle}/mailbox-settings`` replaces a
user's ``workingHours``/``timeZone`` (tests set a week to their purpose), ``DELETE`` restores
the seeded ones; ``POST /admin/reset`` restores all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandbox.config import SandboxSettings
from sandbox.directory import find_user
from sandbox.identity.tokens import TokenClaims, TokenError, bearer_from_header, validate_token
from sandbox.mailbox import GraphError, graph_error_response

MAILBOX_SETTINGS_SCOPE = "MailboxSettings.Read"
WORK_WEEK = ("monday", "tuesday", "wednesday", "thursday", "friday")


def _hours(
    zone: str, days: tuple[str, ...] = WORK_WEEK, start: str = "08:00", end: str = "17:00"
) -> dict[str, Any]:
    return {
        "timeZone": zone,
        "workingHours": {
            "daysOfWeek": list(days),
            "startTime": f"{start}:00.0000000",
            "endTime": f"{end}:00.0000000",
            "timeZone": {"name": zone},
        },
    }


SEEDED: dict[str, dict[str, Any]] = {
    "u-nestor": _hours("Pacific Standard Time"),
    "u-alex": _hours("Pacific Standard Time"),
    "u-megan": _hours("Arabian Standard Time", ("sunday", "monday", "tuesday", "wednesday", "thursday")),
    "u-diego": _hours("America/New_York"),
    "u-lidia": _hours("Eastern Standard Time"),
    "u-adele": _hours("America/Los_Angeles"),
    "u-taylor": _hours("GMT Standard Time"),
    "u-priya": _hours("Europe/London"),
    "u-sam": _hours("W. Europe Standard Time"),
    "u-jordan": _hours("Central Standard Time"),
}
"""Per user id: ``timeZone`` and ``workingHours`` (a user not listed: UTC, Monday–Friday 08:00–17:00)."""


@dataclass
class MailboxSettingsState:
    """The users' settings as changed through the admin route (the rest are :data:`SEEDED`)."""

    changed: dict[str, dict[str, Any]] = field(default_factory=dict)

    def of(self, user_id: str) -> dict[str, Any]:
        return self.changed.get(user_id) or SEEDED.get(user_id) or _hours("UTC")

    def reset(self) -> None:
        self.changed.clear()


def graph_mailbox_settings(settings: dict[str, Any], email: str) -> dict[str, Any]:
    """A user's settings as Graph's ``mailboxSettings`` resource."""
    return {
        "@odata.context": f"https://graph.microsoft.com/v1.0/$metadata#users('{email}')/mailboxSettings",
        "archiveFolder": "AAMkAGI2TGuLAAA=",
        "timeZone": settings["timeZone"],
        "automaticRepliesSetting": {
            "status": "disabled",
            "externalAudience": "all",
            "internalReplyMessage": "",
            "externalReplyMessage": "",
        },
        "language": {"locale": "en-US", "displayName": "English (United States)"},
        "dateFormat": "M/d/yyyy",
        "timeFormat": "h:mm tt",
        "delegateMeetingMessageDeliveryOptions": "sendToDelegateOnly",
        "userPurpose": "user",
        "workingHours": settings["workingHours"],
    }


def mailbox_settings_routes(settings: SandboxSettings, state: MailboxSettingsState) -> list[Route]:
    """The Graph route under ``/v1.0/me`` and its admin routes."""

    async def get_settings(request: Request) -> Response:
        try:
            caller = _authenticate(settings, request)
        except GraphError as exc:
            return graph_error_response(request, exc)
        return JSONResponse(graph_mailbox_settings(state.of(caller.user.id), caller.user.email))

    async def put_settings(request: Request) -> Response:
        user = find_user(request.path_params["handle"])
        if user is None:
            return _admin_error(404, "not_found", "unknown user")
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError:
            body = None
        hours = body.get("workingHours") if isinstance(body, dict) else None
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("timeZone"), str)
            or not isinstance(hours, dict)
        ):
            return _admin_error(400, "validation", 'body must be {"timeZone": …, "workingHours": {…}}')
        state.changed[user.id] = {"timeZone": body["timeZone"], "workingHours": hours}
        return JSONResponse(graph_mailbox_settings(state.of(user.id), user.email))

    async def delete_settings(request: Request) -> Response:
        user = find_user(request.path_params["handle"])
        if user is None:
            return _admin_error(404, "not_found", "unknown user")
        state.changed.pop(user.id, None)
        return JSONResponse(graph_mailbox_settings(state.of(user.id), user.email))

    return [
        Route("/v1.0/me/mailboxSettings", get_settings, methods=["GET"]),
        Route("/admin/users/{handle}/mailbox-settings", put_settings, methods=["PUT"]),
        Route("/admin/users/{handle}/mailbox-settings", delete_settings, methods=["DELETE"]),
    ]


def _admin_error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, "details": {}}}, status_code=status)


def _authenticate(settings: SandboxSettings, request: Request) -> TokenClaims:
    try:
        token = bearer_from_header(request.headers.get("authorization"))
        return validate_token(
            settings, token, audience=settings.graph_audience, required_scopes={MAILBOX_SETTINGS_SCOPE}
        )
    except TokenError as exc:
        code = "InvalidAuthenticationToken" if exc.status == 401 else "ErrorAccessDenied"
        message = exc.description if exc.status == 401 else f"Access is denied. {exc.description}"
        raise GraphError(exc.status, code, message, {"WWW-Authenticate": exc.www_authenticate()}) from exc
