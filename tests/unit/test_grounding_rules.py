"""The grounding rules and the text tool-call reader (pure): what happens to each kind of response."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, ConfigDict

from copilot.grounding.rules import (
    FACTS_CHECK_TOOL,
    Accept,
    CheckFacts,
    Correct,
    RunSoFar,
    judge,
    states_facts,
)
from copilot.grounding.text_calls import find_text_calls
from tests.support.model_behaviours import TEXT_SHAPES, text_call, text_calls


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account_id: str


async def _noop(**_: Any) -> str:
    return ""


def _tool(name: str) -> BaseTool:
    return StructuredTool.from_function(coroutine=_noop, name=name, description=name, args_schema=_Args)


MCP_STYLE = {
    "type": "function",
    "function": {
        "name": "search_accounts",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "additionalProperties": False,
        },
    },
}
TOOLS: dict[str, Any] = {"get_account": _tool("get_account"), "log_activity": _tool("log_activity")}
TOOLS["search_accounts"] = MCP_STYLE
READS = {"get_account", "search_accounts"}


def _run(*messages: Any) -> RunSoFar:
    return RunSoFar([HumanMessage("How is Acme doing?"), *messages], TOOLS, READS)


def _read(content: str, name: str = "get_account") -> list[Any]:
    call = {"name": name, "args": {"account_id": "acc-1"}, "id": "c1", "type": "tool_call"}
    return [AIMessage(content="", tool_calls=[call]), ToolMessage(content, tool_call_id="c1", name=name)]


@pytest.mark.parametrize("shape", TEXT_SHAPES)
def test_a_call_written_as_text_in_each_field_shape_becomes_a_real_call(shape):
    verdict = judge(AIMessage(content=text_call(shape, "get_account", {"account_id": "acc-1"})), _run())
    assert isinstance(verdict, Accept)
    assert [(c["name"], c["args"]) for c in verdict.message.tool_calls] == [
        ("get_account", {"account_id": "acc-1"})
    ]
    assert verdict.recovered == 1
    assert verdict.message.content == ""


@pytest.mark.parametrize("shape", TEXT_SHAPES)
def test_several_calls_written_as_text_are_all_recovered(shape):
    written = text_calls(shape, [("get_account", {"account_id": "a"}), ("search_accounts", {"query": "b"})])
    found = find_text_calls(written, TOOLS)
    assert found is not None
    assert [(c.name, c.arguments) for c in found.calls] == [
        ("get_account", {"account_id": "a"}),
        ("search_accounts", {"query": "b"}),
    ]


def test_a_reasoning_preamble_before_a_tagged_call_is_kept_apart_from_the_call():
    text = "<think>I should read it.</think>Let me check.\n" + text_call(
        "tool_call_tags", "get_account", {"account_id": "x"}
    )
    found = find_text_calls(text, TOOLS)
    assert found is not None
    assert found.preamble == "Let me check."
    assert found.calls[0].arguments == {"account_id": "x"}


def test_a_tag_named_after_a_bound_tool_is_a_call_and_other_tags_are_text():
    assert find_text_calls('<get_account>{"account_id": "x"}</get_account>', TOOLS) is not None
    assert find_text_calls("Use <b>bold</b> and {braces} [here].", TOOLS) is None


def test_ordinary_answers_with_citations_and_brackets_are_not_calls():
    assert find_text_calls("Acme Corporation [acc-acme] has 3 open deals {see below}.", TOOLS) is None
    assert find_text_calls('The note says {"name": "Acme"}.', TOOLS) is None


@pytest.mark.parametrize(
    ("text", "reason_part"),
    [
        (text_call("tool_call_tags", "lookup_crm", {"q": "x"}), "no tool named 'lookup_crm'"),
        (
            '<tool_call>{"name": "get_account", "arguments": {"account_id": "x"</tool_call>',
            "could not be read",
        ),
        (text_call("bare_json", "get_account", {"account_id": "x", "extra": 1}), "do not fit"),
        (text_call("bare_json", "search_accounts", {"query": 5}), "do not fit"),
        ('{"name": "get_account", "arguments": "not json"}', "arguments could not be read"),
    ],
)
def test_an_unusable_call_written_as_text_goes_back_to_the_model_as_a_tool_error(text, reason_part):
    verdict = judge(AIMessage(content=text), _run())
    assert isinstance(verdict, Correct)
    assert verdict.reason == "text_call_unusable"
    asked, *errors = verdict.feedback
    assert isinstance(asked, AIMessage)
    assert asked.tool_calls
    assert all(isinstance(e, ToolMessage) and e.status == "error" for e in errors)
    assert reason_part in str(errors[0].content)


def test_malformed_structured_arguments_go_back_to_the_model():
    message = AIMessage(
        content="", invalid_tool_calls=[{"name": "get_account", "args": '{"a', "id": "x", "error": "bad"}]
    )
    verdict = judge(message, _run())
    assert isinstance(verdict, Correct)
    assert verdict.reason == "invalid_tool_call"


def test_an_answer_from_a_run_with_no_read_is_checked_for_facts():
    assert isinstance(judge(AIMessage(content="Acme has no open deals."), _run()), CheckFacts)


def test_an_empty_answer_is_asked_again():
    verdict = judge(AIMessage(content=""), _run())
    assert isinstance(verdict, Correct)
    assert verdict.reason == "empty"


def test_an_answer_citing_a_record_its_reads_returned_is_accepted():
    run = _run(*_read('{"id": "acc-1", "name": "Acme"}'))
    assert isinstance(judge(AIMessage(content="Acme [acc-1] is fine."), run), Accept)


def test_an_answer_citing_nothing_after_reads_that_returned_records_is_asked_again():
    run = _run(*_read('{"id": "acc-1", "name": "Acme"}'))
    verdict = judge(AIMessage(content="Acme is fine."), run)
    assert isinstance(verdict, Correct)
    assert verdict.reason == "uncited"


def test_nothing_found_after_a_read_that_returned_nothing_is_accepted():
    run = _run(*_read('{"items": [], "total": 0}', name="search_accounts"))
    assert isinstance(judge(AIMessage(content="I found no account named Zyx."), run), Accept)


def test_an_answer_to_write_outcomes_is_accepted_without_a_citation():
    call = {"name": "log_activity", "args": {"account_id": "acc-1"}, "id": "w1", "type": "tool_call"}
    run = _run(
        AIMessage(content="", tool_calls=[call]),
        ToolMessage('{"status": "done", "id": "act-9"}', tool_call_id="w1", name="log_activity"),
    )
    assert isinstance(judge(AIMessage(content="Logged."), run), Accept)


def test_a_read_repeated_with_the_same_arguments_is_answered_not_run_again_but_a_write_is_proposed_again():
    run = _run(*_read('{"id": "acc-1"}'))
    again = {"name": "get_account", "args": {"account_id": "acc-1"}, "id": "c2", "type": "tool_call"}
    verdict = judge(AIMessage(content="", tool_calls=[again]), run)
    assert isinstance(verdict, Correct)
    assert verdict.reason == "repeated_call"
    assert verdict.otherwise is not None
    write = {**again, "name": "log_activity"}
    assert isinstance(
        judge(AIMessage(content="", tool_calls=[write]), _run(AIMessage(content="", tool_calls=[write]))),
        Accept,
    )


def test_a_refusal_is_given_its_own_words():
    verdict = judge(AIMessage(content="", additional_kwargs={"refusal": "I can't help with that."}), _run())
    assert isinstance(verdict, Accept)
    assert verdict.message.content == "I can't help with that."


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            AIMessage(
                content="",
                tool_calls=[{"name": FACTS_CHECK_TOOL, "args": {"states_record_facts": False}, "id": "1"}],
            ),
            False,
        ),
        (
            AIMessage(
                content="",
                tool_calls=[{"name": FACTS_CHECK_TOOL, "args": {"states_record_facts": True}, "id": "1"}],
            ),
            True,
        ),
        (
            AIMessage(content=text_call("tool_call_tags", FACTS_CHECK_TOOL, {"states_record_facts": False})),
            False,
        ),
        (AIMessage(content="I think it is fine."), True),
        (
            AIMessage(
                content="",
                tool_calls=[{"name": FACTS_CHECK_TOOL, "args": {"states_record_facts": "no"}, "id": "1"}],
            ),
            True,
        ),
    ],
)
def test_the_facts_check_is_read_from_the_forced_call_and_an_unreadable_one_counts_as_facts(
    message, expected
):
    assert states_facts(message) is expected
