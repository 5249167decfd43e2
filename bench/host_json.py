"""``host.json``'s queue-trigger settings (``extensions.queues``), as the Functions host applies them.

One reading for everything that stands in for the host: the bench's queue worker
(``bench/function_host.py``), its expected concurrency (:mod:`bench.queue_replies`)
and the tests' fuller worker (``tests/support/queue_worker.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from copilot.settings import PROJECT_ROOT

HOST_JSON = PROJECT_ROOT / "host.json"


def parse_timespan(text: str) -> float:
    """A .NET TimeSpan as host.json writes it (``[d.]hh:mm:ss[.fff]``), in seconds."""
    days = 0
    head, _, rest = text.partition(":")
    if "." in head:
        day_text, head = head.split(".", 1)
        days = int(day_text)
    minutes, _, seconds = rest.partition(":")
    return days * 86400 + int(head) * 3600 + int(minutes) * 60 + float(seconds or 0)


@dataclass(frozen=True)
class QueueOptions:
    """``extensions.queues`` of host.json, with the Functions host's defaults."""

    batch_size: int = 16
    new_batch_threshold: int = 8
    max_dequeue_count: int = 5
    visibility_timeout: float = 0.0
    """Delay before a failed message is retried (not the receive visibility)."""
    max_polling_interval: float = 60.0
    message_encoding: str = "base64"

    @property
    def most_at_once(self) -> int:
        """How many messages one instance runs at once: ``batchSize + newBatchThreshold``."""
        return self.batch_size + self.new_batch_threshold

    @classmethod
    def from_host_json(cls, path: Path = HOST_JSON) -> QueueOptions:
        """The settings in ``path`` (the project's host.json by default)."""
        queues = json.loads(path.read_text()).get("extensions", {}).get("queues", {})
        batch = int(queues.get("batchSize", 16))
        return cls(
            batch_size=batch,
            new_batch_threshold=int(queues.get("newBatchThreshold", batch // 2)),
            max_dequeue_count=int(queues.get("maxDequeueCount", 5)),
            visibility_timeout=parse_timespan(str(queues.get("visibilityTimeout", "00:00:00"))),
            max_polling_interval=parse_timespan(str(queues.get("maxPollingInterval", "00:01:00"))),
            message_encoding=str(queues.get("messageEncoding", "base64")).lower(),
        )
