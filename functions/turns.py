"""The turn queue's consumers: run queued turns; tell the rep when one finally failed.

``turns`` runs each activity the HTTP trigger accepted, with the authentication result
it recorded; the bot replies proactively to the activity's ``serviceUrl`` through the
Bot Connector with the bot's app-only token. Failures inside the turn are answered by
the bot's own error handler (a short message with a reference), so they are not
retried. Only a failure outside it — the error reply itself failing, a broken message,
the host not starting — makes the Functions host retry the message; after
``maxDequeueCount`` (host.json) it moves to ``<queue>-poison``, where ``turns_poison``
logs it and tells the rep.

Cold start: the Functions worker indexes the app by importing ``function_app``, which
imports every blueprint, the HTTP trigger's included. So this module imports only
``azure.functions`` at load time; the handlers import the envelope, botbuilder and the
host (whose runtime loads the agent: LangChain, LangGraph, MCP) on their first message.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import uuid
from typing import TYPE_CHECKING

import azure.functions as func

from bot import DEFAULT_TURN_QUEUE

if TYPE_CHECKING:
    from botbuilder.schema import Activity

    from functions.envelope import TurnEnvelope

logger = logging.getLogger(__name__)

bp = func.Blueprint()

CONNECTION = "AzureWebJobsStorage"
"""The app setting holding the storage connection string (the trigger binding's name for it)."""


def turn_queue_name() -> str:
    """``COPILOT_TURN_QUEUE`` (read when the app is indexed), else BotSettings' default.

    The default comes from ``bot`` itself, not ``bot.settings``: indexing the app should not
    import pydantic-settings (``tests/unit/test_function_app.py`` checks they agree).
    """
    return os.environ.get("COPILOT_TURN_QUEUE") or DEFAULT_TURN_QUEUE


TURN_QUEUE = turn_queue_name()


def poison_queue_name(queue: str) -> str:
    """Where the Functions host moves a message of ``queue`` after ``maxDequeueCount`` tries."""
    return f"{queue}-poison"


POISON_QUEUE = poison_queue_name(TURN_QUEUE)

# Not "nothing was changed": an approved write may have committed before a later step
# failed; its card and the audit log say what happened.
FAILED_MESSAGE = (
    "Sorry, something went wrong with your last request (ref {ref}). Anything you approved shows "
    "its outcome on its card; please ask again."
)


@bp.function_name("turns")
@bp.queue_trigger(arg_name="msg", queue_name=TURN_QUEUE, connection=CONNECTION)
async def turns(msg: func.QueueMessage) -> None:
    """Run one queued turn (exceptions propagate: the host retries, then moves it to poison)."""
    # Imported on the first message, not when the app is indexed (see the module docstring).
    from functions.envelope import InvalidEnvelope, TurnEnvelope
    from functions.host import get_host

    try:
        envelope = TurnEnvelope.from_json(msg.get_body())
        activity = envelope.to_activity()
    except InvalidEnvelope as exc:
        # Retrying cannot fix a message we cannot read: drop it, loudly.
        logger.error("dropped unreadable turn message %s: %s", msg.id, exc)
        return
    logger.info(
        "running %s activity %s (conversation %s), queued %s",
        activity.type,
        activity.id,
        activity.conversation.id,
        _waited(envelope.received_at),
    )
    host = await get_host()
    runtime = host.runtime
    result = envelope.authenticate_result(runtime.adapter.bot_framework_authentication)
    await runtime.adapter.process_activity(result, activity, runtime.bot.on_turn)


@bp.function_name("turns_poison")
@bp.queue_trigger(arg_name="msg", queue_name=POISON_QUEUE, connection=CONNECTION)
async def turns_poison(msg: func.QueueMessage) -> None:
    """A turn failed on every attempt: log it in full and tell the rep plainly."""
    from botbuilder.schema import ActivityTypes

    from functions.envelope import InvalidEnvelope, TurnEnvelope

    ref = (msg.id or uuid.uuid4().hex).replace("-", "")[:8]
    try:
        envelope = TurnEnvelope.from_json(msg.get_body())
        activity = envelope.to_activity()
    except InvalidEnvelope as exc:
        logger.error("dropped unreadable poison message %s (ref %s): %s", msg.id, ref, exc)
        return
    sender = activity.from_property
    logger.error(
        "turn failed on every attempt and was moved to %s (ref %s): activity %s type %s channel %s "
        "conversation %s from %s (aad %s), received %s, queue message %s dequeued %s times",
        POISON_QUEUE,
        ref,
        activity.id,
        activity.type,
        activity.channel_id,
        activity.conversation.id,
        sender.id if sender else None,
        getattr(sender, "aad_object_id", None) if sender else None,
        envelope.received_at,
        msg.id,
        getattr(msg, "dequeue_count", None),
    )
    if activity.type != ActivityTypes.message:
        return  # e.g. a failed install greeting: the rep asked nothing, so nothing to apologise for
    await notify_failure(envelope, activity, ref)


async def notify_failure(envelope: TurnEnvelope, activity: Activity, ref: str) -> None:
    """Tell the rep, proactively in the activity's conversation, that their request failed."""
    from botbuilder.core import TurnContext

    from functions.host import get_host

    host = await get_host()
    reference = TurnContext.get_conversation_reference(activity)

    async def send(turn_context: TurnContext) -> None:
        await turn_context.send_activity(FAILED_MESSAGE.format(ref=ref))

    await host.runtime.adapter.continue_conversation_with_claims(
        envelope.claims_identity(), reference, envelope.audience, send
    )


def _waited(received_at: str) -> str:
    try:
        received = dt.datetime.fromisoformat(received_at)
    except ValueError:
        return "at an unknown time"
    seconds = (dt.datetime.now(dt.UTC) - received).total_seconds()
    return f"{seconds:.1f}s ago"
