"""What a reply must never be, recognised by its structure (pure): internal text, degenerate text,
and a "nothing found" no read earned.

These hold for every model, so none of them is a list of a model's phrases:

* **internal text** is text copied from what only the model was meant to see (this thread's
  tool errors, the system prompt, the gate's own notes), a bound tool's or argument's
  identifier the rep never typed, or the machine formats of errors and schemas (a Python
  traceback, a pydantic validation report, a JSON schema);
* **degenerate text** is an empty or one-word reply, a reply cut at the token limit, the same
  sentence again and again, or markup and template residue (``<record name=…>``,
  ``[<record id>]``, ``{placeholder}``);
* **a question** is a message whose sentence ends with a question mark or opens with an
  interrogative word (grammar, not a model's wording).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

InternalKind = Literal["copied", "identifier", "machine_format"]
DegenerateKind = Literal["empty", "cut_off", "repetition", "markup"]

_WORD = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?")
SHINGLE = 6
"""Words in a row that make a copy: a reply may share a few words with an error or the system
prompt ("I found no …"), never six in a row."""

_IDENTIFIER = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
"""snake_case: the shape of a tool's or argument's name, never of a word a rep reads."""

_MACHINE_FORMATS = (
    re.compile(r"Traceback \(most recent call last\)"),
    re.compile(r'File "[^"]+", line \d+'),
    re.compile(r"\bvalidation errors? for \w+", re.IGNORECASE),
    re.compile(r"\[type=[a-z_]+,"),
    re.compile(r"\binput_value="),
    re.compile(r"errors\.pydantic\.dev"),
    re.compile(r'"(?:type|properties|required|additionalProperties|\$schema|anyOf)"\s*:'),
    re.compile(r"\b(?:[A-Z][a-z]+)+(?:Error|Exception)\b:"),
)
"""Formats no answer to a rep has: tracebacks, pydantic reports, JSON schema keys, ``FooError:``."""

_TAG = re.compile(r"</?[A-Za-z][\w:-]*(?:\s[^<>]*)?/?>")
_PLACEHOLDER = re.compile(
    r"\[\s*<[^<>\]]+>\s*\]|<record [a-z ]+>|\{\{?\s*[a-z_][a-z0-9_ ]*\}\}?|\[(?:record )?id\]"
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")

REPEATS = 3
"""The same sentence this many times (or near enough) is a loop, not an answer."""
NEAR = 0.75
"""Word-set overlap (Jaccard) at which two sentences count as the same sentence."""


def words(text: str) -> list[str]:
    """Lower-case words of ``text`` (letters and digits; an apostrophe kept inside a word)."""
    return _WORD.findall(text.lower())


def _shingles(tokens: Sequence[str], n: int = SHINGLE) -> set[tuple[str, ...]]:
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


@dataclass(frozen=True)
class Internal:
    kind: InternalKind
    evidence: str


def internal_text(
    reply: str, *, sources: Iterable[str], identifiers: Iterable[str], question: str
) -> Internal | None:
    """Why ``reply`` shows internal text (``None``: it does not).

    ``sources`` are the texts only the model was meant to see (tool errors, the system prompt,
    the gate's notes); ``identifiers`` the bound tools' names and argument names; ``question``
    the rep's own message (an identifier the rep typed may be repeated)."""
    for pattern in _MACHINE_FORMATS:
        found = pattern.search(reply)
        if found:
            return Internal("machine_format", found.group(0))
    typed = {m.group(0) for m in _IDENTIFIER.finditer(question.lower())}
    known = {i.lower() for i in identifiers if "_" in i}
    for match in _IDENTIFIER.finditer(reply.lower()):
        if match.group(0) in known and match.group(0) not in typed:
            return Internal("identifier", match.group(0))
    shown = _shingles(words(reply))
    if shown:
        asked = _shingles(words(question))
        for source in sources:
            common = (shown & _shingles(words(source))) - asked
            if common:
                return Internal("copied", " ".join(next(iter(common))))
    return None


@dataclass(frozen=True)
class Degenerate:
    kind: DegenerateKind
    evidence: str


def degenerate_text(
    reply: str, *, finish_reason: str | None = None, answers_reads: bool = True
) -> Degenerate | None:
    """Why ``reply`` is not a usable answer however true its words (``None``: it is usable).

    ``answers_reads``: the reply answers what reads returned, so one word cannot be the answer
    (after a write's outcome, "Done." is enough: the card shows what was written)."""
    if finish_reason == "length":
        return Degenerate("cut_off", "the reply reached the model's token limit")
    residue = _TAG.search(reply) or _PLACEHOLDER.search(reply)
    if residue:
        return Degenerate("markup", residue.group(0))
    bare = re.sub(r"\[[^\]]*\]", " ", reply)
    if answers_reads and len(words(bare)) <= 1 and len(words(reply)) <= 1:
        return Degenerate("empty", reply.strip())
    looped = _repeated_sentence(reply)
    if looped is not None:
        return Degenerate("repetition", looped)
    return None


def _repeated_sentence(reply: str) -> str | None:
    """A sentence (of 4+ words) that the reply says :data:`REPEATS` times or more: word for word,
    or nearly so when it holds no number and no citation (a list of deals repeats its shape,
    never its ids and figures)."""
    sentences = [s for s in (p.strip() for p in _SENTENCE.split(reply)) if len(words(s)) >= 4]
    keys = [tuple(words(s)) for s in sentences]
    for i, first in enumerate(keys):
        plain = not re.search(r"\d|\[", sentences[i])
        alike = 0
        for j in range(i, len(keys)):
            other = keys[j]
            if other == first:
                alike += 1
            elif plain and not re.search(r"\d|\[", sentences[j]):
                a, b = set(first), set(other)
                alike += len(a & b) / len(a | b) >= NEAR
        if alike >= REPEATS:
            return sentences[i]
    return None


_INTERROGATIVE = re.compile(
    r"^(?i:(?:and\s+|so\s+|also\s+|ok(?:ay)?\s*,?\s+)?(?:what|what's|whats|which|who|who's|whom|whose|when|"
    r"where|why|how|how's|any|anything|show|list|tell)\b)"
    r"|^(?i:is|are|was|were|do|does|did|has|have|had|can|could|will|would|should)\s+"
    r"(?:(?i:i|we|you|they|he|she|it|there|my|our|the|any|a|an|this|that|these|those)\b|[A-Z])"
)
"""An opening that asks: an interrogative word, or an auxiliary verb before its subject (a
pronoun, an article or a name: "is Acme …", "do I have …"; not "do things")."""


def reads_as_question(message: str) -> bool:
    """Whether the rep's message reads as a question: a sentence of it ends in "?", or it opens
    with an interrogative word (or asks to be shown something)."""
    text = message.strip()
    if not text:
        return False
    if re.search(r"\?\s*(?:$|\n)", text) or "?" in text.splitlines()[0]:
        return True
    return _INTERROGATIVE.match(text) is not None


def identifiers_of(tools: Mapping[str, Any]) -> set[str]:
    """The bound tools' names and their arguments' names (what a reply must not show)."""
    found = set(tools)
    for tool in tools.values():
        schema: Any = getattr(tool, "args", None)
        if schema is None and isinstance(tool, Mapping):
            function = tool.get("function", tool)
            schema = (
                (function.get("parameters") or {}).get("properties")
                if isinstance(function, Mapping)
                else None
            )
        if isinstance(schema, Mapping):
            found.update(str(k) for k in schema)
    return found


_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "at",
        "in",
        "on",
        "for",
        "to",
        "from",
        "with",
        "by",
        "about",
        "and",
        "or",
        "is",
        "are",
        "was",
        "were",
        "be",
        "do",
        "does",
        "did",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "there",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "any",
        "anything",
        "all",
        "some",
        "show",
        "list",
        "tell",
        "give",
        "find",
        "get",
        "have",
        "has",
        "had",
        "can",
        "could",
        "would",
        "should",
        "will",
        "please",
        "latest",
        "last",
        "next",
        "recent",
        "current",
        "open",
        "new",
    ]
)


def content_words(text: str) -> set[str]:
    """The words of ``text`` that can name a thing (3+ letters, not a function word)."""
    return {w for w in words(text) if len(w) >= 3 and w not in _STOP}


_CAPITALISED = re.compile(r"\b[A-Z][A-Za-z0-9'&-]{2,}")


def capitalised_words(question: str) -> set[str]:
    """The capitalised content words of the rep's message after its first character (names, as
    a rep types them: "Globex", "IT Director"), lower-cased."""
    return {w.lower() for w in _CAPITALISED.findall(question.strip()[1:])} & content_words(question)


def argument_words(args: Mapping[str, Any]) -> set[str]:
    """The words of a call's argument values (strings, and strings in lists), split at any
    non-letter: ``acc-globex`` gives ``acc`` and ``globex``; a SQL ``LIKE '%Globex%'`` gives
    ``globex``."""
    found: set[str] = set()

    def visit(value: Any) -> None:
        if isinstance(value, str):
            found.update(w for w in re.findall(r"[a-z0-9]+", value.lower()) if len(w) >= 3)
        elif isinstance(value, Mapping):
            for child in value.values():
                visit(child)
        elif isinstance(value, list | tuple):
            for child in value:
                visit(child)

    visit(args)
    return found
