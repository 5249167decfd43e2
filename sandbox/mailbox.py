"""A Microsoft-Graph-shaped mailbox that only keeps drafts (it can never send mail).

Callers present a delegated token for ``settings.graph_audience`` with the
``Mail.ReadWrite`` scope and only ever see their own drafts: another user's draft
is "not found", never "forbidden".

``POST /v1.0/me/messages`` takes an optional ``Idempotency-Key`` header (per
mailbox owner): a repeat with the same payload answers 200 with the draft stored
the first time instead of creating another; the same key with another payload is
409 ``ErrorIdempotencyMismatch``.

``DELETE /v1.0/me/messages/{id}`` deletes one of the caller's unsent drafts (204); a
message the user already sent (from their own client: ``POST /admin/drafts/{id}/sent``)
is refused with 409 ``ErrorMessageAlreadySent``, and nothing is deleted.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from json import JSONDecodeError
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandbox import db
from sandbox.config import SandboxSettings
from sandbox.directory import find_user
from sandbox.identity.tokens import TokenClaims, TokenError, bearer_from_header, validate_token

MAIL_SCOPE = "Mail.ReadWrite"
CONTENT_TYPES = {"text": "text", "html": "html"}
ALLOWED_FIELDS = frozenset({"subject", "body", "toRecipients"})
MAX_SUBJECT = 255
MAX_BODY = 1_000_000
MAX_RECIPIENTS = 100
MAX_IDEMPOTENCY_KEY = 200
IDEMPOTENCY_HEADER = "Idempotency-Key"
_EMAIL = re.compile(r"^[^@\s<>\"']+@[^@\s<>\"']+\.[^@\s<>\"']+$")

_schema_ready: set[str] = set()
_schema_lock = threading.Lock()

Handler = Callable[[Request, TokenClaims], Awaitable[Response]]


class GraphError(Exception):
    """A Graph-shaped error response: ``{"error": {"code", "message", "innerError"}}``."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def mailbox_routes(settings: SandboxSettings) -> list[Route]:
    """Starlette routes of the drafts mailbox under ``/v1.0/me``."""

    def authenticated(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                caller = _authenticate(settings, request)
                await run_in_threadpool(_ensure_schema, settings)
                return await handler(request, caller)
            except GraphError as exc:
                return graph_error_response(request, exc)

        return endpoint

    async def create_message(request: Request, caller: TokenClaims) -> Response:
        key = _idempotency_key(request)
        fields = parse_message(await _json_body(request))
        try:
            draft, created = await run_in_threadpool(
                lambda: db.store_draft(
                    settings.db_path,
                    tenant_id=caller.tenant_id,
                    owner_id=caller.user.id,
                    idempotency_key=key,
                    **fields,
                )
            )
        except db.DraftIdempotencyMismatch as exc:
            raise GraphError(
                409,
                "ErrorIdempotencyMismatch",
                f"The {IDEMPOTENCY_HEADER} was already used for draft {exc.existing['id']} with a "
                "different message.",
            ) from exc
        return JSONResponse(graph_message(draft), status_code=201 if created else 200)

    async def list_messages(request: Request, caller: TokenClaims) -> Response:
        drafts = await run_in_threadpool(
            lambda: db.list_drafts(settings.db_path, tenant_id=caller.tenant_id, owner_id=caller.user.id)
        )
        return JSONResponse({"value": [graph_message(d) for d in drafts]})

    async def get_message(request: Request, caller: TokenClaims) -> Response:
        draft_id = request.path_params["message_id"]
        draft = await run_in_threadpool(lambda: db.get_draft(settings.db_path, draft_id=draft_id))
        if draft is None or draft["tenant_id"] != caller.tenant_id or draft["owner_id"] != caller.user.id:
            raise GraphError(404, "ErrorItemNotFound", "The specified object was not found in the store.")
        return JSONResponse(graph_message(draft))

    async def delete_message(request: Request, caller: TokenClaims) -> Response:
        draft_id = request.path_params["message_id"]
        draft = await run_in_threadpool(lambda: db.get_draft(settings.db_path, draft_id=draft_id))
        if draft is None or draft["tenant_id"] != caller.tenant_id or draft["owner_id"] != caller.user.id:
            raise GraphError(404, "ErrorItemNotFound", "The specified object was not found in the store.")
        if draft.get("sent_at"):
            raise GraphError(
                409,
                "ErrorMessageAlreadySent",
                "The message was already sent; only an unsent draft can be deleted.",
            )
        await run_in_threadpool(lambda: db.delete_draft(settings.db_path, draft_id=draft_id))
        return Response(status_code=204)

    async def send(request: Request, caller: TokenClaims) -> Response:
        raise GraphError(
            405,
            "ErrorSendNotSupported",
            "This mailbox keeps drafts only: sending mail is not supported. "
            "The user reviews and sends the draft from their own mail client.",
        )

    return [
        Route("/v1.0/me/messages", authenticated(create_message), methods=["POST"]),
        Route("/v1.0/me/messages", authenticated(list_messages), methods=["GET"]),
        Route("/v1.0/me/messages/{message_id}", authenticated(get_message), methods=["GET"]),
        Route("/v1.0/me/messages/{message_id}", authenticated(delete_message), methods=["DELETE"]),
        Route("/v1.0/me/messages/{message_id}/send", authenticated(send), methods=["POST"]),
        Route("/v1.0/me/sendMail", authenticated(send), methods=["POST"]),
    ]


def parse_message(payload: Any) -> dict[str, Any]:
    """Validate a Graph ``message`` create body into ``db.create_draft`` keyword arguments.

    Raises ``GraphError`` 400 ``ErrorInvalidRequest`` describing the first problem.
    """
    if not isinstance(payload, dict):
        raise _invalid("The request body must be a JSON object (a message).")
    unknown = sorted(set(payload) - ALLOWED_FIELDS)
    if unknown:
        raise _invalid(
            f"Unsupported message properties: {', '.join(unknown)} (supported: subject, body, toRecipients)."
        )
    subject = payload.get("subject", "")
    if not isinstance(subject, str) or len(subject) > MAX_SUBJECT:
        raise _invalid(f"'subject' must be a string of at most {MAX_SUBJECT} characters.")
    body = payload.get("body")
    if not isinstance(body, dict) or not isinstance(body.get("content"), str):
        raise _invalid("'body' must be an object with a string 'content'.")
    content_type = CONTENT_TYPES.get(str(body.get("contentType", "text")).lower())
    if content_type is None or set(body) - {"contentType", "content"}:
        raise _invalid(
            "'body.contentType' must be 'text' or 'html' (and 'body' has only contentType, content)."
        )
    if len(body["content"]) > MAX_BODY:
        raise _invalid(f"'body.content' is longer than {MAX_BODY} characters.")
    recipients = payload.get("toRecipients", [])
    if not isinstance(recipients, list) or len(recipients) > MAX_RECIPIENTS:
        raise _invalid(f"'toRecipients' must be a list of at most {MAX_RECIPIENTS} recipients.")
    addresses = [_recipient_address(r, i) for i, r in enumerate(recipients)]
    return {
        "subject": subject,
        "body_content_type": content_type,
        "body": body["content"],
        "to_recipients": addresses,
    }


def graph_message(draft: dict[str, Any]) -> dict[str, Any]:
    """A stored draft as a Graph ``message`` resource."""
    owner = find_user(draft["owner_id"])
    mailbox = {"emailAddress": {"name": owner.name, "address": owner.email}} if owner else None
    body = draft["body"]
    return {
        "id": draft["id"],
        "createdDateTime": draft["created_at"],
        "lastModifiedDateTime": draft["created_at"],
        "subject": draft["subject"],
        "bodyPreview": " ".join(body.split())[:255] if draft["body_content_type"] == "text" else "",
        "body": {"contentType": draft["body_content_type"], "content": body},
        "toRecipients": [{"emailAddress": {"name": a, "address": a}} for a in draft["to_recipients"]],
        "ccRecipients": [],
        "bccRecipients": [],
        "isDraft": not draft.get("sent_at"),
        "isRead": True,
        "from": mailbox,
        "sender": mailbox,
    }


def _recipient_address(recipient: Any, index: int) -> str:
    email = recipient.get("emailAddress") if isinstance(recipient, dict) else None
    address = email.get("address") if isinstance(email, dict) else None
    name = email.get("name", "") if isinstance(email, dict) else None
    if not isinstance(address, str) or not _EMAIL.match(address.strip()) or not isinstance(name, str):
        raise _invalid(
            f"toRecipients[{index}] must be {{'emailAddress': {{'address': <email>, 'name'?: <str>}}}}."
        )
    return address.strip()


def _idempotency_key(request: Request) -> str | None:
    value = request.headers.get(IDEMPOTENCY_HEADER)
    if value is None:
        return None
    value = value.strip()
    if not value or len(value) > MAX_IDEMPOTENCY_KEY:
        raise _invalid(f"'{IDEMPOTENCY_HEADER}' must be 1 to {MAX_IDEMPOTENCY_KEY} characters.")
    return value


def _authenticate(settings: SandboxSettings, request: Request) -> TokenClaims:
    try:
        token = bearer_from_header(request.headers.get("authorization"))
        return validate_token(settings, token, audience=settings.graph_audience, required_scopes={MAIL_SCOPE})
    except TokenError as exc:
        code = "InvalidAuthenticationToken" if exc.status == 401 else "ErrorAccessDenied"
        message = exc.description if exc.status == 401 else f"Access is denied. {exc.description}"
        raise GraphError(exc.status, code, message, {"WWW-Authenticate": exc.www_authenticate()}) from exc


def _ensure_schema(settings: SandboxSettings) -> None:
    key = str(settings.db_path)
    if key in _schema_ready:
        return
    with _schema_lock:
        if key not in _schema_ready:
            db.ensure_schema(settings.db_path, settings.today())
            _schema_ready.add(key)


async def _json_body(request: Request) -> Any:
    try:
        return await request.json()
    except (JSONDecodeError, UnicodeDecodeError) as exc:
        raise _invalid("The request body is not valid JSON.") from exc


def _invalid(message: str) -> GraphError:
    return GraphError(400, "ErrorInvalidRequest", message)


def graph_error_response(request: Request, exc: GraphError) -> JSONResponse:
    """``exc`` as Graph answers errors (also used by the calendar)."""
    inner = {
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S"),
        "request-id": str(uuid.uuid4()),
        "client-request-id": request.headers.get("client-request-id") or str(uuid.uuid4()),
    }
    body = {"error": {"code": exc.code, "message": exc.message, "innerError": inner}}
    return JSONResponse(body, status_code=exc.status, headers=exc.headers)
