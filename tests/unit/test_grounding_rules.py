"""The grounding rules and the text tool-call reader (pure): what happens to each kind of response."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, ConfigDict

from copilot.grounding.rules import (
    FACTS_CHECK_TOOL,
    REQUEST_CHECK_TOOL,
    Accept,
    CheckFacts,
    CheckRequest,
    Correct,
    RunSoFar,
    asks_for_change,
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


def _run(*messages: Any, question: str = "How is Acme doing?", system: str = "") -> RunSoFar:
    return RunSoFar([HumanMessage(question), *messages], TOOLS, READS, system=system)


def _read(
    content: str, name: str = "get_account", args: dict[str, Any] | None = None, call_id: str = "c1"
) -> list[Any]:
    call = {"name": name, "args": args or {"account_id": "acc-1"}, "id": call_id, "type": "tool_call"}
    return [AIMessage(content="", tool_calls=[call]), ToolMessage(content, tool_call_id=call_id, name=name)]


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


def test_nothing_found_after_a_read_of_the_thing_named_that_returned_nothing_is_accepted():
    run = _run(
        *_read('{"items": [], "total": 0}', name="search_accounts", args={"query": "Zyx"}),
        question="Is there an account called Zyx?",
    )
    assert isinstance(judge(AIMessage(content="I found no account named Zyx."), run), Accept)


def test_nothing_found_after_an_empty_read_of_something_else_is_asked_again():
    run = _run(
        *_read('{"items": [], "total": 0}', name="search_accounts", args={"query": "Initech"}),
        question="Latest interaction with Globex?",
    )
    verdict = judge(AIMessage(content="I found no recent interaction with Globex."), run)
    assert isinstance(verdict, Correct)
    assert verdict.reason == "unearned_nothing"


def test_nothing_found_after_an_empty_read_by_the_id_of_the_record_named_is_accepted():
    # A Dataverse-style chain: the account found by name, then its activities asked by GUID.
    guid = "0f8fad5b-d9cb-469f-a165-70867728950e"
    run = _run(
        *_read(
            f'[{{"accountid": "{guid}", "name": "Globex Corporation"}}]',
            name="search_accounts",
            args={"query": "SELECT accountid, name FROM account WHERE name LIKE '%globex%'"},
        ),
        *_read("[]", args={"account_id": guid}, call_id="c2"),
        question="Latest interaction with Globex?",
    )
    assert isinstance(judge(AIMessage(content="There is no recent interaction on record."), run), Accept)


def test_nothing_found_for_a_question_naming_nothing_is_accepted_after_any_empty_read():
    run = _run(
        *_read('{"items": []}', name="search_accounts", args={"query": "me"}),
        question="what deals do I have open?",
    )
    assert isinstance(judge(AIMessage(content="You have no open deals."), run), Accept)


def test_an_answer_citing_only_ids_no_tool_returned_is_asked_again():
    run = _run(*_read('{"items": []}', name="search_accounts", args={"query": "Acme"}))
    verdict = judge(AIMessage(content="Acme has one deal, Renewal [opp-1234]."), run)
    assert isinstance(verdict, Correct)
    assert verdict.reason == "unread_id"


# --- what no rep may see ------------------------------------------------------------------------

TOOL_ERROR = (
    "Error: the arguments do not fit the tool's schema (stage: Input should be 'Prospecting', "
    "'Qualification', 'Proposal' or 'Negotiation')"
)


def _errored_write() -> list[Any]:
    call = {"name": "log_activity", "args": {"account_id": "acc-1"}, "id": "w1", "type": "tool_call"}
    return [
        AIMessage(content="", tool_calls=[call]),
        ToolMessage(TOOL_ERROR, tool_call_id="w1", name="log_activity", status="error"),
    ]


@pytest.mark.parametrize(
    "reply",
    [
        "To fix this, note that the arguments do not fit the tool's schema, so please check the stage.",
        "I called log_activity but it failed.",
        "1 validation error for UpdateOpportunity\nstage\n  Input should be 'Won' [type=literal_error,",
        'Traceback (most recent call last):\n  File "copilot/writes/crm.py", line 12, in run',
        'The schema is {"type": "object", "properties": {"stage": {}}}.',
        "Answer only from the results of tools you called in this conversation, never guess.",
    ],
    ids=["copied_tool_error", "tool_name", "pydantic_report", "traceback", "json_schema", "system_prompt"],
)
def test_internal_text_in_a_reply_is_never_accepted(reply):
    run = _run(*_read('{"id": "acc-1", "name": "Acme"}'), *_errored_write(), system=PROMPT)
    verdict = judge(AIMessage(content=reply + " Acme [acc-1]."), run)
    assert isinstance(verdict, Correct)
    assert verdict.reason == "internal_text"


PROMPT = (
    "You are a CRM sales copilot.\n- Answer only from the results of tools you called in this "
    "conversation; never guess or use outside knowledge."
)


def test_a_reply_that_names_a_tool_the_rep_typed_is_accepted():
    run = _run(*_read('{"id": "acc-1", "name": "Acme"}'), question="what does log_activity do for Acme?")
    assert isinstance(judge(AIMessage(content="log_activity records a call for Acme [acc-1]."), run), Accept)


@pytest.mark.parametrize(
    ("reply", "finish"),
    [
        ("I found no deal in my records. " * 6, "stop"),
        (
            "I found no Acme deal in my records. I have no Acme deal in my records. "
            "I see no Acme deal in my records. I found no Acme deal in my records.",
            "stop",
        ),
        ('<record name="opp-1234" [<record id>]>', "stop"),
        ("Acme [acc-1] has", "length"),
        ("OK", "stop"),
        ("Acme [acc-1] is {account_summary}.", "stop"),
    ],
    ids=["loop", "near_loop", "template_residue", "cut_off", "one_word", "placeholder"],
)
def test_degenerate_replies_are_never_accepted(reply, finish):
    run = _run(*_read('{"id": "acc-1", "name": "Acme"}'))
    verdict = judge(AIMessage(content=reply, response_metadata={"finish_reason": finish}), run)
    assert isinstance(verdict, Correct)
    assert verdict.reason == "degenerate"


def test_a_list_of_similar_deals_is_not_taken_for_repetition():
    reply = "\n".join(
        f"- Acme {n} [acc-1]: Negotiation, ${n * 1000:,}, closes 2026-12-{n:02d}" for n in range(10, 20)
    )
    run = _run(*_read('{"id": "acc-1", "name": "Acme"}'))
    assert isinstance(judge(AIMessage(content=reply), run), Accept)


# --- a proposal needs a request ----------------------------------------------------------------------


def _write_call() -> AIMessage:
    call = {"name": "log_activity", "args": {"account_id": "acc-1"}, "id": "w1", "type": "tool_call"}
    return AIMessage(content="", tool_calls=[call])


def test_a_write_proposed_for_a_question_is_checked_with_the_model_first():
    verdict = judge(_write_call(), _run(question="VALUE OF Acme — New Business?"))
    assert isinstance(verdict, CheckRequest)
    assert verdict.writes == ("w1",)


def test_a_write_proposed_for_an_instruction_is_not_checked():
    verdict = judge(_write_call(), _run(question="log a call with Acme about the renewal"))
    assert isinstance(verdict, Accept)


def test_a_write_the_model_says_was_not_asked_for_is_dropped_and_the_question_asked_again():
    run = RunSoFar([HumanMessage("how big is the Acme deal?")], TOOLS, READS, request_checked=False)
    verdict = judge(_write_call(), run)
    assert isinstance(verdict, Correct)
    assert verdict.reason == "unrequested_write"


def test_reads_beside_an_unrequested_write_still_run():
    read = {"name": "get_account", "args": {"account_id": "acc-1"}, "id": "r1", "type": "tool_call"}
    message = AIMessage(content="", tool_calls=[read, *_write_call().tool_calls])
    run = RunSoFar([HumanMessage("how big is the Acme deal?")], TOOLS, READS, request_checked=False)
    verdict = judge(message, run)
    assert isinstance(verdict, Accept)
    assert [c["name"] for c in verdict.message.tool_calls] == ["get_account"]


def test_a_request_check_that_cannot_be_read_keeps_the_proposal():
    assert asks_for_change(AIMessage(content="maybe")) is True
    answered = AIMessage(
        content="", tool_calls=[{"name": REQUEST_CHECK_TOOL, "args": {"asks_for_change": False}, "id": "x"}]
    )
    assert asks_for_change(answered) is False


def test_an_answer_to_write_outcomes_is_accepted_without_a_citation():
    call = {"name": "log_activity", "args": {"account_id": "acc-1"}, "id": "w1", "type": "tool_call"}
    run = _run(
        AIMessage(content="", tool_calls=[call]),
        ToolMessage('{"status": "done", "id": "act-9"}', tool_call_id="w1", name="log_activity"),
    )
    assert isinstance(judge(AIMessage(content="Logged."), run), Accept)


def test_a_read_repeated_with_the_same_arguments_is_answered_not_run_again_but_a_write_is_proposed_again():
    run = _run(*_read('{"id": "acc-1"}'), question="log a call with Acme")
    again = {"name": "get_account", "args": {"account_id": "acc-1"}, "id": "c2", "type": "tool_call"}
    verdict = judge(AIMessage(content="", tool_calls=[again]), run)
    assert isinstance(verdict, Correct)
    assert verdict.reason == "repeated_call"
    assert verdict.otherwise is not None
    write = {**again, "name": "log_activity"}
    assert isinstance(
        judge(
            AIMessage(content="", tool_calls=[write]),
            _run(AIMessage(content="", tool_calls=[write]), question="log a call with Acme"),
        ),
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
