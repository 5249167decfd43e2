"""The offline model's planner: the next step for one request, given this question's calls so far.

``plan`` is re-run on every model call. It walks the steps the request needs (check
typed ids, resolve the account, read, propose a write, answer) and stops at the first
step whose tool results are not there yet, making every missing independent read in one
message. Because each read is identified by its exact arguments, the same read is never
made twice in one question, and after a write's result (or the rep's rejection) it answers.
"""

from __future__ import annotations

from typing import assert_never

from offline_model import generic_read, generic_write, knowledge, reads, settings_write, undo, writes
from offline_model.context import PlanContext
from offline_model.intents import WRITE_INTENTS, Intent
from offline_model.lookup import check_typed_ids
from offline_model.roles import Kind
from offline_model.steps import Step


def plan(ctx: PlanContext) -> Step:
    """The next step: tool calls to make now, or the final answer."""
    intents = ctx.req.intents
    if not any(i in WRITE_INTENTS for i in intents):
        # A settings tool: asked for by naming a setting and its value ("digest at 8am").
        setting = settings_write.requested_setting(ctx)
        if setting is not None:
            return generic_write.propose(ctx, *setting)
        # A write tool added after the roles were written: asked for by its title.
        requested = generic_write.requested_tool(ctx)
        if requested is not None:
            return generic_write.propose(ctx, requested)
        # A read tool no role serves (one that computes from the CRM): asked for by its title.
        wanted = generic_read.requested_read(ctx)
        if wanted is not None:
            return generic_read.read_answer(ctx, wanted)
    if _documents_only(ctx, intents[0]):
        return knowledge.documents_answer(ctx)
    if intents == ["help"]:
        return ctx.help()
    first = intents[0]
    checked = check_typed_ids(ctx, _kinds_to_check(first))
    if checked is not None:
        return checked
    match first:
        case "preferences_show":
            return reads.preferences(ctx)
        case "preferences_update":
            return writes.propose_preferences(ctx)
        case "log":
            return writes.propose_log(ctx)
        case "update":
            return writes.propose_update(ctx)
        case "draft":
            return writes.propose_draft(ctx)
        case "undo":
            return undo.propose_undo(ctx)
        case "overview" | "opportunities" | "pipeline" | "activities" | "contacts" | "help":
            return reads.plan_reads(ctx)
        case _:
            assert_never(first)


def _documents_only(ctx: PlanContext, first: Intent) -> bool:
    """A how-to-sell question that names no record: the playbooks answer it alone."""
    req = ctx.req
    if not ctx.tools.has("knowledge_search") or req.records or first not in ("overview", "help"):
        return False
    return req.about_documents or (req.guidance and first == "help")


def _kinds_to_check(first: Intent) -> tuple[Kind, ...]:
    """What a word that may be an id could be, for this request (what it could act on)."""
    match first:
        case "update":
            return ("opportunity",)
        case "log":
            return ("account", "opportunity")
        case "preferences_show" | "preferences_update" | "help" | "undo":
            return ()
        case "draft" | "overview" | "opportunities" | "pipeline" | "activities" | "contacts":
            return ("account",)
        case _:
            assert_never(first)
