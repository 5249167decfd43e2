"""The eval's lazy model (``--model scripted:lazy``): it answers without reading, as real models
do, answers the grounding gate's forced classification honestly, and calls a read tool only
when a call is required; and the product's model factory cannot build it."""

from __future__ import annotations

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from pydantic import BaseModel, Field

from copilot.errors import ConfigurationError, InvalidInput
from copilot.models.factory import build_model
from evals.observe import observing
from evals.scripted import LAZY_ANSWER, LazyChatModel, scripted_model


def _search_accounts(query: str, limit: int = 5) -> str:
    """Find accounts by name."""
    return '{"accounts": []}'


def _get_opportunity(opportunity_id: str) -> str:
    """One opportunity."""
    return "{}"


def _log_activity(account_id: str, subject: str) -> str:
    """Log an activity."""
    return "{}"


SEARCH = StructuredTool.from_function(
    _search_accounts, name="search_accounts", metadata={"readOnlyHint": True}
)
GET = StructuredTool.from_function(_get_opportunity, name="get_opportunity", metadata={"readOnlyHint": True})
LOG = StructuredTool.from_function(_log_activity, name="log_activity", metadata={"readOnlyHint": False})
TOOLS = [LOG, SEARCH, GET]
QUESTION = [HumanMessage("How many deals are open at Willow Energy?")]


class ReplyCheck(BaseModel):
    """Whether a reply states facts about CRM records."""

    states_record_facts: bool = Field(description="the reply states CRM facts")
    unsure: bool = False


def test_it_answers_every_question_with_stated_facts_and_no_tool_call_whatever_is_bound() -> None:
    model = LazyChatModel()
    assert isinstance(model, BaseChatModel)
    reply = model.bind_tools(TOOLS).invoke(QUESTION)
    assert reply.tool_calls == []
    assert reply.content == LAZY_ANSWER
    assert reply.usage_metadata
    assert reply.usage_metadata["total_tokens"] > 0
    assert model.invoke(QUESTION).content == LAZY_ANSWER


def test_tool_results_in_the_conversation_never_change_its_answer() -> None:
    called = AIMessage("", tool_calls=[{"name": "search_accounts", "args": {"query": "W"}, "id": "c1"}])
    result = ToolMessage('{"accounts": [{"id": "acc-1", "name": "Willow Energy"}]}', tool_call_id="c1")
    reply = LazyChatModel().bind_tools(TOOLS).invoke([*QUESTION, called, result])
    assert reply.tool_calls == []
    assert reply.content == LAZY_ANSWER


def test_the_gates_forced_classification_is_answered_honestly_that_its_reply_states_facts() -> None:
    model = LazyChatModel()
    assert model.with_structured_output(ReplyCheck).invoke(QUESTION) == ReplyCheck(states_record_facts=True)
    named = model.bind_tools([*TOOLS, ReplyCheck], tool_choice="ReplyCheck").invoke(QUESTION)
    assert [(c["name"], c["args"]) for c in named.tool_calls] == [
        ("ReplyCheck", {"states_record_facts": True})
    ]
    openai_form = {"type": "function", "function": {"name": "ReplyCheck"}}
    forced = model.bind_tools([*TOOLS, ReplyCheck], tool_choice=openai_form).invoke(QUESTION)
    assert forced.tool_calls[0]["args"]["states_record_facts"] is True


def test_a_required_call_reads_one_bound_read_tool_with_its_required_arguments_from_the_question() -> None:
    model = LazyChatModel().bind_tools(TOOLS, tool_choice="required")
    reply = model.invoke(QUESTION)
    assert [c["name"] for c in reply.tool_calls] == ["search_accounts"]
    assert reply.tool_calls[0]["args"] == {"query": "How many deals are open at Willow Energy"}
    SEARCH.args_schema.model_validate(reply.tool_calls[0]["args"])  # type: ignore[union-attr]
    result = ToolMessage('{"accounts": []}', tool_call_id=reply.tool_calls[0]["id"])
    after = LazyChatModel().bind_tools(TOOLS).invoke([*QUESTION, reply, result])
    assert after.tool_calls == [], "it answers from nothing again"
    assert after.content == LAZY_ANSWER


def test_a_required_call_with_no_annotated_tool_takes_one_that_is_no_registry_write() -> None:
    unannotated = StructuredTool.from_function(_get_opportunity, name="get_opportunity")
    registry_write = StructuredTool.from_function(_log_activity, name="log_activity")
    reply = LazyChatModel().bind_tools([registry_write, unannotated], tool_choice="any").invoke(QUESTION)
    assert [c["name"] for c in reply.tool_calls] == ["get_opportunity"]


def test_the_observer_sees_the_tools_the_model_was_given_and_the_tools_that_ran() -> None:
    with observing() as seen:
        LazyChatModel().bind_tools(TOOLS).invoke(QUESTION)
        SEARCH.invoke({"query": "Willow"})
    assert seen.bound_tools == {"log_activity", "search_accounts", "get_opportunity"}
    assert seen.tools_run == ["search_accounts"]
    assert seen.tool_calls == []
    assert seen.model_calls == 1


def test_only_the_eval_builds_it_the_products_model_factory_refuses_its_name() -> None:
    assert isinstance(scripted_model("scripted:lazy"), LazyChatModel)
    with pytest.raises(InvalidInput, match="no scripted model"):
        scripted_model("scripted:eager")
    with pytest.raises(ConfigurationError):
        build_model("scripted:lazy")
