"""The meeting prep brief card (pure) and what its buttons ask."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from bot.cards.blocks import (
    Card,
    adaptive_card,
    card_header,
    command_data,
    text_block,
)
from bot.cards.sources import (
    sources_block,
)
from bot.cards.suggestions import (
    suggestion_block,
)
from bot.dates import DEFAULT_LOCALE, format_when
from copilot.briefs.schedule import resolve_zone
from copilot.briefs.types import (
    SECTION_TITLES,
    SECTIONS,
    Brief,
)

__all__ = ["BRIEF_ELEMENT_PREFIX", "brief_card", "brief_follow_up_request", "brief_log_request"]

BRIEF_ELEMENT_PREFIX = "brief-"
"""Prefix of the element ``id`` on a brief card's header (the meeting id follows)."""


def brief_log_request(account: str, subject: str) -> str:
    """What **Log this meeting** sends, as if the rep typed it (a proposal → the approval card)."""
    return f"log a meeting with {account} — {subject}"


def brief_follow_up_request(account: str, subject: str) -> str:
    """What **Draft follow-up** sends, as if the rep typed it (a draft proposal → its card)."""
    return f"draft a follow-up email to {account} about {subject}"


def brief_card(
    brief: Brief,
    *,
    now: dt.datetime,
    locale: str | None = DEFAULT_LOCALE,
    record_url_template: str | None = None,
    documents: Mapping[str, tuple[str, str | None]] | None = None,
) -> Card:
    """A meeting prep brief (pure): per account its cited facts by section, then the sources.

    Every fact keeps its ``[id]`` citations in its text, as answers do, and the "Sources"
    section lists every cited id (a link with ``record_url_template``, a document by its title
    with ``documents``). The buttons send chat requests, so logging the meeting, drafting
    the follow-up and each suggested change go through the normal proposal → approval card
    path; a suggestion's "Not now" declines it (:func:`suggestion_block`). "Log this meeting"
    is offered only once the meeting has started (at ``now``): nothing happened before.
    """
    docs = documents or {}
    when = format_when(brief.start, locale, resolve_zone(brief.time_zone))
    subject = brief.subject or "(no subject)"
    body: list[Card] = [
        card_header(
            "Meeting prep",
            subject,
            f"{when}{' · online' if brief.is_online else ''}",
            element_id=f"{BRIEF_ELEMENT_PREFIX}{brief.meeting_id}",
        )
    ]
    for account in brief.accounts:
        items: list[Card] = [text_block(account.name or account.account_id, weight="Bolder", size="Medium")]
        for section in SECTIONS:
            facts = [i for i in account.items if i.section == section]
            items.append(text_block(SECTION_TITLES[section], weight="Bolder", size="Small", spacing="Medium"))
            if not facts:
                items.append(text_block("None on record.", isSubtle=True, spacing="None"))
            items.extend(text_block(f"- {f.text}", spacing="None") for f in facts)
        body.append({"type": "Container", "separator": True, "spacing": "Medium", "items": items})
    if brief.other_external_attendees:
        n = brief.other_external_attendees
        body.append(
            text_block(
                f"{n} other external attendee{'s' if n != 1 else ''} (no CRM contact you can see).",
                isSubtle=True,
                spacing="Medium",
            )
        )
    body.extend(suggestion_block(brief.suggestions))
    if brief.citations:
        body.append(sources_block(brief.citations, docs, record_url_template))
    actions: list[Card] = []
    if brief.accounts:
        first = brief.accounts[0].name or brief.accounts[0].account_id
        if now >= brief.start:
            actions.append(
                {
                    "type": "Action.Submit",
                    "title": "Log this meeting",
                    "data": command_data(brief_log_request(first, subject)),
                }
            )
        actions.append(
            {
                "type": "Action.Submit",
                "title": "Draft follow-up",
                "data": command_data(brief_follow_up_request(first, subject)),
            }
        )
    return adaptive_card(body, actions, fallback=brief.text)
