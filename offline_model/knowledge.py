"""Playbooks and product documents in answers: the knowledge read, and how its chunks read.

A next-step question about a deal reads the deal, then the playbook for the deal's stage
(the query is built from the stage the CRM returned, never from a list of known deals);
a question about documents alone ("how do I handle the price objection?") reads only them.
"""

from __future__ import annotations

from typing import Any

from offline_model import compose as c
from offline_model.context import PlanContext
from offline_model.state import ToolResult
from offline_model.steps import Step, answer

SNIPPET_CHARS = 320


def _chunk_line(chunk: dict[str, Any]) -> str:
    title = c.clean(chunk.get("title"), 80)
    section = c.clean(chunk.get("section"), 80)
    where = f"{title} › {section}" if section and section != title else title
    snippet = c.clean(chunk.get("snippet"), SNIPPET_CHARS)
    return f"- {where} {c.cite(chunk.get('id'))}: {snippet}"


def _chunks(result: ToolResult) -> list[dict[str, Any]]:
    return [r for r in result.items if isinstance(r, dict) and r.get("id")]


def playbook_for_deal(ctx: PlanContext, opp: dict[str, Any]) -> str | Step:
    """The guidance block for one deal (its stage's playbook), or the step that reads it.
    Empty when no knowledge tool is bound, the deal has no stage, or nothing was found."""
    stage = opp.get("stage")
    if not ctx.tools.has("knowledge_search") or not isinstance(stage, str) or not stage:
        return ""
    result = ctx.read("knowledge_search", {"query": f"{stage} stage playbook next steps"})
    if isinstance(result, Step):
        return result
    if not result.ok:
        return "\n\n" + c.error_sentence(result, "the playbooks")
    found = _chunks(result)
    if not found:
        return f"\n\nI found no playbook for the {stage} stage."
    return f"\n\nFrom the playbook for the {stage} stage:\n" + _chunk_line(found[0])


def documents_answer(ctx: PlanContext) -> Step:
    """An answer from the documents alone."""
    result = ctx.read("knowledge_search", {"query": ctx.req.text}, "search the playbooks")
    if isinstance(result, Step):
        return result
    if not result.ok:
        return answer(c.error_sentence(result, "the playbooks"))
    found = _chunks(result)
    if not found:
        return answer("I found no playbook or product document about that.")
    return answer(
        "From the playbooks and product documents:\n" + "\n".join(_chunk_line(x) for x in found[:3])
    )
