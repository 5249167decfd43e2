"""The ``search_knowledge`` read tool: playbooks and product documents the rep may read.

The rep comes from the run's context, never from the model's arguments, and the access
check is in the SQL (:mod:`copilot.knowledge.store`): a chunk the rep may not read is not
selected, so it never reaches the tool result, the model, the answer or the trace.
"""

from __future__ import annotations

import json
from functools import lru_cache

from langchain_core.tools import BaseTool, StructuredTool
from langgraph.runtime import Runtime, get_runtime
from pydantic import BaseModel, ConfigDict, Field

from copilot.context import AgentContext
from copilot.knowledge.acl import Reader
from copilot.knowledge.embedding import EmbeddingModel, from_setting
from copilot.knowledge.store import compact, search

TOOL_NAME = "search_knowledge"


class SearchKnowledgeArgs(BaseModel):
    """Search the sales playbooks, product sheets and guidance documents."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    query: str = Field(
        min_length=1,
        max_length=300,
        description="What to look for, in words (e.g. 'Negotiation stage playbook next steps')",
    )


@lru_cache(maxsize=4)
def _embeddings(spec: str | None) -> EmbeddingModel | None:
    # One client per process and model: building one per call would reconnect each time.
    return from_setting(spec)


async def _search_knowledge(query: str) -> str:
    runtime: Runtime[AgentContext] = get_runtime(AgentContext)
    ctx = runtime.context
    reader = Reader.of(ctx.identity)
    async with ctx.pool.connection() as conn:
        hits = await search(
            conn,
            reader,
            query,
            limit=ctx.settings.knowledge_results,
            embeddings=_embeddings(ctx.settings.copilot_embeddings),
        )
    return json.dumps({"items": [compact(h) for h in hits], "count": len(hits)})


def knowledge_tool() -> BaseTool:
    """The read tool the agent is given."""
    return StructuredTool.from_function(
        coroutine=_search_knowledge,
        name=TOOL_NAME,
        description=(
            "Search the sales playbooks, product sheets, objection handling and pricing guidance "
            "documents you may read. Returns chunks (id, title, section, url, snippet); cite a "
            "chunk's id like a record id."
        ),
        args_schema=SearchKnowledgeArgs,
        metadata={"readOnlyHint": True},
    )
