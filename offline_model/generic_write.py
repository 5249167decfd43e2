"""A write tool the offline model has no role for: proposed when the rep asks for it by its title.

The roles (:mod:`roles`) cover the writes the planner knows how to reason about (which
record an activity belongs to, which deal a stage change means). A write tool added later
is one registry entry and serves none of them, so without this module the offline model
could never propose it. Like a real model reading a tool list, it recognises such a tool
from what the tool says of itself: the rep's message uses every content word of the
tool's title ("pin a gold badge on …" for "Pin a badge"). Its arguments are filled from
the message through the tool's own schema (:func:`structured.best_effort_args`), and the
approval card lets the rep correct any of them before anything runs. Nothing here knows a
tool by name.
"""

from __future__ import annotations

import re
from typing import Any

from offline_model import compose as c
from offline_model.catalog import FUNCTION_WORDS, BoundTool, words
from offline_model.context import PlanContext
from offline_model.questions import is_question
from offline_model.steps import PlannedCall, Step, answer
from offline_model.structured import best_effort_args

_SHOW = re.compile(r"\s*(?:please\s+)?(?:show|list|see|view|display)\b")
_STEM = 5  # "badges" and "badge", "pinned" and "pin": compare the first letters only


def _stem(word: str) -> str:
    return word[:_STEM]


def _title_words(tool: BoundTool) -> set[str]:
    return {_stem(w) for w in words(tool.title) if w not in FUNCTION_WORDS}


def requested_tool(ctx: PlanContext) -> BoundTool | None:
    """The bound write tool with no role whose title the rep's message uses, word for word
    (:meth:`~offline_model.catalog.ToolCatalog.writes_without_role` are the candidates)."""
    lower = ctx.turn.question.lower()
    if is_question(lower) or _SHOW.match(lower):
        # "show my approval delegations" uses every word of "Delegate my approvals" and asks
        # to see, not to change: a question is answered with reads, never a proposal.
        return None
    said = {_stem(w) for w in words(ctx.turn.question)}
    matches = [
        tool for tool in ctx.tools.writes_without_role() if (needed := _title_words(tool)) and needed <= said
    ]
    # The most specific title wins when several match ("Pin a badge" vs "Pin a gold badge").
    return max(matches, key=lambda t: len(_title_words(t)), default=None)


def _record_id(ctx: PlanContext, kind: str) -> str | None:
    """The id an ``<kind>_id`` argument means: one the rep wrote (of that kind if known), else
    the latest record of that kind this conversation's tool results showed."""
    written = [t.id for t in ctx.req.records if t.kind == kind] or [
        t.id for t in ctx.req.records if t.kind is None
    ]
    if written:
        return written[0]
    if ctx.req.unverified:
        return ctx.req.unverified[0]
    seen = [ctx.records.spelled[key] for key, k in ctx.records.kinds.items() if k == kind]
    return seen[-1] if seen else None


def propose(ctx: PlanContext, tool: BoundTool, given: dict[str, Any] | None = None) -> Step:
    """One proposal of ``tool`` (``given``: its arguments, else read from the message through
    its schema), or, once it was proposed in this question, its outcome."""
    prior = ctx.turn.all(tool.name)
    what = tool.title[:1].lower() + tool.title[1:]
    if not prior:
        args = (
            dict(given)
            if given is not None
            else best_effort_args(tool.parameters, ctx.req, ctx.turn.question, "", ctx.today)
        )
        for field in tool.properties:
            if field.endswith("_id"):
                found = _record_id(ctx, field.removesuffix("_id"))
                if found is None:
                    label = ctx.tools.label(field)
                    return answer(f"Which record should I {what} on? Tell me its {label.lower()} (its id).")
                args[field] = found
        return Step(calls=[PlannedCall(tool.name, args)])
    result = prior[-1].result
    if result is None:
        return answer("Waiting for your decision on the proposed change.")
    if result.rejected:
        because = f' Your reason: "{result.reason[:200]}".' if result.reason else ""
        return answer(
            f"Understood — I did not {what}; you rejected the proposal.{because} Nothing was changed."
        )
    if not result.ok:
        return answer(c.error_sentence(result, "that record"))
    if str(result.obj.get("status", "")).lower() == "unchanged":
        # Nothing was proposed: the tool says what already is (it asked for no approval).
        return answer(str(result.obj.get("message") or f"Nothing to {what}: it is already so."))
    return answer(f"Done: {what}, as you approved it.")
