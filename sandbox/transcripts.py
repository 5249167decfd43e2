"""Microsoft-Graph-shaped Teams meeting transcripts: ``GET /v1.0/me/onlineMeetings/{id}/transcripts``
and ``.../transcripts/{transcriptId}/content`` (WebVTT), for the seeded online meetings.

Callers present a delegated Graph token with ``OnlineMeetingTranscript.Read.All`` (403
``ErrorAccessDenied`` without it; the identity provider refuses the scope to a user who has not
consented, as Entra does). Only a meeting on the caller's own calendar (organiser or attendee) is
found (404 otherwise). The sandbox's online meeting id is its calendar event's id (a real tenant
looks the meeting up by the event's join URL first). Transcripts are written by hand for a few
seeded meetings, by subject; one line names a different account, as people do in a meeting.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from sandbox import db
from sandbox.config import SandboxSettings
from sandbox.identity.provider import TRANSCRIPT_SCOPE
from sandbox.identity.tokens import TokenClaims, TokenError, bearer_from_header, validate_token
from sandbox.mailbox import GraphError, graph_error_response

TRANSCRIPTS: dict[str, tuple[tuple[str, str], ...]] = {
    "Acme analytics add-on: order form": (
        ("Kevin Park", "Thanks for the walkthrough; the dashboards cover what my team asked for."),
        ("Tom Becker", "Legal needs two more weeks on the order form before procurement signs."),
        ("Alex Wilber", "I will send the revised order form with the multi-year option by Friday."),
        ("Tom Becker", "Globex Industries is also looking at the dashboards for their plants."),
        ("Kevin Park", "Next step: procurement sign-off once legal is done, around the 23rd."),
    ),
}
"""Meeting subject → (speaker, words) of each line of its transcript."""


def transcript_routes(settings: SandboxSettings) -> list[Route]:
    """Starlette routes of the transcripts under ``/v1.0/me/onlineMeetings``."""

    async def meeting_of(request: Request) -> tuple[TokenClaims, dict[str, Any]]:
        caller = _authenticate(settings, request)
        meeting_id = request.path_params["meeting_id"]
        rows = await run_in_threadpool(
            lambda: db.list_events(
                settings.db_path, tenant_id=caller.tenant_id, start_before="9999", end_after="0000"
            )
        )
        row = next((r for r in rows if r["id"] == meeting_id and r["is_online"]), None)
        if row is None or not _on_calendar_of(row, caller):
            raise GraphError(404, "NotFound", f"The online meeting {meeting_id[:60]} was not found.")
        return caller, row

    async def transcripts(request: Request) -> Response:
        try:
            _, row = await meeting_of(request)
        except GraphError as exc:
            return graph_error_response(request, exc)
        found = (
            []
            if row["subject"] not in TRANSCRIPTS
            else [
                {
                    "id": f"tr-{row['id']}",
                    "meetingId": row["id"],
                    "meetingOrganizerId": row["organizer_id"],
                    "createdDateTime": row["end_at"],
                }
            ]
        )
        return JSONResponse({"value": found})

    async def content(request: Request) -> Response:
        try:
            _, row = await meeting_of(request)
        except GraphError as exc:
            return graph_error_response(request, exc)
        if request.path_params["transcript_id"] != f"tr-{row['id']}" or row["subject"] not in TRANSCRIPTS:
            return graph_error_response(request, GraphError(404, "NotFound", "The transcript was not found."))
        return PlainTextResponse(webvtt(TRANSCRIPTS[row["subject"]]), media_type="text/vtt")

    base = "/v1.0/me/onlineMeetings/{meeting_id}/transcripts"
    return [
        Route(base, transcripts, methods=["GET"]),
        Route(base + "/{transcript_id}/content", content, methods=["GET"]),
    ]


def webvtt(lines: tuple[tuple[str, str], ...]) -> str:
    """The lines as Teams writes a transcript: WebVTT cues with ``<v Speaker>`` voice spans."""
    cues = ["WEBVTT", ""]
    for number, (speaker, words) in enumerate(lines):
        start, end = number * 20, number * 20 + 18
        cues += [
            f"00:{start // 60:02d}:{start % 60:02d}.000 --> 00:{end // 60:02d}:{end % 60:02d}.000",
            f"<v {speaker}>{words}</v>",
            "",
        ]
    return "\n".join(cues)


def _on_calendar_of(row: dict[str, Any], caller: TokenClaims) -> bool:
    if row["organizer_id"] == caller.user.id:
        return True
    return caller.user.email.lower() in {str(a["address"]).lower() for a in row["attendees"]}


def _authenticate(settings: SandboxSettings, request: Request) -> TokenClaims:
    try:
        token = bearer_from_header(request.headers.get("authorization"))
        return validate_token(
            settings, token, audience=settings.graph_audience, required_scopes={TRANSCRIPT_SCOPE}
        )
    except TokenError as exc:
        code = "InvalidAuthenticationToken" if exc.status == 401 else "ErrorAccessDenied"
        message = exc.description if exc.status == 401 else f"Access is denied. {exc.description}"
        raise GraphError(exc.status, code, message, {"WWW-Authenticate": exc.www_authenticate()}) from exc
