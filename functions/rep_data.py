"""``data delete --rep`` outside the database: the token service and the turn queues.

The copilot's command line reaches this module lazily, for ``data delete`` only (as it reaches
``functions.doctor`` for the preflight; ``tests/unit/test_layering.py``): only the top layer
knows every place of the deployed app. :func:`outside_erasers` hands the command, in order:

* the bot's sign-out at the Bot Framework token service (``bot.rep_sign_out``);
* the purge of the rep's queued turns: messages of the turn queue and its poison queue whose
  activity is the rep's (``from.aadObjectId``, and the tenant when given). A waiting turn would
  otherwise run after the deletion and write the rep's data again; a failed one keeps the
  rep's message text in the poison queue until its time to live ends.

Reading a queue message makes it invisible for a while and counts as one delivery: the purge
first *peeks* (no side effect) and receives only when a visible message is the rep's or when
the queue holds more than a peek shows. Others' messages it received are made visible again at
once, each having spent one of its ``maxDequeueCount`` (host.json: 5) deliveries. A message a
worker is running at that moment is invisible to everyone else: the purge reports how many
messages the queue held that it could not see, so the admin runs it again a minute later.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from azure.core.exceptions import AzureError, ResourceNotFoundError
from azure.storage.queue import TextBase64DecodePolicy, TextBase64EncodePolicy
from azure.storage.queue.aio import QueueClient
from psycopg import AsyncConnection

from bot.rep_sign_out import sign_out_rep
from bot.settings import BotSettings
from copilot.persistence.outside_data import OutsideEraser, OutsideStep
from functions.envelope import InvalidEnvelope, TurnEnvelope
from functions.host import queue_client
from functions.turns import poison_queue_name

PLACE = "turn queues (Azure Storage: the rep's waiting and failed turns)"
PEEK = 32
"""The most messages one peek shows (the service's limit)."""
SCAN_VISIBILITY_SECONDS = 60
"""How long a message received by the purge stays invisible if the purge dies before releasing it."""
MAX_SCANNED = 5000
"""Messages one purge reads per queue at most (a turn queue holds seconds of traffic)."""


def is_reps_turn(text: str, *, rep: str, tenant: str | None) -> bool:
    """Whether a queue message is a turn of ``rep`` (of ``tenant``, when given)."""
    try:
        activity = TurnEnvelope.from_json(text).activity
    except InvalidEnvelope:
        return False
    sender = activity.get("from")
    if not isinstance(sender, dict) or sender.get("aadObjectId") != rep:
        return False
    if tenant is None:
        return True
    conversation = activity.get("conversation")
    channel_data = activity.get("channelData")
    tenants = {
        conversation.get("tenantId") if isinstance(conversation, dict) else None,
        (channel_data.get("tenant") or {}).get("id") if isinstance(channel_data, dict) else None,
    }
    return tenant in tenants


def _configured(settings: BotSettings) -> bool:
    """The environment names the app's storage (else the default points at a local Azurite)."""
    return bool(settings.queue_service_uri) or "queue_connection" in settings.model_fields_set


def _client(settings: BotSettings, name: str) -> QueueClient:
    return queue_client(
        settings,
        name,
        message_encode_policy=TextBase64EncodePolicy(),
        message_decode_policy=TextBase64DecodePolicy(),
        retry_total=1,
    )


async def _purge_queue(
    client: QueueClient, *, rep: str, tenant: str | None, dry_run: bool
) -> tuple[int, int]:
    """``(the rep's messages removed or found, messages it could not see)`` in one queue."""
    try:
        peeked = [m async for m in _peek(client)]
        properties = await client.get_queue_properties()
    except ResourceNotFoundError:
        return 0, 0
    held = int(properties.approximate_message_count or 0)
    mine = sum(is_reps_turn(str(m.content), rep=rep, tenant=tenant) for m in peeked)
    if dry_run or (mine == 0 and held <= len(peeked)):
        return mine, max(held - len(peeked), 0)
    removed, others = 0, []
    async for message in client.receive_messages(
        messages_per_page=PEEK, visibility_timeout=SCAN_VISIBILITY_SECONDS, max_messages=MAX_SCANNED
    ):
        if is_reps_turn(str(message.content), rep=rep, tenant=tenant):
            await client.delete_message(message)
            removed += 1
        else:
            others.append(message)
    for message in others:
        # Visible again at once: the purge only looked.
        await client.update_message(message, visibility_timeout=0)
    unseen = max(held - removed - len(others), 0)
    return removed, unseen


async def _peek(client: QueueClient) -> Any:
    for message in await client.peek_messages(max_messages=PEEK):
        yield message


async def purge_rep_turns(
    settings: BotSettings, *, rep: str, tenant: str | None, dry_run: bool
) -> OutsideStep:
    """Remove the rep's messages from the turn queue and its poison queue."""
    if not _configured(settings):
        return OutsideStep(
            PLACE,
            "not_configured",
            "AzureWebJobsStorage (or AzureWebJobsStorage__queueServiceUri) is not set here: set it to "
            "the Function App's storage and run `data delete` again to purge the rep's queued turns",
        )
    names = [settings.queue_name, poison_queue_name(settings.queue_name)]
    found, unseen, details = 0, 0, []
    for name in names:
        try:
            async with _client(settings, name) as client:
                mine, hidden = await _purge_queue(client, rep=rep, tenant=tenant, dry_run=dry_run)
        except (AzureError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return OutsideStep(
                PLACE,
                "failed",
                f"{name}: {first} (the storage account must be reachable from here, with the Storage "
                "Queue Data Contributor role for your identity; run `data delete` again)",
                found,
            )
        found += mine
        unseen += hidden
        details.append(f"{name}: {mine}")
    verb = "would remove (of the messages a peek shows)" if dry_run else "removed"
    detail = f"{verb} {found} of the rep's queued turns ({', '.join(details)})"
    if unseen:
        detail += (
            f"; {unseen} message(s) were not visible (being run, or beyond a peek): "
            "run `data delete` again in a minute"
        )
    return OutsideStep(PLACE, "would" if dry_run else "done", detail, found)


def outside_erasers(settings: BotSettings | None = None) -> Sequence[OutsideEraser]:
    """The erasers ``data delete`` runs before the database rows go, in order."""
    bot_settings = settings or BotSettings()

    async def token_service(
        conn: AsyncConnection[Any], *, rep: str, tenant: str | None, dry_run: bool
    ) -> OutsideStep:
        return await sign_out_rep(bot_settings, conn, rep=rep, tenant=tenant, dry_run=dry_run)

    async def turn_queues(
        conn: AsyncConnection[Any], *, rep: str, tenant: str | None, dry_run: bool
    ) -> OutsideStep:
        return await purge_rep_turns(bot_settings, rep=rep, tenant=tenant, dry_run=dry_run)

    return (token_service, turn_queues)
