"""Progress while a turn works: Teams streaming (informative updates) in 1:1 chats, typing elsewhere."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from botbuilder.core import TurnContext
from botbuilder.schema import Activity, ActivityTypes, Entity

from bot.json_entity import JsonEntity
from copilot.progress import ProgressEvent

logger = logging.getLogger(__name__)


def streaminfo(stream_type: str, sequence: int | None = None, stream_id: str | None = None) -> dict[str, Any]:
    """The ``streaminfo`` entity of Teams' streaming protocol (pure)."""
    info: dict[str, Any] = {"type": "streaminfo", "streamType": stream_type}
    if sequence is not None:
        info["streamSequence"] = sequence
    if stream_id is not None:
        info["streamId"] = stream_id
    return info


STREAM_UPDATE_SECONDS = 1.0
"""Teams accepts about one streaming update per second; faster ones are throttled."""
STREAM_MAX_SECONDS = 110.0
"""Teams ends a stream after two minutes: updates stop short of that, and the answer then
arrives as a plain message instead of closing a stream Teams already closed."""
TYPING_EVERY_SECONDS = 3.0
"""Outside 1:1 chats a typing indicator lasts a few seconds; one per this many is enough
(and stays far below Teams' seven messages per second per conversation)."""

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class TurnProgress:
    """Sends a turn's progress to the rep, paced to Teams' limits.

    In 1:1 chats: informative streaming updates, at most one per
    ``STREAM_UPDATE_SECONDS``; an update that comes sooner is held, and the latest held
    one is sent once the second is up, from a task of its own (the turn never waits for
    the pace), unless the answer comes first.
    No update after ``STREAM_MAX_SECONDS``. Elsewhere: a typing indicator at most every
    ``TYPING_EVERY_SECONDS`` (streaming is for personal chats only).
    """

    def __init__(
        self, turn_context: TurnContext, *, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep
    ):
        self._context = turn_context
        conversation = turn_context.activity.conversation
        self._personal = getattr(conversation, "conversation_type", None) in (None, "personal")
        self._clock = clock
        self._sleep = sleep
        self._held: ProgressEvent | None = None
        self._flush: asyncio.Task[None] | None = None
        self._sequence = 0
        self._started: float | None = None
        self._last_sent: float | None = None
        self.stream_id: str | None = None

    async def start(self) -> None:
        """Acknowledge at once, before any lookup."""
        await self.update(ProgressEvent("status", "Working on it…"))

    def _expired(self, now: float) -> bool:
        return self._started is not None and now - self._started >= STREAM_MAX_SECONDS

    async def update(self, event: ProgressEvent) -> None:
        """One informative update (streaming) or a typing indicator, if the pace allows."""
        now = self._clock()
        if self._started is None:
            self._started = now
        if not self._personal:
            if self._last_sent is None or now - self._last_sent >= TYPING_EVERY_SECONDS:
                self._last_sent = now
                await self._context.send_activity(Activity(type=ActivityTypes.typing))
            return
        if self._expired(now):
            return
        if self._last_sent is not None and now - self._last_sent < STREAM_UPDATE_SECONDS:
            self._held = event
            if self._flush is None:
                self._flush = asyncio.create_task(
                    self._send_held(self._last_sent + STREAM_UPDATE_SECONDS - now)
                )
            return
        self._held = None
        self._last_sent = now
        await self._send(event)

    async def _send_held(self, delay: float) -> None:
        await self._sleep(delay)
        self._flush = None
        event, self._held = self._held, None
        if event is not None and not self._expired(self._clock()):
            self._last_sent = self._clock()
            await self._send(event)

    async def _send(self, event: ProgressEvent) -> None:
        self._sequence += 1
        entity = streaminfo("informative", self._sequence, self.stream_id)
        activity = Activity(
            type=ActivityTypes.typing,
            text=event.message,
            entities=[JsonEntity(entity)],
            channel_data={k: v for k, v in entity.items() if k != "type"},
        )
        response = await self._context.send_activity(activity)
        if self.stream_id is None and response is not None and getattr(response, "id", None):
            self.stream_id = response.id

    def close(self) -> None:
        """Drop a held update: the turn is over (its answer, card or error is being sent)."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        self._held = None

    def final_entities(self) -> list[Entity]:
        """Entities that close the stream on the final message (none if no stream is open).

        Called just before the answer is sent: a held update is dropped, never sent after it.
        """
        self.close()
        if self.stream_id is None or self._expired(self._clock()):
            return []
        # All of it: botbuilder's Entity would send only the type, and Teams would not know
        # which stream the answer closes.
        return [JsonEntity(streaminfo("final", stream_id=self.stream_id))]
