"""What one planning pass produces: the model's next message, as tool calls or an answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PlannedCall:
    """A tool call the model will make."""

    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Step:
    """The model's next message: tool calls (``calls``), or the final ``answer``.

    ``answer`` may accompany calls as a short note (e.g. why a write is re-proposed).
    """

    calls: list[PlannedCall] = field(default_factory=list)
    answer: str = ""


def answer(text: str) -> Step:
    """A final answer without tool calls."""
    return Step(answer=text)
