"""``POST /api/messages``: where Teams (the Bot Framework channel) delivers activities.

The function key is off (``AuthLevel.ANONYMOUS``): the Bot Framework JWT in the
``Authorization`` header *is* the authentication, validated with botbuilder against the
channel's published signing keys (issuer, audience = our app id, expiry, signature,
the key's channel endorsement, and the ``serviceurl`` claim against the activity's
``serviceUrl``).

Responses:

* ``400`` + JSON error: the body is not a Bot Framework activity.
* ``401`` + ``WWW-Authenticate: Bearer error="invalid_token"``: any token problem —
  missing, malformed, expired, wrong issuer, wrong audience, bad signature, unknown key,
  key not endorsed for the channel, or ``serviceurl`` claim not matching the activity.
  They are one class of failure (RFC 6750 ``invalid_token``); a 403 would suggest a
  valid caller lacking a permission, which none of these is. Nothing is enqueued.
* ``invoke`` activities (``signin/tokenExchange``, ``adaptiveCard/action``, ...) are
  answered synchronously: the channel waits for their response body.
* ``413``: an activity too large for one queue message (64 KiB base64; Teams' own are
  far smaller).
* Everything else (messages, card submissions, conversationUpdate) is enqueued as one
  message on the turn queue and answered ``202`` at once. Turns can take many seconds
  (model + CRM calls) and Teams retries webhooks that answer slowly, so the turn never
  runs inside this request.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import azure.functions as func
from botbuilder.schema import Activity, ActivityTypes
from botframework.connector.auth import AuthenticateRequestResult

from bot.runtime import Unauthenticated, authenticate_activity
from functions.dedupe import first_delivery
from functions.envelope import TurnEnvelope
from functions.host import FunctionsHost, get_host

logger = logging.getLogger(__name__)

bp = func.Blueprint()

_JSON = "application/json"
MAX_QUEUE_MESSAGE_BYTES = 64 * 1024
"""Azure Storage queues take messages up to 64 KiB (here: after base64 encoding)."""


class BadActivity(ValueError):
    """The request body is not an activity we can accept."""


@bp.function_name("messages")
@bp.route(route="messages", methods=["POST"], auth_level=func.AuthLevel.ANONYMOUS)
async def messages(req: func.HttpRequest) -> func.HttpResponse:
    """Authenticate the activity, then answer an invoke inline or enqueue the turn (202)."""
    try:
        return await _handle(req)
    except Exception:
        # The HTTP edge: never a stack trace to the caller, always a reference in the log.
        ref = uuid.uuid4().hex[:8]
        logger.exception("POST /api/messages failed (ref %s)", ref)
        return _json_response(500, {"error": "internal_error", "ref": ref})


async def _handle(req: func.HttpRequest) -> func.HttpResponse:
    try:
        body, activity = parse_activity(req.get_body())
    except BadActivity as exc:
        return _json_response(400, {"error": "bad_request", "message": str(exc)})
    host = await get_host()
    try:
        result = await authenticate_activity(host.runtime.adapter, activity, req.headers.get("Authorization"))
    except Unauthenticated as exc:
        logger.warning(
            "rejected activity %s from channel %s: %s", activity.id, activity.channel_id, exc.args[0]
        )
        return _json_response(
            401,
            {"error": "unauthorized", "message": "missing or invalid Bot Framework token"},
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )
    if activity.type == ActivityTypes.invoke:
        return await _invoke(host, result, activity)
    message = TurnEnvelope.accepted(body, result).to_json()
    if _base64_size(message) > MAX_QUEUE_MESSAGE_BYTES:
        logger.warning("refused activity %s: too large to queue", activity.id)
        return _json_response(413, {"error": "too_large", "message": "the activity is too large to process"})
    if not await first_delivery(host.runtime.service.pool, activity):
        logger.info("activity %s was already accepted (a webhook retry); not queued again", activity.id)
        return func.HttpResponse(status_code=202)
    await host.queue.send_message(message)
    logger.info(
        "queued %s activity %s (conversation %s)",
        activity.type,
        activity.id,
        activity.conversation.id if activity.conversation else None,
    )
    return func.HttpResponse(status_code=202)


def parse_activity(raw: bytes) -> tuple[dict[str, Any], Activity]:
    """The posted JSON and its activity; :class:`BadActivity` with a readable reason."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadActivity("the body must be a JSON Bot Framework activity") from exc
    if not isinstance(body, dict):
        raise BadActivity("the body must be a JSON object (a Bot Framework activity)")
    if not isinstance(body.get("type"), str) or not body["type"]:
        raise BadActivity("the activity has no 'type'")
    if not isinstance(body.get("serviceUrl"), str) or not body["serviceUrl"]:
        raise BadActivity("the activity has no 'serviceUrl'")
    conversation = body.get("conversation")
    if not isinstance(conversation, dict) or not conversation.get("id"):
        raise BadActivity("the activity has no 'conversation.id'")
    try:
        activity = Activity().deserialize(body)
    except ValueError as exc:  # the serialiser's DeserializationError
        raise BadActivity(f"the activity is malformed: {exc}") from exc
    return body, activity


async def _invoke(
    host: FunctionsHost, result: AuthenticateRequestResult, activity: Activity
) -> func.HttpResponse:
    runtime = host.runtime
    invoke = await runtime.adapter.process_activity(result, activity, runtime.bot.on_turn)
    if invoke is None:
        return func.HttpResponse(status_code=200)
    payload = invoke.body
    if hasattr(payload, "serialize"):
        # botbuilder's msrest serialiser rejects plain dicts; models serialise themselves.
        payload = payload.serialize()
    status = int(invoke.status or 200)
    if payload is None:
        return func.HttpResponse(status_code=status)
    return _json_response(status, payload)


def _base64_size(text: str) -> int:
    return 4 * -(-len(text.encode()) // 3)


def _json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> func.HttpResponse:
    return func.HttpResponse(json.dumps(body), status_code=status, mimetype=_JSON, headers=headers)
