"""Progress while a turn works: Teams streaming (informative updates) in 1:1 chats, typing elsewhere."""

from __future__ import annotations

import logging
from typing import Any

from botbuilder.core import TurnContext
from botbuilder.schema import Activity, ActivityTypes, Entity

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


class TurnProgress:
    """Sends each progress event to the rep as soon as it happens."""

    def __init__(self, turn_context: TurnContext):
        self._context = turn_context
        conversation = turn_context.activity.conversation
        self._personal = getattr(conversation, "conversation_type", None) in (None, "personal")
        self._sequence = 0
        self.stream_id: str | None = None

    async def start(self) -> None:
        """Acknowledge at once, before any lookup."""
        await self.update(ProgressEvent("status", "Working on it…"))

    async def update(self, event: ProgressEvent) -> None:
        """One informative update (streaming) or a typing indicator."""
        if not self._personal:
            await self._context.send_activity(Activity(type=ActivityTypes.typing))
            return
        self._sequence += 1
        entity = streaminfo("informative", self._sequence, self.stream_id)
        activity = Activity(
            type=ActivityTypes.typing,
            text=event.message,
            entities=[Entity().deserialize(entity)],
            channel_data={k: v for k, v in entity.items() if k != "type"},
        )
        response = await self._context.send_activity(activity)
        if self.stream_id is None and response is not None and getattr(response, "id", None):
            self.stream_id = response.id

    def final_entities(self) -> list[Entity]:
        """Entities that close the stream on the final message (none if no stream started)."""
        if self.stream_id is None:
            return []
        return [Entity().deserialize(streaminfo("final", stream_id=self.stream_id))]
