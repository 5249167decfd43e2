"""Which tools a model call is offered (pure): chosen from the conversation's words, no model call."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool

from copilot.agent_tools.model_tools import local_read_tools, write_tools
from copilot.middleware.tool_selection import select_tools, tool_cues
from copilot.prompts import CORE, system_prompt


async def _noop(**_: Any) -> str:
    return ""


def _crm_read(name: str) -> BaseTool:
    return StructuredTool.from_function(
        coroutine=_noop, name=name, description=name, metadata={"readOnlyHint": True}
    )


CRM_READS = [_crm_read(n) for n in ("search_accounts", "get_account", "list_opportunities")]
TOOLS: list[BaseTool] = [*CRM_READS, *local_read_tools(), *write_tools()]
WRITES = {t.name for t in write_tools()}


def _offered(*said: str, calls: tuple[str, ...] = ()) -> set[str]:
    messages: list[Any] = []
    for text in said:
        messages.append(HumanMessage(text))
    for n, name in enumerate(calls):
        messages.append(AIMessage(content="", tool_calls=[{"name": name, "args": {}, "id": f"c{n}"}]))
        messages.append(ToolMessage("{}", tool_call_id=f"c{n}", name=name))
    return {t.name for t in select_tools(TOOLS, messages)}


def test_every_write_tool_and_the_copilots_own_side_reads_carry_cues():
    assert all(tool_cues(t) for t in write_tools())
    assert {t.name for t in local_read_tools() if not tool_cues(t)} == {"search_knowledge"}


@pytest.mark.parametrize(
    "question",
    ["how is Acme doing?", "what deals do I have open right now?", "summarise Globex", "VALUE OF Acme?"],
)
def test_a_question_is_offered_every_crm_read_and_no_write(question):
    offered = _offered(question)
    assert {t.name for t in CRM_READS} | {"search_knowledge"} <= offered
    assert not offered & WRITES
    assert "recent_writes" not in offered


@pytest.mark.parametrize(
    ("message", "tool"),
    [
        ("log a call with Acme about pricing", "log_activity"),
        ("push the Acme renewal out two weeks", "update_opportunity"),
        ("draft a follow-up email to Sarah", "draft_followup_email"),
        ("make my tone more formal", "update_preferences"),
        ("undo that last change", "undo_write"),
        ("undo that last change", "recent_writes"),
        ("what's my email signature?", "get_preferences"),
    ],
)
def test_an_instruction_is_offered_the_tool_its_words_name(message, tool):
    assert tool in _offered(message)


def test_a_reply_to_a_clarifying_question_keeps_the_tools_of_the_message_before_it():
    assert "log_activity" in _offered("log a call with Acme", "Sarah Chen")


def test_a_tool_the_model_called_this_turn_stays_offered():
    assert "update_opportunity" in _offered("and the other one", calls=("update_opportunity",))


def test_tools_are_offered_in_their_registered_order():
    messages = [HumanMessage("log a call and draft an email")]
    names = [t.name for t in select_tools(TOOLS, messages)]
    assert names == [t.name for t in TOOLS if t.name in set(names)]


def test_the_prompt_opens_with_the_fixed_rules_and_names_only_the_writes_offered():
    reads_only = system_prompt(["get_account"], write_tools=[])
    logging = system_prompt(["get_account", "log_activity"], write_tools=["log_activity"])
    assert reads_only.startswith(CORE)
    assert logging.startswith(CORE)
    assert "write tools" not in reads_only
    assert "(log_activity)" in logging
    assert "update_opportunity" not in logging
    assert "playbooks" in system_prompt(["search_knowledge"], write_tools=[])
