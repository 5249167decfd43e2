"""Citations: which record ids an answer cites, and which ids tool results contained (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
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


def _ids_in(value: Any, found: set[str]) -> None:
    if isinstance(value, dict):
        for key, child in value.items():
            if isinstance(child, str) and (key == "id" or key.endswith("_id")):
                found.add(child)
            elif isinstance(child, list) and key.endswith("_ids"):
                found.update(v for v in child if isinstance(v, str))
            else:
                _ids_in(child, found)
    elif isinstance(value, list):
        for child in value:
            _ids_in(child, found)


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
