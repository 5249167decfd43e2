"""A read tool the offline model has no role for: called when the rep asks for it by its title.

The roles (:mod:`roles`) cover the reads the planner reasons about record by record. A read
tool added later (one that computes something from the CRM, say) serves none of them; like a
real model reading a tool list, the offline model recognises it from what the tool says of
itself: the rep's message uses every content word of its title ("which deals are at risk?" for
"Deals at risk"), or of its name. Its arguments come from the message through its own schema:
an ``<kind>_id`` argument takes a record the rep named (an account by name is looked up first),
a date-like argument the date or period the rep named, read back from today (past). The answer
lists what the tool returned, each item with the record ids it gave, and any notes it returned
(what it did not check) in parentheses. Nothing here knows a tool by name.
"""

from __future__ import annotations

import re
from typing import Any

from offline_model import compose as c
from offline_model.catalog import FUNCTION_WORDS, BoundTool, words
from offline_model.context import PlanContext
from offline_model.lookup import has_account_reference, resolve_account
from offline_model.steps import PlannedCall, Step, answer
from offline_model.text import find_date, find_period

_STEM = 4
_LONG_STEM = 6
_TEXT_KEYS = ("what", "reason", "text", "summary", "name", "title", "subject")
_DETAIL_KEYS = ("stage", "amount", "close_date")
_ID_KEYS = ("id", "record_ids")
_CITATION = re.compile(r"\s*\[[^\[\]\s]{1,80}\]")
MAX_ITEMS = 25


def _stems(text: str, length: int = _STEM) -> set[str]:
    return {w[:length] for w in words(text) if w not in FUNCTION_WORDS and len(w) > 1}


def requested_read(ctx: PlanContext) -> BoundTool | None:
    """The bound read-only tool with no role and a title that the rep's message asks for: it
    uses every content word of the tool's title, or of its name (two words or more: a name's
    single word says too little). A one-word title is matched by the word's longer stem, so
    "my stats" is not "status". The best is the one whose title and name cover most of the
    message's words, then the one with the longer title."""
    said = _stems(ctx.turn.question)
    names_a_record = has_account_reference(ctx)
    matches: list[tuple[int, int, BoundTool]] = []
    for name in ctx.tools.without_role():
        tool = ctx.tools.tools[name]
        if not tool.read_only or not tool.title:
            continue
        titled, named = _stems(tool.title), _stems(tool.name.replace("_", " "))
        if len(titled) == 1:
            asked = titled <= said and _stems(tool.title, _LONG_STEM) <= _stems(ctx.turn.question, _LONG_STEM)
        else:
            asked = bool(titled) and titled <= said
        # Its name alone ("brief me") does not ask for a tool that takes no record when the
        # message names one ("brief me on <an account>" is about that account).
        by_name = len(named) >= 2 and named <= said and not (names_a_record and not tool.properties)
        if asked or by_name:
            matches.append((len(said & (titled | named)), len(titled), tool))
    return max(matches, key=lambda m: (m[0], m[1]))[2] if matches else None


def _since(ctx: PlanContext) -> str | None:
    text, today = ctx.turn.question, ctx.today
    period = find_period(text, today)
    if period is not None and period[0].start is not None and period[0].start <= today:
        return period[0].start.isoformat()
    day = find_date(text, today, past=True)
    return day.isoformat() if day else None


def _args(ctx: PlanContext, tool: BoundTool) -> dict[str, Any] | Step:
    args: dict[str, Any] = {}
    for field, schema in tool.properties.items():
        described = f"{field} {schema.get('description', '') if isinstance(schema, dict) else ''}".lower()
        if field == "account_id":
            if has_account_reference(ctx):
                account = resolve_account(ctx, needs_account=False)
                if isinstance(account, Step):
                    return account
                args[field] = account["id"]
        elif field.endswith("_id"):
            ids = ctx.req.ids_of(field.removesuffix("_id"))  # type: ignore[arg-type]
            if ids:
                args[field] = ids[0]
        elif "since" in described or "date" in described:
            found = _since(ctx)
            if found is not None:
                args[field] = found
    return args


def _ids(item: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for key in _ID_KEYS:
        value = item.get(key)
        values = value if isinstance(value, list) else [value]
        found += [v for v in values if isinstance(v, str) and v]
    return list(dict.fromkeys(found))


def _line(item: dict[str, Any], indent: str) -> list[str]:
    text = next((item[k] for k in _TEXT_KEYS if isinstance(item.get(k), str) and item[k]), "")
    details = [
        str(item[k]) for k in _DETAIL_KEYS if isinstance(item.get(k), str | int | float) and item.get(k)
    ]
    head = c.clean(_CITATION.sub("", text), 300) + (f" ({', '.join(details)})" if details else "")
    lines = [f"{indent}- {head} {c.cite(*_ids(item))}".rstrip()]
    for value in item.values():
        if isinstance(value, list):
            lines += [line for sub in value if isinstance(sub, dict) for line in _line(sub, indent + "  ")]
    return lines


def read_answer(ctx: PlanContext, tool: BoundTool) -> Step:
    """The call of ``tool``, or, once made in this question, the answer from its result."""
    prior = ctx.turn.all(tool.name)
    if not prior:
        args = _args(ctx, tool)
        if isinstance(args, Step):
            return args
        return Step(calls=[PlannedCall(tool.name, args)])
    result = prior[-1].result
    if result is None or not result.ok:
        return answer(c.error_sentence(result, "that") if result is not None else c.UNAVAILABLE)
    payload = result.obj
    items = [i for i in result.items if isinstance(i, dict)]
    since = payload.get("since")
    header = f"{tool.title}" + (
        f" since {str(since)[:16].replace('T', ' ')}" if isinstance(since, str) else ""
    )
    lines = [f"{header}: none found." if not items else f"{header} ({len(items)}):"]
    for item in items[:MAX_ITEMS]:
        lines += _line(item, "")
    notes = [n for v in payload.values() if isinstance(v, list) for n in v if isinstance(n, str)]
    lines += [f"({c.clean(n, 300)})" for n in notes]
    return answer("\n".join(lines))
