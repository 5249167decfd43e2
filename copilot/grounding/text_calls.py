"""Tool calls a model wrote into its message text, found and read (pure).

Small open models, and open models behind a server whose tool-call parser does not match
the model, put the call in the content instead of the protocol's ``tool_calls``. The
shapes seen in the field:

* bare JSON: ``{"name": "...", "arguments": {...}}`` (or ``"parameters"``, or OpenAI's
  ``{"type": "function", "function": {...}}``; ``arguments`` may be a JSON string);
* the same inside a fenced block (```` ```json ... ``` ````);
* Hermes / Qwen tags: ``<tool_call>{...}</tool_call>``, one or several;
* function markup: ``<function=NAME>{...}</function>``, ``<function name="NAME">...``, or
  a tag named after the tool, ``<NAME>{...}</NAME>``;
* a list of ``{"name", "parameters"}`` objects (Llama 3.x), optionally after Mistral's
  ``[TOOL_CALLS]``.

Any of them may follow a reasoning preamble ("Let me look that up." or ``<think>…</think>``).
:func:`find_text_calls` says whether a text holds such a call attempt and reads each call
it finds; a call whose name or arguments cannot be read is still reported (with the
reason), so that it can go back to the model as an error and never reach the rep.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_\-]*)[ \t]*\n?(.*?)(?:```|\Z)", re.S)
_TAGGED = re.compile(r"<(tool_call|function_call|tools?)>(.*?)(?:</\1>|\Z)", re.S | re.I)
_FUNCTION_EQ = re.compile(r"<function\s*=\s*([A-Za-z0-9_.\-]+)\s*>(.*?)(?:</function>|\Z)", re.S)
_FUNCTION_NAMED = re.compile(
    r"<function\s+name\s*=\s*[\"']([A-Za-z0-9_.\-]+)[\"']\s*>(.*?)(?:</function>|\Z)", re.S
)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S | re.I)
_MISTRAL = "[TOOL_CALLS]"
_ARGUMENT_KEYS = ("arguments", "parameters", "args", "input")


@dataclass(frozen=True)
class TextCall:
    """One call found in a message's text."""

    name: str | None
    """The tool it names; ``None`` when no name could be read."""
    arguments: dict[str, Any] | None
    """Its arguments as an object; ``None`` when they could not be read (see ``error``)."""
    error: str | None = None
    """Why the call cannot be used as written (unreadable JSON, no name, arguments not an object)."""


@dataclass(frozen=True)
class TextCalls:
    """The call attempts in a message's text, and the text around them."""

    calls: tuple[TextCall, ...]
    preamble: str
    """What the message said besides the calls (reasoning, "let me check"), stripped."""


