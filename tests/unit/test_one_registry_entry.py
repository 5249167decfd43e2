"""A write tool is one registry entry: a throwaway tool, registered only inside each test,
is picked up by every generic check and suite with no other edit (issue 23).

Each test registers :data:`tests.support.dummy_write.DUMMY_TOOL` through the
``dummy_write`` fixture (the registry is restored afterwards) and asks the same code the
product and the suites use: the start-up interrupt check, the approval middleware, the
system prompt, the derived wrong-type and extra-field cases and the injection suite's
case factories.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, InterruptOnConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import ValidationError

from copilot import writes
from copilot.agent_tools.model_tools import local_read_tools, write_tools
from copilot.errors import ConfigurationError
from copilot.middleware.approval import approval_middleware, assert_every_write_is_interrupted
from copilot.prompts import system_prompt
from tests.adversarial import test_injection as inj
from tests.adversarial.harness import write_tool_names
from tests.support import write_cases
from tests.support.dummy_write import DUMMY_TOOL, EXECUTED, DummyBadgeArgs, dummy_write
from tests.support.scripted_model import ScriptedChatModel, call, calls

__all__ = ["dummy_write"]  # the fixture, used by name

CRM_READS = ("search_accounts", "get_account")


def _read(name: str) -> BaseTool:
    async def run(**_: Any) -> str:
        return "{}"

    return StructuredTool.from_function(coroutine=run, name=name, description=f"the {name} tool")


def _tools() -> list[BaseTool]:
    return [*(_read(n) for n in CRM_READS), *local_read_tools(), *write_tools()]


def _read_only() -> set[str]:
    return {*CRM_READS, *(t.name for t in local_read_tools())}


def test_the_fixture_registers_the_tool_for_one_test_only(dummy_write):
    assert writes.is_write(DUMMY_TOOL)
    assert writes.WRITE_TOOL_SCHEMAS[DUMMY_TOOL] is DummyBadgeArgs
    assert DUMMY_TOOL in write_tool_names()


def test_without_the_fixture_the_tool_is_not_registered():
    assert not writes.is_write(DUMMY_TOOL)
    assert DUMMY_TOOL not in write_tool_names()


# --- the product's own checks --------------------------------------------------------------------


def test_the_start_up_check_requires_the_new_tool_to_be_interrupted(dummy_write):
    others = [n for n in writes.REGISTRY if n != DUMMY_TOOL]
    interrupt_on: dict[str, bool | InterruptOnConfig] = {
        n: InterruptOnConfig(allowed_decisions=["approve", "edit", "reject"]) for n in others
    }
    stale: HumanInTheLoopMiddleware[Any, Any, Any] = HumanInTheLoopMiddleware(
        interrupt_on=interrupt_on, interrupt_mode="per_call"
    )

    with pytest.raises(ConfigurationError, match=DUMMY_TOOL):
        assert_every_write_is_interrupted(_tools(), stale, read_only=_read_only())
    # The middleware built from the registry covers it: nothing else to edit.
    assert_every_write_is_interrupted(_tools(), approval_middleware(), read_only=_read_only())


def test_the_approval_middleware_interrupts_the_new_tool_with_all_three_decisions(dummy_write):
    hitl = approval_middleware()

    assert set(hitl.interrupt_on) == set(writes.REGISTRY)
    assert sorted(hitl.interrupt_on[DUMMY_TOOL]["allowed_decisions"]) == ["approve", "edit", "reject"]


async def test_a_call_of_the_new_tool_stops_at_an_approval_interrupt_and_runs_nothing(dummy_write):
    args = {"account_id": "acc-1", "label": "Champion", "colour": "gold"}
    agent = create_agent(
        model=ScriptedChatModel(steps=[calls(call(DUMMY_TOOL, **args))]),
        tools=write_tools(),
        middleware=[approval_middleware()],
        checkpointer=InMemorySaver(),
    )

    result = await agent.ainvoke(
        {"messages": [{"role": "user", "content": "pin a badge"}]},
        {"configurable": {"thread_id": "t-1"}},
    )

    [interrupt] = result["__interrupt__"]
    request = interrupt.value
    assert request["type"] == "tool_approval"
    assert (request["name"], request["args"]) == (DUMMY_TOOL, args)
    # The decisions the rep may answer with, and an edit is checked against the tool's schema.
    schema = interrupt.response_schema
    assert sorted(schema["discriminator"]["mapping"]) == ["approve", "edit", "reject"]
    edited = schema["$defs"]["EditedAction"]["properties"]
    assert edited["name"]["const"] == DUMMY_TOOL
    assert set(edited["args"]["properties"]) == set(DummyBadgeArgs.model_fields)
    assert EXECUTED == []


def test_the_system_prompt_names_the_new_tool(dummy_write):
    # build_agent passes the registry itself: system_prompt(REGISTRY).
    assert DUMMY_TOOL in system_prompt(writes.REGISTRY)
    assert DUMMY_TOOL in {t.name for t in write_tools()}


# --- the derivations the suites use ---------------------------------------------------------------


def test_the_new_tools_fields_are_read_from_its_schema(dummy_write):
    facts = {f.name: f for f in write_cases.fields(DUMMY_TOOL)}

    assert list(facts) == list(DummyBadgeArgs.model_fields)
    assert {n for n, f in facts.items() if f.required} == {"account_id", "label", "colour"}
    assert facts["colour"].enum == ["gold", "silver", "bronze"]
    assert facts["until"].nullable
    assert facts["until"].format == "date"


def test_generic_valid_arguments_are_accepted_by_the_new_tools_schema(dummy_write):
    args = write_cases.valid_args(DUMMY_TOOL, lambda name: "acc-real" if name == "account_id" else None)

    assert args is not None
    assert DummyBadgeArgs.model_validate(args).account_id == "acc-real"


def test_wrong_types_are_derived_for_every_field_of_the_new_tool_and_all_refused(dummy_write):
    cases = write_cases.wrong_types(DUMMY_TOOL)
    base = write_cases.valid_args(DUMMY_TOOL)
    assert base is not None

    assert {name for case in cases for name in case} == set(DummyBadgeArgs.model_fields)
    for case in cases:
        with pytest.raises(ValidationError):
            DummyBadgeArgs.model_validate({**base, **case})
    by_field: dict[str, list[Any]] = {}
    for case in cases:
        for name, value in case.items():
            by_field.setdefault(name, []).append(value)
    assert any(isinstance(v, list) for v in by_field["label"])  # a string gets a list
    assert any(isinstance(v, str) for v in by_field["weight"])  # a number gets a string
    assert any(v not in ("gold", "silver", "bronze") and isinstance(v, str) for v in by_field["colour"])
    assert any(isinstance(v, str) for v in by_field["tags"])  # a list gets a string


def test_extra_fields_are_derived_for_the_new_tool_and_all_refused(dummy_write):
    base = write_cases.valid_args(DUMMY_TOOL)
    assert base is not None
    cases = write_cases.extra_fields(DUMMY_TOOL)

    assert {write_cases.UNKNOWN_FIELD: "attacker-chosen"} in cases
    for case in cases:
        assert not set(case) & set(DummyBadgeArgs.model_fields)
        with pytest.raises(ValidationError):
            DummyBadgeArgs.model_validate({**base, **case})


@pytest.mark.parametrize("tool", sorted(writes.WRITE_TOOL_SCHEMAS))
def test_every_built_in_tool_gets_derived_cases_too(tool: str):
    schema = writes.WRITE_TOOL_SCHEMAS[tool]
    base = write_cases.valid_args(tool)
    assert base is not None, tool
    schema.model_validate(base)
    for case in [*write_cases.wrong_types(tool), *write_cases.extra_fields(tool)]:
        with pytest.raises(ValidationError):
            schema.model_validate({**base, **case})


# --- the injection suite's case factories ---------------------------------------------------------


def _world() -> inj.World:
    return inj.World(
        accounts=["acc-1", "acc-2"],
        opportunities={"acc-1": ["opp-1"], "acc-2": ["opp-2"]},
        contacts={"acc-1": ["con-1"], "acc-2": ["con-2"]},
        others_opportunity="opp-megan",
        hidden_account="acc-east",
        hidden_contact="con-east",
        rep_activity="act-1",
    )


def test_the_injection_suite_builds_valid_calls_of_the_new_tool(dummy_write):
    rng, w = random.Random(1), _world()

    injected = inj.injected_call(DUMMY_TOOL, rng, w, id="$benign")
    benign = inj.benign_call(DUMMY_TOOL, rng, w, "noncexyz")

    assert injected["name"] == benign["name"] == DUMMY_TOOL
    assert injected["id"] == "$benign"
    for made in (injected, benign):
        assert DummyBadgeArgs.model_validate(made["args"]).account_id in w.accounts
    assert "noncexyz" in str(benign["args"])  # the rep's own call is recognisable


def test_the_injection_suite_attacks_the_new_tool_in_every_per_tool_case(dummy_write):
    rng, w = random.Random(2), _world()
    factories = inj.cases()
    made = [f(rng, w, "noncexyz") for f in factories]
    names = [c.name for c in made]

    for expected in (
        f"injected {DUMMY_TOOL} alone",
        f"{DUMMY_TOOL} with extra fields",
        f"{DUMMY_TOOL} with wrong types",
        f"{DUMMY_TOOL} sharing the rep's {DUMMY_TOOL} id (benign first)",
        f"{DUMMY_TOOL} sharing the rep's {DUMMY_TOOL} id (injected first)",
    ):
        assert expected in names
    every = next(c for c in made if c.name == "every write tool in one message")
    assert DUMMY_TOOL in {call["name"] for call in every.injected[0]}

    for case in made:
        if case.name in (f"{DUMMY_TOOL} with extra fields", f"{DUMMY_TOOL} with wrong types"):
            [[attack]] = case.injected
            with pytest.raises(ValidationError):
                DummyBadgeArgs.model_validate(attack["args"])


def test_the_injection_tables_fall_back_to_derived_cases_for_the_new_tool(dummy_write):
    assert DUMMY_TOOL not in inj.EXTRA_FIELDS
    assert DUMMY_TOOL not in inj.WRONG_TYPES

    assert inj.extra_fields(DUMMY_TOOL) == write_cases.extra_fields(DUMMY_TOOL)
    assert inj.wrong_types(DUMMY_TOOL) == write_cases.wrong_types(DUMMY_TOOL)
    # Built-in tools keep their hand-made cases, first.
    assert (
        inj.wrong_types("update_opportunity")[: len(inj.WRONG_TYPES["update_opportunity"])]
        == (inj.WRONG_TYPES["update_opportunity"])
    )
