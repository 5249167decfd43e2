"""Answers and their sources (pure): record and document links, the "Sources" section under
cited text, and the answer card."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import quote

from bot.cards.blocks import (
    Card,
    adaptive_card,
    text_block,
    text_lines,
)

__all__ = ["answer_card", "document_link", "record_link", "record_url", "sources_block"]


def record_url(record_id: str, template: str | None) -> str | None:
    """The record's page in the CRM, from ``CRM_RECORD_URL_TEMPLATE`` (``{id}`` replaced), if set."""
    return template.replace("{id}", quote(record_id, safe="")) if template else None


def record_link(record_id: str, template: str | None) -> str:
    """A record id as Teams markdown: ``[id](url)`` with a URL template, else the bare id."""
    url = record_url(record_id, template)
    if not url:
        return record_id
    label = record_id.replace("[", "(").replace("]", ")")
    return f"[{label}]({url})"


def document_link(title: str, url: str | None) -> str:
    """A cited document as Teams markdown: ``[title](url)`` for a web link, else the title."""
    label = title.replace("[", "(").replace("]", ")")
    return f"[{label}]({url})" if url and url.startswith(("https://", "http://")) else label


def answer_card(
    answer: str,
    citations: list[str],
    *,
    record_url_template: str | None = None,
    documents: Mapping[str, tuple[str, str | None]] | None = None,
) -> Card:
    """An answer (Teams markdown) with a "Sources" section of the record ids it cites (pure).

    ``record_url_template`` (e.g. ``https://crm.example.com/records/{id}``) turns each
    cited id into a link. ``documents`` (cited chunk id → document title and link) shows
    a cited document by its title, linked to its source.
    """
    docs = documents or {}
    body: list[Card] = text_lines(answer) if answer.strip() else [text_block("(no answer)")]
    if citations:
        body.append(sources_block(citations, docs, record_url_template))
    fallback = answer + (f"\n\nSources: {', '.join(citations)}" if citations else "")
    return adaptive_card(body, fallback=fallback)


def sources_block(
    citations: Sequence[str], documents: Mapping[str, tuple[str, str | None]], record_url_template: str | None
) -> Card:
    """The "Sources" section under cited text: each record id (a link with a template), each
    document by its title; two chunks of one document are one source."""
    sources = dict.fromkeys(
        document_link(*documents[c]) if c in documents else record_link(c, record_url_template)
        for c in dict.fromkeys(citations)
    )
    return {
        "type": "Container",
        "separator": True,
        "spacing": "Medium",
        "items": [
            text_block("Sources", weight="Bolder", size="Small"),
            text_block(" · ".join(sources), size="Small"),
        ],
    }