def _decode(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"the call's JSON could not be read ({exc.msg} at character {exc.pos})"


def _call_from(value: Any) -> TextCall | None:
    """A call from one decoded JSON object; ``None`` if the object is not call-shaped."""
    if not isinstance(value, dict):
        return None
    function = value.get("function")
    if isinstance(function, dict) and "name" in function:
        value = function
    name = value.get("name", value.get("tool"))
    keys = [k for k in _ARGUMENT_KEYS if k in value]
    if name is None or not keys:
        return None
    if not isinstance(name, str) or not name.strip():
        return TextCall(None, None, "the call names no tool")
    arguments = value[keys[0]]
    if isinstance(arguments, str):
        arguments, error = _decode(arguments or "{}")
        if error is not None:
            return TextCall(name.strip(), None, error.replace("call's JSON", "call's arguments"))
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return TextCall(name.strip(), None, "the call's arguments are not a JSON object")
    return TextCall(name.strip(), arguments)


def _calls_in_json(text: str) -> list[TextCall] | None:
    """Calls in a JSON text (an object or a list of objects); ``None`` if it holds none."""
    value, error = _decode(text)
    if error is not None:
        return None
    items = value if isinstance(value, list) else [value]
    calls = [_call_from(item) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _looks_like_call_json(text: str) -> bool:
    """Unreadable JSON that was meant as a call: it opens like one and names a tool."""
    stripped = text.lstrip()
    return stripped[:1] in ("{", "[") and bool(re.search(r"[\"']name[\"']\s*:", stripped))


def _inner_calls(body: str, name: str | None = None) -> list[TextCall]:
    """The calls in one tagged or fenced body; with ``name``, the body is the arguments."""
    body = body.strip()
    if name is not None:
        if not body:
            return [TextCall(name, {})]
        value, error = _decode(body)
        if error is not None:
            return [TextCall(name, None, error.replace("call's JSON", "call's arguments"))]
        if isinstance(value, dict) and _call_from(value) is not None:
            return [c for c in [_call_from(value)] if c is not None]
        if not isinstance(value, dict):
            return [TextCall(name, None, "the call's arguments are not a JSON object")]
        return [TextCall(name, value)]
    calls = _calls_in_json(body)
    if calls is not None:
        return calls
    # Several objects one per line (some servers' Hermes output).
    lines = [line for line in body.splitlines() if line.strip()]
    if len(lines) > 1:
        per_line = [_calls_in_json(line) for line in lines]
        if all(p is not None for p in per_line):
            return [c for p in per_line if p for c in p]
    _, error = _decode(body)
    named = re.search(r"[\"']name[\"']\s*:\s*[\"']([A-Za-z0-9_.\-]+)[\"']", body)
    return [TextCall(named.group(1) if named else None, None, error or "the call could not be read")]


def find_text_calls(text: str, tool_names: Collection[str] = ()) -> TextCalls | None:
    """The tool-call attempts written in ``text``, or ``None`` when it holds none.

    ``tool_names`` are the tools bound in this run: a tag named after one of them
    (``<search_accounts>{...}</search_accounts>``) is a call; other tags are text.
    """
    if not text or not text.strip():
        return None
    rest = _THINK.sub(" ", text)
    calls: list[TextCall] = []
    spans: list[tuple[int, int]] = []

    def take(pattern: re.Pattern[str], read: Any) -> None:
        nonlocal rest
        for match in pattern.finditer(rest):
            found = read(match)
            if found:
                calls.extend(found)
                spans.append(match.span())
        for start, end in sorted(spans, reverse=True):
            rest = rest[:start] + " " + rest[end:]
        spans.clear()

    take(_TAGGED, lambda m: _inner_calls(m.group(2)))
    take(_FUNCTION_EQ, lambda m: _inner_calls(m.group(2), name=m.group(1)))
    take(_FUNCTION_NAMED, lambda m: _inner_calls(m.group(2), name=m.group(1)))
    if tool_names:
        named = "|".join(re.escape(n) for n in sorted(tool_names, key=len, reverse=True))
        take(
            re.compile(rf"<({named})>(.*?)(?:</\1>|\Z)", re.S), lambda m: _inner_calls(m.group(2), m.group(1))
        )

    def fenced(match: re.Match[str]) -> list[TextCall] | None:
        body = match.group(2)
        found = _calls_in_json(body.strip())
        if found is not None:
            return found
        if _looks_like_call_json(body):
            return _inner_calls(body)
        return None

    take(_FENCE, fenced)
    if _MISTRAL in rest:
        before, _, after = rest.partition(_MISTRAL)
        found = _calls_in_json(after.strip())
        calls.extend(found if found is not None else _inner_calls(after))
        rest = before
    calls.extend(_bare_json_calls(rest, spans))
    for start, end in sorted(spans, reverse=True):
        rest = rest[:start] + " " + rest[end:]
    if not calls:
        return None
    return TextCalls(tuple(calls), " ".join(rest.split()))


def _bare_json_calls(text: str, spans: list[tuple[int, int]]) -> list[TextCall]:
    """Call-shaped JSON objects or lists standing in plain text (their spans go in ``spans``)."""
    decoder = json.JSONDecoder()
    calls: list[TextCall] = []
    index = 0
    while index < len(text):
        start = min((i for i in (text.find("{", index), text.find("[", index)) if i >= 0), default=-1)
        if start < 0:
            break
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            if _looks_like_call_json(text[start:]) and not calls:
                # A call attempt whose JSON is broken: it runs to the end of the message.
                calls.extend(_inner_calls(text[start:]))
                spans.append((start, len(text)))
                break
            index = start + 1
            continue
        items = value if isinstance(value, list) else [value]
        found = [_call_from(item) for item in items]
        if found and all(f is not None for f in found):
            calls.extend(f for f in found if f is not None)
            spans.append((start, end))
        index = end
    return calls
