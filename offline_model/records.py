"""Record ids as the offline model knows them: the ``id`` values tool results returned.

Nothing here knows what a CRM's ids look like. An id is whatever a tool result called
``id`` (or ``<kind>_id`` / ``<kind>_ids``), and its kind comes from where it appeared:
the role of the tool that returned it, or the key it sat under (``"account": {"id": …}``).
A token the rep typed that no result has returned yet is only a *candidate*, checked by
reading it (:func:`id_candidates`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from offline_model.roles import Kind, kind_of_key
from offline_model.text import STOPWORDS, Span

_TOKEN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]*")
_GUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
_SEPARATED_RE = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)+")
_OPAQUE_RE = re.compile(r"(?=.*\d.*\d.*\d)(?=.*[A-Za-z].*[A-Za-z].*[A-Za-z])[A-Za-z0-9]{15,40}")
# A bracketed token, as answers cite records; an all-capitals one is a placeholder such as
# the PII redaction's [REDACTED_EMAIL], not a citation.
_CITATION_RE = re.compile(r"\s?\[([A-Za-z0-9][A-Za-z0-9_.:\-]{1,80})\]")
_PLACEHOLDER_RE = re.compile(r"[A-Z][A-Z_]*")


@dataclass
class RecordIndex:
    """Every record id seen in tool results, with its kind when it is known."""

    kinds: dict[str, Kind | None] = field(default_factory=dict)
    """Lower-cased id → kind."""
    spelled: dict[str, str] = field(default_factory=dict)
    """Lower-cased id → the id as the tool returned it."""
    parents: dict[str, str] = field(default_factory=dict)
    """Lower-cased id of a record → the id of the account it belongs to (where a result said)."""

    def add(self, record_id: str, kind: Kind | None) -> None:
        """Remember an id; a known kind is never replaced by an unknown one."""
        key = record_id.lower()
        if not key:
            return
        self.spelled.setdefault(key, record_id)
        if self.kinds.get(key) is None:
            self.kinds[key] = kind

    def add_result(self, data: Any, kind: Kind | None) -> None:
        """Every id in one tool result; ``kind`` is what the tool's top-level records are."""
        _walk(data, kind, self)

    def account_of(self, record_id: str) -> str | None:
        """The account a seen record (a deal, a contact) belongs to, if a result said."""
        return self.parents.get(record_id.lower())

    def kind(self, record_id: str) -> Kind | None:
        """The kind of a seen id (``None`` if unseen or unknown)."""
        return self.kinds.get(record_id.lower())

    def __contains__(self, record_id: object) -> bool:
        return isinstance(record_id, str) and record_id.lower() in self.kinds

    def ids(self) -> set[str]:
        """Every seen id, as spelled by the tools."""
        return set(self.spelled.values())


def _walk(node: Any, kind: Kind | None, index: RecordIndex) -> None:
    if isinstance(node, dict):
        own = node.get("id")
        if isinstance(own, str):
            index.add(own, kind)
            account = node.get("account")
            parent = account.get("id") if isinstance(account, dict) else node.get("account_id")
            if isinstance(parent, str) and parent and kind != "account":
                index.parents.setdefault(own.lower(), parent)
        for key, child in node.items():
            # Only a reference or a nested record can hold an id: a key's kind is looked up
            # for those alone (most values of a result are plain fields).
            if key == "id" or not isinstance(child, str | list | dict):
                continue
            if isinstance(child, str):
                if key.endswith("_id"):
                    index.add(child, kind_of_key(key))
            elif isinstance(child, list) and key.endswith("_ids"):
                key_kind = kind_of_key(key)
                for value in child:
                    if isinstance(value, str):
                        index.add(value, key_kind)
            elif key == "items":
                _walk(child, kind, index)  # a list result: its items are the tool's records
            else:
                _walk(child, kind_of_key(key), index)
    elif isinstance(node, list):
        for child in node:
            _walk(child, kind, index)


@dataclass(frozen=True)
class TypedId:
    """A record id the rep wrote, found in the text."""

    id: str
    kind: Kind | None
    span: Span


def typed_ids(text: str, index: RecordIndex) -> list[TypedId]:
    """Ids the rep wrote that tool results have returned, in order (spelled as the tools spell them)."""
    found: list[TypedId] = []
    for m in _TOKEN_RE.finditer(text):
        token = m.group(0).rstrip(".:-_")
        key = token.lower()
        if key in index.kinds and all(f.id.lower() != key for f in found):
            found.append(
                TypedId(index.spelled[key], index.kinds[key], Span(token, m.start(), m.start() + len(token)))
            )
    return found


def looks_like_id(token: str) -> bool:
    """Whether a word the rep typed could be a record id rather than a word.

    GUIDs, long opaque codes with letters and digits, and lower-case words joined by
    hyphens or underscores that are not ordinary compounds ("follow-up", "add-on"):
    ``x-0042``, ``ab-cd-ef``, ``west-ridge``. A false positive costs one read that finds
    nothing, after which the word is taken as a word.
    """
    if _GUID_RE.fullmatch(token) or _OPAQUE_RE.fullmatch(token):
        return True
    if not _SEPARATED_RE.fullmatch(token) or token in STOPWORDS:
        return False
    parts = re.split(r"[-_]", token)
    return any(ch.isdigit() for ch in token) or len(parts) > 2 or all(len(p) >= 3 for p in parts)


def id_candidates(text: str, index: RecordIndex, *, ruled_out: Iterable[str] = ()) -> list[Span]:
    """Tokens in ``text`` that may be ids no tool has returned yet (and were not already checked)."""
    excluded = {r.lower() for r in ruled_out}
    found: list[Span] = []
    for m in _TOKEN_RE.finditer(text):
        token = m.group(0).rstrip(".:-_")
        if token.lower() in index.kinds or token.lower() in excluded or not looks_like_id(token):
            continue
        if all(str(s.value).lower() != token.lower() for s in found):
            found.append(Span(token, m.start(), m.start() + len(token)))
    return found


def cited(text: str) -> list[str]:
    """The ids cited as ``[id]`` in ``text``, in order (placeholders excluded)."""
    ids: list[str] = []
    for m in _CITATION_RE.finditer(text):
        value = m.group(1)
        if not _PLACEHOLDER_RE.fullmatch(value) and value not in ids:
            ids.append(value)
    return ids


def drop_unseen_citations(answer: str, seen: set[str]) -> str:
    """Remove ``[id]`` citations of ids no tool result contained (a last line of defence)."""
    seen_lower = {s.lower() for s in seen}

    def keep(m: re.Match[str]) -> str:
        value = m.group(1)
        return m.group(0) if _PLACEHOLDER_RE.fullmatch(value) or value.lower() in seen_lower else ""

    return _CITATION_RE.sub(keep, answer)
