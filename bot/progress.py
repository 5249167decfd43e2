"""Progress while a turn works: Teams streaming (informative updates) in 1:1 chats, typing elsewhere.

The streaming rules Teams and Microsoft 365 Copilot Chat hold a custom engine agent to:

* **one stream per turn**: a turn's ``TurnProgress`` is kept on its ``TurnContext``
  (``TurnProgress.for_turn``), so every caller in the turn streams into the same one;
* **closed before anything else is posted**: the answer closes it (``final_entities``), and a
  turn that ends in approval cards, an error or a refusal closes it with a short final message
  first (``end``), so "Working on it…" never stays open above a card;
* **nothing on a stream after it ends**: updates, held updates and keep-alives stop for good;
* **a sign of life at least every ``KEEPALIVE_SECONDS``** (10 s): Copilot Chat wants a first
  response within 15 s and shows "Something went wrong" after 45 s without a streaming update,
  so a long model call never leaves the stream silent for that long.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from botbuilder.core import MessageFactory, TurnContext
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
"""Teams ends a stream after two minutes: at this age the bot closes it itself with
``LONG_TURN`` (its final message), and the answer then arrives as a message of its own."""
LONG_TURN = "This is taking longer than usual: the answer follows in its own message."
KEEPALIVE_SECONDS = 10.0
"""The longest a personal chat's stream stays without an informative update while the turn
works: Microsoft 365 Copilot Chat expects a response within 15 s of the question and ends a
stream that is silent for 45 s ("Something went wrong"). 10 s keeps a margin under 15 s for a
slow Bot Connector round trip."""
STILL_WORKING = "Still working on it…"
TYPING_EVERY_SECONDS = 3.0
"""Outside 1:1 chats a typing indicator lasts a few seconds; one per this many is enough
(and stays far below Teams' seven messages per second per conversation)."""

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


TURN_STATE_KEY = "copilot.turn_progress"
"""Where a turn's ``TurnProgress`` is kept on its ``TurnContext`` (one stream per turn)."""


class TurnProgress:
    """Sends a turn's progress to the rep, paced to Teams' limits.

    In 1:1 chats: informative streaming updates, at most one per
    ``STREAM_UPDATE_SECONDS``; an update that comes sooner is held, and the latest held
    one is sent once the second is up, from a task of its own (the turn never waits for
    the pace), unless the answer comes first. While the turn works and nothing else was
    shown for ``KEEPALIVE_SECONDS``, the last line is shown again (a keep-alive, from a task
    of its own). At ``STREAM_MAX_SECONDS`` the keep-alive closes the stream with ``LONG_TURN``;
    no update after that, nor after the stream ended.
    Elsewhere: a typing indicator at most every ``TYPING_EVERY_SECONDS`` (streaming is for
    personal chats only).
    """

    def __init__(
        self,
        turn_context: TurnContext,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        keepalive: float = KEEPALIVE_SECONDS,
    ):
        self._context = turn_context
        conversation = turn_context.activity.conversation
        self._personal = getattr(conversation, "conversation_type", None) in (None, "personal")
        self._clock = clock
        self._sleep = sleep
        self._keepalive_every = keepalive
        self._held: ProgressEvent | None = None
        self._flush: asyncio.Task[None] | None = None
        self._keepalive: asyncio.Task[None] | None = None
        self._starting: asyncio.Task[None] | None = None
        self._sequence = 0
        self._started: float | None = None
        self._last_sent: float | None = None
        self._last_text: str | None = None
        self._stopped = False
        self._ended = False
        self._in_flight: asyncio.Future[None] | None = None
        self._sender: asyncio.Task[Any] | None = None
        self.stream_id: str | None = None

    @classmethod
    def for_turn(
        cls,
        turn_context: TurnContext,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        keepalive: float = KEEPALIVE_SECONDS,
    ) -> TurnProgress:
        """The turn's one progress stream: created on first use, the same one after."""
        existing = turn_context.turn_state.get(TURN_STATE_KEY)
        if isinstance(existing, TurnProgress):
            return existing
        progress = cls(turn_context, clock=clock, sleep=sleep, keepalive=keepalive)
        turn_context.turn_state[TURN_STATE_KEY] = progress
        return progress

    @staticmethod
    def of(turn_context: TurnContext) -> TurnProgress | None:
        """The turn's progress stream, if it has one."""
        existing = turn_context.turn_state.get(TURN_STATE_KEY)
        return existing if isinstance(existing, TurnProgress) else None

    @property
    def open(self) -> bool:
        """A stream was started and is neither ended nor past Teams' two minutes."""
        return self.stream_id is not None and not self._ended and not self._expired(self._clock())

    async def start(self) -> None:
        """Acknowledge at once, before any lookup."""
        await self.update(ProgressEvent("status", "Working on it…"))

    def start_soon(self) -> None:
        """``start`` from synchronous code: a task of its own; a failure is logged, never raised."""

        async def acknowledge() -> None:
            try:
                await self.start()
            except Exception as exc:  # noqa: BLE001 - progress is best effort; the turn goes on
                logger.warning("a progress update was not delivered: %s", exc)

        if self._starting is None:
            self._starting = asyncio.ensure_future(acknowledge())

    def _expired(self, now: float) -> bool:
        return self._started is not None and now - self._started >= STREAM_MAX_SECONDS

    async def update(self, event: ProgressEvent) -> None:
        """One informative update (streaming) or a typing indicator, if the pace allows."""
        if self._stopped:
            return
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
        await self._send(event.message)

    async def _send_held(self, delay: float) -> None:
        await self._sleep(delay)
        self._flush = None
        event, self._held = self._held, None
        if event is not None and not self._stopped and not self._expired(self._clock()):
            self._last_sent = self._clock()
            await self._send_quietly(event.message)

    async def _keep_alive(self) -> None:
        """Show the last line again whenever the stream was silent for ``keepalive`` seconds;
        close the stream before Teams' two minutes run out (the answer then comes on its own)."""
        while not self._stopped:
            now = self._clock()
            last = self._last_sent if self._last_sent is not None else now
            close_at = (self._started if self._started is not None else now) + STREAM_MAX_SECONDS
            due = min(last + self._keepalive_every, close_at)
            if due > now:
                await self._sleep(due - now)
                continue
            if self._stopped:
                return
            if now >= close_at:
                await self._close_long_stream()
                return
            self._last_sent = now
            text = self._last_text
            await self._send_quietly(STILL_WORKING if text in (None, "Working on it…") else text)

    async def _close_long_stream(self) -> None:
        """End a stream that reached ``STREAM_MAX_SECONDS`` with a final message of its own."""
        if self.stream_id is None:
            return
        message = MessageFactory.text(LONG_TURN)
        message.entities = [JsonEntity(streaminfo("final", stream_id=self.stream_id))]
        self._stopped = True
        self._ended = True
        try:
            await self._deliver(message)
        except Exception as exc:  # noqa: BLE001 - progress is best effort; the turn goes on
            logger.warning("the long turn's stream was not closed: %s", exc)

    async def _send_quietly(self, text: str) -> None:
        """An update from a task of its own: a failure to show progress never fails the turn."""
        try:
            await self._send(text)
        except Exception as exc:  # noqa: BLE001 - progress is best effort; the turn goes on
            logger.warning("a progress update was not delivered: %s", exc)

    async def _send(self, text: str) -> None:
        if self._stopped:
            return  # nothing is sent on a stream after it ended (or while its result goes out)
        self._sequence += 1
        self._last_text = text
        entity = streaminfo("informative", self._sequence, self.stream_id)
        activity = Activity(
            type=ActivityTypes.typing,
            text=text,
            entities=[JsonEntity(entity)],
            channel_data={k: v for k, v in entity.items() if k != "type"},
        )
        response = await self._deliver(activity)
        if self.stream_id is None and response is not None and getattr(response, "id", None):
            self.stream_id = response.id
        if self._keepalive is None and not self._stopped:
            self._keepalive = asyncio.create_task(self._keep_alive())

    async def _deliver(self, activity: Activity) -> Any:
        """Send ``activity``, marked in flight (``stop`` waits for it)."""
        in_flight = self._in_flight = asyncio.get_running_loop().create_future()
        self._sender = asyncio.current_task()
        try:
            return await self._context.send_activity(activity)
        finally:
            in_flight.set_result(None)
            self._in_flight = None

    def close(self) -> None:
        """Stop sending: drop a held update and the keep-alive (the turn's result is on its way).

        The stream itself stays open until the answer, ``end`` or the error message closes it.
        An update already on its way is not recalled: ``stop`` waits for it.
        """
        self._stopped = True
        sending = self._sender if self._in_flight is not None else None
        for task in (self._flush, self._keepalive, self._starting):
            # Not the task whose update is on its way: it ends by itself once it arrived.
            if task is not None and task is not asyncio.current_task() and task is not sending:
                task.cancel()
        self._flush = None
        self._keepalive = None
        self._held = None

    async def stop(self) -> None:
        """``close``, and wait for an update already on its way, so that nothing sent for this
        stream can arrive after the message that closes it."""
        self.close()
        in_flight = self._in_flight
        if in_flight is not None and not in_flight.done():
            await asyncio.shield(in_flight)

    def final_entities(self) -> list[Entity]:
        """Entities that close the stream on the final message (none if no stream is open).

        Called just before the message that closes the stream is sent: a held update is
        dropped, never sent after it, and the stream counts as ended from now on.
        """
        was_open = self.open
        self.close()
        self._ended = True
        if not was_open:
            return []
        # All of it: botbuilder's Entity would send only the type, and Teams would not know
        # which stream the answer closes.
        assert self.stream_id is not None
        return [JsonEntity(streaminfo("final", stream_id=self.stream_id))]

    async def end(self, text: str) -> None:
        """Post ``text``: as the stream's final message if a stream is open, else plainly.

        For a turn whose result is not an answer (approval cards, a refusal, an error): the
        stream is closed before anything else is posted.
        """
        await self.stop()
        message = MessageFactory.text(text)
        entities = self.final_entities()
        if entities:
            message.entities = entities
        await self._context.send_activity(message)
