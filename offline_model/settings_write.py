"""A write tool that sets settings, asked for by naming one of its settings and a value for it.

A rep changes a setting the way they would flip a switch: "brief on", "digest off", "brief 15
minutes before", "send my digest at 8am". Like a real model reading a tool list, the offline
model recognises the tool from what its schema says of itself: the message uses every content
word of one argument's title ("Digest at") and gives a value of that argument's type next to
it: on or off for a yes/no, a number for a whole number, a clock time for a
time of day. Only such arguments are filled; the approval card shows them, and the rep can
correct any before anything changes. Nothing here knows a tool or a setting by name.
"""

from __future__ import annotations

import re
from typing import Any

from offline_model.catalog import FUNCTION_WORDS, BoundTool, words
from offline_model.context import PlanContext
from offline_model.questions import is_question
from offline_model.structured import schema_type

_STEM = 5
_ON = frozenset({"on", "enable", "enabled", "start", "resume"})
_OFF = frozenset({"off", "disable", "disabled", "stop", "pause"})
_TRAILING = frozenset({"please", "now", "again", "for", "me", "thanks"})
# "8:00", "5:30 pm", "8am", or a bare hour after "at" ("digest at 7"); a wrong one ("8:75")
# too, so that the tool's own check says why it is not a time.
_CLOCK = re.compile(
    r"\b(\d{1,2}[:.]\d{1,2}\s*(?:[ap]\.?m\.?)?|\d{1,2}\s*[ap]\.?m\.?|(?<=\bat )\d{1,2}(?![\d:.]))(?![\w:])",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"(?<![\d:.])\b(\d{1,5})\b(?![\d:.]|\s*[ap]\.?m\b)", re.IGNORECASE)


def _stems(text: str) -> set[str]:
    return {w[:_STEM] for w in words(text) if w not in FUNCTION_WORDS}


def _switch(tokens: list[str], titled: set[str]) -> bool | None:
    """On or off, as ``tokens`` switch the setting titled ``titled`` (stems): a verb ("stop",
    "enable") anywhere; "on"/"off" right after the setting's word or "turn"/"switch", or last.
    "brief me on the renewal" is about the renewal: there "on" switches nothing. None if neither, or both."""
    found: set[bool] = set()
    for i, token in enumerate(tokens):
        if token not in _ON and token not in _OFF:
            continue
        if token not in ("on", "off"):
            found.add(token in _ON)
            continue
        before = tokens[i - 1] if i else ""
        rest = [t for t in tokens[i + 1 :] if t not in _TRAILING]
        if before[:_STEM] in titled or before in ("turn", "switch") or not rest:
            found.add(token == "on")
    return found.pop() if len(found) == 1 else None


def _value(schema: dict[str, Any], text: str, titled: set[str]) -> Any:
    """A value of the argument's type that ``text`` gives, else None."""
    kind = schema.get("type")
    if kind == "boolean":
        return _switch(re.findall(r"[a-z]+", text.lower()), titled)
    if kind == "integer":
        # Out of its bounds too: the tool's own check then says why it cannot be set.
        number = _NUMBER.search(text)
        return int(number.group(1)) if number else None
    if kind == "string" and schema.get("format") == "time":
        clock = _CLOCK.search(text)
        return clock.group(1).strip() if clock else None
    return None


def setting_args(tool: BoundTool, text: str) -> dict[str, Any]:
    """The arguments of ``tool`` the message names by title and gives a value for."""
    said = _stems(text)
    args: dict[str, Any] = {}
    for name, raw in tool.properties.items():
        schema = schema_type(raw) if isinstance(raw, dict) else {}
        title = schema.get("title")
        needed = _stems(title) if isinstance(title, str) else set()
        if needed and needed <= said and (value := _value(schema, text, needed)) is not None:
            args[name] = value
    return args


def requested_setting(ctx: PlanContext) -> tuple[BoundTool, dict[str, Any]] | None:
    """The bound write tool with no role one of whose settings the rep names with a value, and
    those settings; the tool setting the most when several do. None for a question."""
    text = ctx.turn.question
    if is_question(text.lower()):
        return None  # "is my digest on?" asks, it does not set
    found = [(tool, args) for tool in ctx.tools.writes_without_role() if (args := setting_args(tool, text))]
    return max(found, key=lambda f: len(f[1]), default=None)
