"""Proof: internationalised email addresses never reach the model (invariant 9).

A seeded generator writes addresses with Unicode local parts in many scripts and IDN
domains in Unicode, in punycode (upper and lower case, or only the TLD), with ideographic
dots, and full-width as an IME types them; each goes into a sentence in one of several
languages, inside quotes, brackets, a display name, a ``mailto:`` link, a query string
(plain or percent-encoded) or URL userinfo. One goes into the rep's message, another into
a CRM tool result (JSON with non-ASCII ``\\u``-escaped or not, plain or as content blocks),
and the real middleware chain runs its before-model hooks on that state. A trial passes
only if what the model would receive is the input with exactly the address replaced
(every occurrence), nothing around it touched. A second suite feeds the chain text with
at-signs that are not addresses (mentions, decorators, versions, paths, matrix products)
in several scripts and requires it to come through unchanged.

``COPILOT_SOAK=1`` (``make soak``) runs the full counts.
"""

from __future__ import annotations

import json
import random
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from copilot.citations import message_text
from copilot.middleware.pii import pii_middleware
from tests.adversarial.counts import Tally, count
from tests.support.idn_emails import NOT_ADDRESSES, address, crm_json, written

TRIALS = count(500, 5000)
SEED = 20261202
NO_RUNTIME: Any = None  # the PII hooks never touch the runtime


def _state(question: str, tool_content: Any) -> dict[str, Any]:
    return {
        "messages": [
            HumanMessage(question, id="h1"),
            AIMessage(
                "",
                id="a1",
                tool_calls=[{"name": "list_contacts", "args": {"account_id": "acc-acme"}, "id": "call_1"}],
            ),
            ToolMessage(tool_content, tool_call_id="call_1", name="list_contacts", id="t1"),
        ]
    }


async def _what_the_model_receives(state: dict[str, Any]) -> list[BaseMessage]:
    """The state after the agent's PII hook (email, then phone) ran."""
    messages: list[BaseMessage] = state["messages"]
    current: Any = state
    update = await pii_middleware("US").abefore_model(current, NO_RUNTIME)
    return messages if update is None else update["messages"]


def _content(message: BaseMessage) -> Any:
    return message.content if isinstance(message.content, list) else message_text(message)


async def test_internationalised_email_addresses_never_reach_the_model():
    rng = random.Random(SEED)
    tally = Tally("pii-idn-emails")
    for _ in range(TRIALS):
        asked = written(rng, address(rng))
        listed = crm_json(rng, address(rng)) if rng.random() < 0.6 else written(rng, address(rng))
        tool_content: Any = listed.text
        expected_tool: Any = listed.expected
        if rng.random() < 0.3:
            tool_content = [{"type": "text", "text": listed.text}]
            expected_tool = [{"type": "text", "text": listed.expected}]

        received = await _what_the_model_receives(_state(asked.text, tool_content))

        human, tool = message_text(received[0]), _content(received[2])
        tally.record(
            human == asked.expected and tool == expected_tool,
            f"asked {asked.text!r} -> {human!r}; listed {listed.text!r} -> {tool!r}",
        )
    tally.assert_clean()


async def test_at_signs_that_are_not_addresses_reach_the_model_unchanged():
    rng = random.Random(SEED + 1)
    tally = Tally("pii-idn-email-negatives")
    for _ in range(TRIALS):
        sentence = " ".join(rng.sample(NOT_ADDRESSES, rng.randint(1, 3)))
        record = {"id": "con-0042", "note": rng.choice(NOT_ADDRESSES), "tags": rng.sample(NOT_ADDRESSES, 2)}
        tool_content = json.dumps(record, ensure_ascii=rng.random() < 0.5)
        state = _state(sentence, tool_content)

        received = await _what_the_model_receives(state)

        unchanged = [message_text(m) for m in received] == [message_text(m) for m in state["messages"]]
        tally.record(unchanged, f"{sentence!r} / {tool_content!r} -> {[message_text(m) for m in received]}")
    tally.assert_clean()
