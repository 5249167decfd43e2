"""Citations: which record ids an answer cites, and which ids tool results contained (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage

from copilot.tools.crm_client import parse_result_text

CITATION = re.compile(r"\[([A-Za-z0-9][A-Za-z0-9_.:\-]{1,80})\]")
"""``[record-id]``: the citation form the system prompt asks for."""


def cited_ids(text: str) -> list[str]:
    """Record ids cited in ``text``, in order, without repeats."""
    seen: list[str] = []
    for match in CITATION.finditer(text):
        if match.group(1) not in seen:
            seen.append(match.group(1))
    return seen


GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
"""A GUID: the record id of Dataverse (and any CRM keyed by GUIDs), whatever its column is named."""


def _is_id_key(key: str) -> bool:
    """``id`` and ``account_id`` (the reference CRM); Dataverse's ``accountid`` and
    ``_parentaccountid_value`` hold GUIDs, which count wherever they appear."""
    return key == "id" or key.endswith("_id")


def _ids_in(value: Any, found: set[str]) -> None:
    if isinstance(value, dict):
        for key, child in value.items():
            if key == "error" and isinstance(child, dict):
                # A refusal ({"error": {"code", "message", "details"}}) echoes the ids it was
                # asked about: that shows no record, so an answer may not cite them from it.
                continue
            if isinstance(child, str) and (_is_id_key(key) or GUID.match(child)):
                found.add(child)
            elif isinstance(child, list) and key.endswith("_ids"):
                found.update(v for v in child if isinstance(v, str))
            else:
                _ids_in(child, found)
    elif isinstance(value, list):
        for child in value:
            _ids_in(child, found)


def ids_in_value(value: Any) -> set[str]:
    """Every record id in one parsed tool result (or a part of one)."""
    found: set[str] = set()
    _ids_in(value, found)
    return found


def message_text(message: BaseMessage) -> str:
    """The text of a message whose content may be a string or content blocks."""
    content = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "".join(parts)


def ids_in_tool_results(messages: Iterable[BaseMessage]) -> set[str]:
    """Every record id that appears in the tool results among ``messages``."""
    found: set[str] = set()
    for message in messages:
        if not isinstance(message, ToolMessage):
            continue
        _ids_in(parse_result_text(message_text(message)), found)
        artifact = getattr(message, "artifact", None)
        if isinstance(artifact, dict):
            _ids_in(artifact.get("structured_content"), found)
    return found


def current_run(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The messages since the rep's latest message (the run being answered)."""
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], HumanMessage):
            return list(messages[index + 1 :])
    return list(messages)


def strip_citations(text: str, ids: Iterable[str]) -> str:
    """``text`` without the ``[id]`` markers of ``ids``."""
    for ident in ids:
        text = text.replace(f" [{ident}]", "").replace(f"[{ident}]", "")
    return text


# --- the cited records, as the tool results describe them (what Teams shows on hover) -------

_SUMMARY_FIELDS: tuple[str, ...] = (
    "stage",
    "amount",
    "close_date",
    "title",
    "industry",
    "city",
    "type",
    "occurred_at",
)
"""Short facts worth a glance, in this order; never contact details (emails, phone numbers)."""

_LIST_KEYS = frozenset({"items", "results", "records", "data", "value"})
_VERBS = ("get_", "list_", "search_", "find_", "read_")


@dataclass(frozen=True)
class CitedRecord:
    """A cited record as this run's tool results describe it: its name, kind and a few facts."""

    id: str
    name: str
    kind: str | None = None
    """``account``, ``opportunity``, ... from the tool or the key it came under; None if unknown."""
    facts: tuple[str, ...] = ()
    """Short values (stage, amount, close date, title ...), as the record holds them."""
    url: str | None = None
    """Where the source can be opened, when its result gives a link (a document chunk's ``url``)."""


def _kind_of_tool(tool: str | None) -> str | None:
    """``list_opportunities`` → ``opportunity``, ``get_account`` → ``account``."""
    if not tool:
        return None
    noun = next((tool[len(v) :] for v in _VERBS if tool.startswith(v)), None)
    if not noun or "_" in noun:
        return None
    return _singular(noun)


def _singular(word: str) -> str:
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _facts(record: dict[str, Any]) -> tuple[str, ...]:
    facts: list[str] = []
    for key in _SUMMARY_FIELDS:
        value = record.get(key)
        if isinstance(value, bool) or value is None or value == "":
            continue
        if key == "amount" and isinstance(value, int | float):
            currency = record.get("currency")
            text = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
            facts.append(f"{currency} {text}" if isinstance(currency, str) else text)
        elif isinstance(value, str) and (key.endswith("_at") or key.endswith("date")):
            facts.append(value[:10])  # the day is what a rep reads; the time is noise here
        elif isinstance(value, str | int | float):
            facts.append(str(value)[:40])
    return tuple(facts)


def _own_id(record: dict[str, Any], wanted: set[str], kind: str | None) -> tuple[str | None, str | None]:
    """The record's own id if it is wanted (``id``, or Dataverse's ``<table>id``), with its kind."""
    ident = record.get("id")
    if isinstance(ident, str) and ident in wanted:
        return ident, kind
    for key, value in record.items():
        if (
            key.endswith("id")
            and not key.startswith("_")
            and key != "id"
            and isinstance(value, str)
            and value in wanted
        ):
            return value, key[: -len("id")] or kind
    return None, kind


def _collect(value: Any, kind: str | None, wanted: set[str], found: dict[str, CitedRecord]) -> None:
    if isinstance(value, list):
        for child in value:
            _collect(child, kind, wanted, found)
        return
    if not isinstance(value, dict):
        return
    ident, kind = _own_id(value, wanted, kind)
    if ident is not None:
        name = next(
            (value[k] for k in ("name", "fullname", "subject", "title") if isinstance(value.get(k), str)),
            None,
        )
        known = found.get(ident)
        # The fullest description wins: a record itself over a bare {id, name} reference.
        if name and (known is None or len(_facts(value)) > len(known.facts)):
            url = value.get("url") if isinstance(value.get("url"), str) else None
            found[ident] = CitedRecord(
                ident, name, kind or (known.kind if known else None), _facts(value), url=url
            )
    for key, child in value.items():
        if isinstance(child, dict | list):
            _collect(child, kind if key in _LIST_KEYS else _singular(key), wanted, found)


def cited_records(messages: Iterable[BaseMessage], ids: Sequence[str]) -> dict[str, CitedRecord]:
    """The records ``ids`` name, described from the tool results among ``messages`` (pure).

    Read from each result's text (what the model saw, PII already redacted); the kind comes
    from the key a record sits under (``"account": {...}``) or else from the tool's name
    (``list_opportunities`` → ``opportunity``). Ids no result describes are left out.
    """
    wanted = set(ids)
    found: dict[str, CitedRecord] = {}
    for message in messages:
        if isinstance(message, ToolMessage):
            _collect(parse_result_text(message_text(message)), _kind_of_tool(message.name), wanted, found)
    return {i: found[i] for i in ids if i in found}
