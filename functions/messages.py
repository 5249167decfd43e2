"""``POST /api/messages``: where Teams (the Bot Framework channel) delivers activities.

The function key is off (``AuthLevel.ANONYMOUS``): the Bot Framework JWT in the
``Authorization`` header *is* the authentication, validated with botbuilder against the
channel's published signing keys (issuer, audience = our app id, expiry, signature,
the key's channel endorsement, and the ``serviceurl`` claim against the activity's
``serviceUrl``). The token is checked **before** the body is read as an activity
(``bot.runtime.accept_activity``, shared with the dev server); the body's shape is then
checked by ``bot.activity_input``.

Responses:

* ``401`` + ``WWW-Authenticate: Bearer error="invalid_token"``: any token problem —
  missing, malformed, expired, wrong issuer, wrong audience, bad signature, unknown key,
  key not endorsed for the channel, or ``serviceurl`` claim not matching the activity.
  They are one class of failure (RFC 6750 ``invalid_token``); a 403 would suggest a
  valid caller lacking a permission, which none of these is. Whatever the body was:
  an unauthenticated caller learns nothing about it. Nothing is enqueued.
* ``400`` + JSON ``{"error": "bad_request", "message": ...}``: a valid token, but the
  body is not a Bot Framework activity this bot can handle (not JSON, not an object,
  missing or mistyped fields, a ``serviceUrl`` that is not an http(s) URL, ...).
* ``413``: a body over 256 KiB, or an activity too large for one queue message (64 KiB
  base64; Teams' own are far smaller).
* ``invoke`` activities (``signin/tokenExchange``, ``adaptiveCard/action``, ...) are
  answered synchronously: the channel waits for their response body.
* Everything else (messages, card submissions, conversationUpdate) is enqueued as one
  message on the turn queue and answered ``202`` at once. Turns can take many seconds
  (model + CRM calls) and Teams retries webhooks that answer slowly, so the turn never
  runs inside this request.
* ``500`` + a reference: our own failure (e.g. the signing keys unreachable), logged.

Cold start: the Functions worker indexes the app by importing ``function_app``, which
imports every blueprint, so this module imports only ``azure.functions`` at load time;
what a request needs is imported by :func:`_handle` on the first request. Enqueueing
needs only the HTTP edge (``functions.host.get_edge``: settings, token validation, the
de-duplication pool, the queue), never the agent (LangChain, LangGraph, MCP); only an
``invoke``, answered inline, opens the bot runtime (``get_host``) and with it the agent.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

import azure.functions as func

if TYPE_CHECKING:
    from bot.runtime import Answer

logger = logging.getLogger(__name__)

bp = func.Blueprint()

_JSON = "application/json"
MAX_QUEUE_MESSAGE_BYTES = 64 * 1024
"""Azure Storage queues take messages up to 64 KiB (here: after base64 encoding)."""


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
    # Imported on the first request, not when the app is indexed (see the module docstring).
    # None of these imports the agent stack.
    from bot.activity_input import InvalidActivity
    from bot.runtime import Unauthenticated, accept_activity, log_refusal, refusal, run_inline
    from functions.dedupe import first_delivery
    from functions.envelope import TurnEnvelope
    from functions.host import get_edge, get_host

    edge = await get_edge()
    # The Functions host joins repeated headers into one value; botbuilder refuses that.
    authorization = [value] if (value := req.headers.get("Authorization")) is not None else []
    try:
        inbound = await accept_activity(edge.auth, edge.bot_settings, req.get_body(), authorization)
    except (Unauthenticated, InvalidActivity) as exc:
        log_refusal(exc)
        return _answer(refusal(exc))
    activity = inbound.activity
    if inbound.shape.type == "invoke":
        # The channel waits for the turn's own response: this one needs the bot (and the agent).
        return _answer(await run_inline((await get_host()).runtime, inbound))
    message = TurnEnvelope.accepted(inbound.body, inbound.auth).to_json()
    if _base64_size(message) > MAX_QUEUE_MESSAGE_BYTES:
        logger.warning("refused activity %s: too large to queue", activity.id)
        return _json_response(413, {"error": "too_large", "message": "the activity is too large to process"})
    if not await first_delivery(edge.pool, activity):
        logger.info("activity %s was already accepted (a webhook retry); not queued again", activity.id)
        return func.HttpResponse(status_code=202)
    await edge.queue.send_message(message)
    logger.info(
        "queued %s activity %s (conversation %s)", activity.type, activity.id, inbound.shape.conversation.id
    )
    return func.HttpResponse(status_code=202)


def _answer(answer: Answer) -> func.HttpResponse:
    if answer.body is None:
        return func.HttpResponse(status_code=answer.status, headers=answer.headers)
    return _json_response(answer.status, answer.body, answer.headers)


def _base64_size(text: str) -> int:
    return 4 * -(-len(text.encode()) // 3)


def _json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> func.HttpResponse:
    return func.HttpResponse(json.dumps(body), status_code=status, mimetype=_JSON, headers=headers)
