"""Teams' AI message features on an answer (pure): the AI label, citations, feedback buttons.

The formats are Teams' own ("Enhance AI-generated bot messages", Microsoft Teams platform
docs; the same shapes as the Microsoft 365 Agents SDK's ``AIEntity`` / ``ClientCitation``):

* one root entity ``{"type": "https://schema.org/Message", "@type": "Message",
  "@context": "https://schema.org", "additionalType": ["AIGeneratedContent"]}`` gives the
  "AI generated" label (more than one root message entity is refused with 400);
* its ``citation`` list holds one ``{"@type": "Claim", "position": n, "appearance":
  {"@type": "DigitalDocument", "name", "abstract", "url"?}}`` per ``[n]`` marker in the
  text: the record's name (at most 80 characters) and its kind and a few facts (at most 160)
  on hover, a link when ``CRM_RECORD_URL_TEMPLATE`` is set; at most 20 per message;
* ``channelData.feedbackLoopEnabled: true`` shows 👍 / 👎 under the message; the rep's
  choice comes back as a ``message/submitAction`` invoke (``bot.feedback``).

Where Teams cannot show citation entities (:func:`answer_style`) the answer stays an
Adaptive Card with a Sources list (``bot.cards.answer_card``), still labelled and with
feedback buttons.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, assert_never

from bot.cards.sources import record_url
from bot.settings import AnswerSources
from copilot.briefs.schedule import iana_name
from copilot.citations import CITATION, CitedRecord

MESSAGE_ENTITY_TYPE = "https://schema.org/Message"
AI_GENERATED = "AIGeneratedContent"
MAX_CITATIONS = 20
"""Teams shows at most 20 citations and refuses a message with more (400)."""
MAX_NAME = 80
MAX_ABSTRACT = 160
FEEDBACK_CHANNEL_DATA: dict[str, Any] = {"feedbackLoopEnabled": True}
"""``channelData`` that shows the feedback buttons (Teams' default feedback form)."""

MOBILE_PLATFORMS = frozenset({"ios", "android"})
"""``clientInfo.platform`` values of Teams mobile, which does not show citation pop-ups."""

AnswerStyle = Literal["entities", "card"]


def answer_style(
    setting: AnswerSources,
    *,
    channel_id: str | None,
    platform: str | None,
    dev_mode: bool,
    cited: int,
) -> AnswerStyle:
    """Whether an answer's sources go into Teams citation entities or a card's Sources list.

    ``auto``: entities for a Teams client that shows them: the ``msteams`` channel, a deployed
    bot (local development mode serves the Agents Playground, which shows the label and the
    feedback buttons but not citations on cards, caps citations at 10 and names no message in
    its feedback), a desktop or web client (not ``iOS`` / ``Android``), and at most
    :data:`MAX_CITATIONS` cited records. Else, and with ``card``, the card.
    """
    if setting == "entities":
        return "entities" if cited <= MAX_CITATIONS else "card"
    if setting == "card":
        return "card"
    if setting == "auto":
        capable = (
            channel_id == "msteams"
            and not dev_mode
            and (platform or "").lower() not in MOBILE_PLATFORMS
            and cited <= MAX_CITATIONS
        )
        return "entities" if capable else "card"
    assert_never(setting)


def client_platform(entities: list[Any] | None) -> str | None:
    """``clientInfo.platform`` of an inbound activity's entities (``Web``, ``Windows``, ``iOS`` …)."""
    for entity in entities or []:
        if isinstance(entity, dict):
            data = entity
        else:  # botbuilder keeps an entity's other properties in additional_properties
            data = {**(getattr(entity, "additional_properties", None) or {}), "type": entity.type}
        if data.get("type") == "clientInfo":
            platform = data.get("platform")
            return str(platform) if platform else None
    return None


def client_time_zone(entities: list[Any] | None, local_timezone: str | None = None) -> str | None:
    """The rep's IANA time zone as Teams reports it: the ``clientInfo`` entity's ``timezone``,
    else the activity's ``localTimezone``; ``None`` if neither names a known zone."""
    for entity in entities or []:
        if isinstance(entity, dict):
            data = entity
        else:
            data = {**(getattr(entity, "additional_properties", None) or {}), "type": entity.type}
        if data.get("type") == "clientInfo" and (zone := iana_name(data.get("timezone"))):
            return zone
    return iana_name(local_timezone)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def abstract(record: CitedRecord | None) -> str:
    """What the hover says about a record: its kind and a few facts, at most 160 characters."""
    if record is None:
        return "CRM record"
    kind = (record.kind or "CRM record").replace("_", " ")
    parts = [kind[:1].upper() + kind[1:], *record.facts]
    return _clip(" · ".join(parts), MAX_ABSTRACT)


def citation(
    position: int, record_id: str, record: CitedRecord | None, template: str | None
) -> dict[str, Any]:
    """One ``Claim`` for the ``[position]`` marker: the record's name, kind and facts, and link."""
    appearance: dict[str, Any] = {
        "@type": "DigitalDocument",
        "name": _clip(record.name if record is not None else record_id, MAX_NAME),
        "abstract": abstract(record),
    }
    url = record_url(record_id, template)
    if url:
        appearance["url"] = url
    return {"@type": "Claim", "position": position, "appearance": appearance}


def message_entity(citations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The one root message entity: the AI label, and the citations if any."""
    entity: dict[str, Any] = {
        "type": MESSAGE_ENTITY_TYPE,
        "@type": "Message",
        "@context": "https://schema.org",
        "additionalType": [AI_GENERATED],
    }
    if citations:
        entity["citation"] = citations
    return entity


@dataclass(frozen=True)
class NumberedAnswer:
    """An answer whose ``[record-id]`` citations became Teams' numbered ``[n]`` markers."""

    text: str
    citations: list[dict[str, Any]]


def number_citations(
    answer: str, cited: list[str], sources: dict[str, CitedRecord], template: str | None
) -> NumberedAnswer:
    """Replace each cited ``[record-id]`` with ``[n]`` (numbered by first mention) (pure).

    Only the verified citations (``cited``) are numbered; anything else in brackets stays as
    written. Each number gets its ``Claim`` (:func:`citation`).
    """
    positions: dict[str, int] = {}
    wanted = set(cited)

    def marker(match: re.Match[str]) -> str:
        record_id = match.group(1)
        if record_id not in wanted:
            return match.group(0)
        position = positions.setdefault(record_id, len(positions) + 1)
        return f"[{position}]"

    text = CITATION.sub(marker, answer)
    claims = [citation(n, rid, sources.get(rid), template) for rid, n in positions.items()]
    return NumberedAnswer(text, claims)
