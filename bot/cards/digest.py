"""The daily digest card (pure), its "Not useful" and "Snooze" feedback, and their confirmation."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Literal, assert_never

from bot.cards.blocks import (
    Card,
    adaptive_card,
    card_header,
    one_line,
    text_block,
)
from bot.cards.help import (
    notice_card,
)
from bot.cards.sources import (
    sources_block,
)
from bot.cards.suggestions import (
    suggestion_block,
)
from copilot.briefs.types import (
    DIGEST_SECTIONS,
    DIGEST_TITLES,
    Digest,
)

__all__ = [
    "DIGEST_ELEMENT_PREFIX",
    "DIGEST_FEEDBACK_KIND",
    "DIGEST_FEEDBACK_KINDS",
    "DIGEST_FEEDBACK_VERSION",
    "SNOOZE_CHOICE_LENGTH",
    "SNOOZE_INPUT_ID",
    "DigestFeedbackKind",
    "digest_card",
    "digest_feedback_card",
    "digest_feedback_data",
]

DIGEST_ELEMENT_PREFIX = "digest-"
"""Prefix of the element ``id`` on a digest card's header (the rep's local day follows)."""
DIGEST_FEEDBACK_KIND = "digest_feedback"
"""``data.copilot`` of a digest card's "Not useful" and "Snooze" buttons."""
DIGEST_FEEDBACK_VERSION = 1
DigestFeedbackKind = Literal["not_useful", "snooze"]
DIGEST_FEEDBACK_KINDS: tuple[DigestFeedbackKind, ...] = ("not_useful", "snooze")
SNOOZE_INPUT_ID = "snooze.records"
"""The Snooze panel's ChoiceSet: the records (comma-separated, as Teams sends a multi-select)."""
SNOOZE_CHOICE_LENGTH = 60


def digest_feedback_data(day: dt.date, kind: DigestFeedbackKind) -> dict[str, Any]:
    """The ``data`` of a digest card's feedback button."""
    return {
        "copilot": DIGEST_FEEDBACK_KIND,
        "v": DIGEST_FEEDBACK_VERSION,
        "kind": kind,
        "day": day.isoformat(),
    }


def digest_card(digest: Digest, *, record_url_template: str | None = None) -> Card:
    """The daily digest (pure): its sections with their cited lines, the sources, and feedback.

    Every line keeps its ``[id]`` citations and the "Sources" section lists every cited id.
    Stacked TextBlocks that wrap (no columns), so it reads at phone width. **Not useful**
    rates the whole digest; **Snooze** opens a panel to pick lines whose record stays out of
    the rep's digests for a week.
    """
    body: list[Card] = [
        card_header(
            "Daily digest",
            f"{digest.day:%A, %B} {digest.day.day}",
            f"Your day ({digest.time_zone})",
            element_id=f"{DIGEST_ELEMENT_PREFIX}{digest.day.isoformat()}",
        )
    ]
    for section in DIGEST_SECTIONS:
        lines = [i for i in digest.items if i.section == section]
        items: list[Card] = [text_block(DIGEST_TITLES[section], weight="Bolder", size="Small")]
        if not lines:
            items.append(text_block("None.", isSubtle=True, spacing="None"))
        items.extend(text_block(f"- {line.text}", spacing="None") for line in lines)
        body.append({"type": "Container", "separator": True, "spacing": "Medium", "items": items})
    notes = []
    if digest.meetings_without_customer:
        n = digest.meetings_without_customer
        notes.append(f"{n} other meeting{'s' if n != 1 else ''} with no CRM contact you can see.")
    if digest.snoozed:
        notes.append(f"{digest.snoozed} snoozed line{'s' if digest.snoozed != 1 else ''} left out.")
    if notes:
        body.append(text_block(" ".join(notes), isSubtle=True, spacing="Medium"))
    body.extend(suggestion_block(digest.suggestions))
    if digest.citations:
        body.append(sources_block(digest.citations, {}, record_url_template))
    actions: list[Card] = [
        {
            "type": "Action.Submit",
            "title": "Not useful",
            "data": digest_feedback_data(digest.day, "not_useful"),
        }
    ]
    choices: dict[str, str] = {}
    for line in digest.items:  # one choice per record, titled by its first line
        if line.cited:
            choices.setdefault(line.cited[0], one_line(line.text, SNOOZE_CHOICE_LENGTH))
    if choices:
        panel = adaptive_card(
            [
                {
                    "type": "Input.ChoiceSet",
                    "id": SNOOZE_INPUT_ID,
                    "label": "Leave these out of your digests for 7 days:",
                    "isMultiSelect": True,
                    "style": "expanded",
                    "isRequired": True,
                    "errorMessage": "Pick at least one line to snooze.",
                    "choices": [{"title": title, "value": record} for record, title in choices.items()],
                },
            ],
            [
                {
                    "type": "Action.Submit",
                    "title": "Snooze",
                    "data": digest_feedback_data(digest.day, "snooze"),
                }
            ],
        )
        actions.append({"type": "Action.ShowCard", "title": "Snooze…", "card": panel})
    return adaptive_card(body, actions, fallback=digest.text)


def digest_feedback_card(kind: DigestFeedbackKind, records: Sequence[str], until: dt.date | None) -> Card:
    """The confirmation of a digest's "Not useful" or "Snooze" (pure)."""
    match kind:
        case "not_useful":
            return notice_card("Thanks for telling me", "Noted: this digest was not useful to you.")
        case "snooze":
            what = ", ".join(records)
            back = f" until {until:%a %Y-%m-%d}" if until else ""
            return notice_card("Snoozed", f"Left out of your digests{back}: {what}.")
        case _:
            assert_never(kind)
