"""After the model answers: every cited record id must come from a tool result of this run.

An answer that cites an id no tool returned is flagged: the unverifiable citations are
removed and a visible note says so; the check's outcome rides on the message metadata
(``citation_check``) for the runner, the bot and evals.
"""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from copilot.citations import cited_ids, current_run, ids_in_tool_results, message_text, strip_citations

UNVERIFIED_NOTE = (
    "\n\n⚠️ Some references in this answer could not be verified against CRM data and were removed: {ids}."
)


class CitationCheckMiddleware(AgentMiddleware[Any, Any, Any]):
    """Flags answers that cite record ids not seen in this run's tool results."""

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        messages = list(state.get("messages", []))
        last = messages[-1] if messages else None
        if not isinstance(last, AIMessage) or last.tool_calls:
            return None
        text = message_text(last)
        cited = cited_ids(text)
        seen = ids_in_tool_results(current_run(messages))
        unverified = [i for i in cited if i not in seen]
        check = {"cited": [i for i in cited if i in seen], "unverified": unverified}
        if not unverified:
            return {
                "messages": [
                    last.model_copy(
                        update={"response_metadata": {**last.response_metadata, "citation_check": check}}
                    )
                ]
            }
        flagged = strip_citations(text, unverified) + UNVERIFIED_NOTE.format(ids=", ".join(unverified))
        replacement = last.model_copy(
            update={
                "content": flagged,
                "response_metadata": {**last.response_metadata, "citation_check": check},
            }
        )
        return {"messages": [replacement]}
