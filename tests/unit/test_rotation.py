"""When a conversation moves to a new thread, and the hand-off it carries (copilot/rotation.py)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from copilot.rotation import handoff, headroom, rotation_due
from copilot.writes import REGISTRY

NOW = dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.UTC)
SHIPPED: dict[str, Any] = {"thread_limit": 200, "run_limit": 12, "idle": dt.timedelta(hours=8)}
WRITES = set(REGISTRY)


def _read_turn(question: str, record: str, n: int) -> list[BaseMessage]:
    return [
        HumanMessage(question, id=f"h{n}"),
        AIMessage("", tool_calls=[{"id": f"c{n}", "name": "get_account", "args": {"account_id": record}}]),
        ToolMessage(f'{{"id": "{record}"}}', tool_call_id=f"c{n}", name="get_account"),
        AIMessage(f"{record} is fine [{record}]."),
    ]


def test_a_thread_rotates_only_when_the_next_two_runs_might_not_fit_under_its_limit():
    assert headroom(12) == 24
    recent = NOW - dt.timedelta(minutes=5)
    assert rotation_due(model_calls=176, last_active=recent, now=NOW, **SHIPPED) is None
    assert rotation_due(model_calls=177, last_active=recent, now=NOW, **SHIPPED) == "headroom"


def test_a_thread_rotates_after_an_idle_gap_and_not_before():
    just_under = NOW - dt.timedelta(hours=8) + dt.timedelta(seconds=1)
    assert rotation_due(model_calls=0, last_active=just_under, now=NOW, **SHIPPED) is None
    assert rotation_due(model_calls=0, last_active=NOW - dt.timedelta(hours=8), now=NOW, **SHIPPED) == "idle"


def test_the_hand_off_is_the_newest_finished_read_only_exchange_verbatim():
    history = [*_read_turn("summarise Globex", "acc-globex", 1), *_read_turn("summarise Acme", "acc-acme", 2)]
    carried = handoff(history, WRITES)
    assert [m.content for m in carried] == [m.content for m in history[4:]]
    assert [type(m) for m in carried] == [type(m) for m in history[4:]]


def test_an_exchange_that_proposed_a_change_or_is_unfinished_is_not_carried():
    write = [
        HumanMessage("log a call with Acme", id="h3"),
        AIMessage("", tool_calls=[{"id": "w1", "name": "log_activity", "args": {"account_id": "acc-acme"}}]),
        ToolMessage('{"status": "done"}', tool_call_id="w1", name="log_activity"),
        AIMessage("Logged the call on Acme [acc-acme]."),
    ]
    stopped = [
        HumanMessage("everything", id="h4"),
        AIMessage("stop", response_metadata={"limit_reached": True}),
    ]
    history = [*_read_turn("summarise Globex", "acc-globex", 1), *write, *stopped]
    assert handoff(history, WRITES)[0].content == "summarise Globex"
    assert handoff([*write, *stopped], WRITES) == []
    assert handoff(write, WRITES) == []  # finished, but it made a write
    assert handoff(write, set()) != []  # (the same exchange, were log_activity a read)


def test_a_summary_of_older_history_is_never_carried():
    summary = HumanMessage("Here is a summary", additional_kwargs={"lc_source": "summarization"})
    assert handoff([summary, AIMessage("Acme is fine [acc-acme].")], WRITES) == []
