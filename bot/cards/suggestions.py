"""Suggested changes on a brief or digest (pure): each one's cited question, a button that asks
for the change in chat, and "Not now"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, assert_never

from bot.cards.blocks import (
    SUBMIT_VERSION,
    Card,
    command_data,
    text_block,
)
from copilot.briefs.types import (
    Suggestion,
)

__all__ = [
    "DECLINE_SUGGESTION_KIND",
    "NOT_NOW",
    "decline_suggestion_data",
    "suggestion_block",
    "suggestion_button_title",
    "suggestion_request",
]

DECLINE_SUGGESTION_KIND = "decline_suggestion"
"""``data.copilot`` of a suggestion's "Not now" button: record it declined at the record's version."""
NOT_NOW = "Not now"


def suggestion_request(suggestion: Suggestion) -> str:
    """What a suggestion's button sends, as if the rep typed it (the model proposes the change,
    and its approval card follows)."""
    match suggestion.kind:
        case "close_date_passed":
            return (
                f"move the close date of {suggestion.record_name} ({suggestion.record_id}) "
                f"to {suggestion.value}"
            )
        case "log_meeting":
            # The attendees by name, before the deal (whose name may hold a dash): the model finds
            # them among the account's contacts and names them on the activity.
            people = f" with {' and '.join(suggestion.contacts)}" if suggestion.contacts else ""
            return f"log a meeting{people} on {suggestion.record_name} ({suggestion.record_id}) — {suggestion.value}"
        case "set_next_step":
            return f"change the next step for {suggestion.record_name} ({suggestion.record_id}): {suggestion.value}"
        case "follow_up_task":
            due = f" due {suggestion.due.isoformat()}" if suggestion.due else ""
            return (
                f"log a task on {suggestion.record_name} ({suggestion.record_id}){due} — {suggestion.value}"
            )
        case _:
            assert_never(suggestion.kind)


def suggestion_button_title(suggestion: Suggestion) -> str:
    """The title of the button that asks for a suggestion's change."""
    match suggestion.kind:
        case "close_date_passed":
            return "Move the close date"
        case "log_meeting":
            return "Log this meeting"
        case "set_next_step":
            return "Set the next step"
        case "follow_up_task":
            return "Add the task"
        case _:
            assert_never(suggestion.kind)


def decline_suggestion_data(suggestion: Suggestion) -> dict[str, Any]:
    """The ``data`` of a "Not now" button: which suggestion, at which record version."""
    return {
        "copilot": DECLINE_SUGGESTION_KIND,
        "v": SUBMIT_VERSION,
        "kind": suggestion.kind,
        "record_id": suggestion.record_id,
        "record_version": suggestion.record_version,
    }


def suggestion_block(suggestions: Sequence[Suggestion]) -> list[Card]:
    """A card's "Suggestions" section (pure): each suggestion's cited question, a button that
    asks for the change in chat (so it is proposed through the normal approval card) and
    "Not now", which declines it until the record changes. No suggestions: no section."""
    if not suggestions:
        return []
    items: list[Card] = [text_block("Suggestions", weight="Bolder", size="Small")]
    for suggestion in suggestions:
        items.append(text_block(suggestion.text, spacing="Small"))
        items.append(
            {
                "type": "ActionSet",
                "spacing": "Small",
                "actions": [
                    {
                        "type": "Action.Submit",
                        "title": suggestion_button_title(suggestion),
                        "data": command_data(suggestion_request(suggestion)),
                    },
                    {"type": "Action.Submit", "title": NOT_NOW, "data": decline_suggestion_data(suggestion)},
                ],
            }
        )
    return [{"type": "Container", "separator": True, "spacing": "Medium", "items": items}]
