"""Contact emails and phone numbers never reach the model.

LangChain's ``PIIMiddleware``, one per type, redacts them in the rep's input and in tool
results before each model call, both in one graph node (``ContactPIIMiddleware``). Tools
that need an address (drafts) resolve the contact by record id inside the CRM instead.
What is found and how it is replaced is :mod:`copilot.redaction`, which the trace masking
applies too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, PIIMiddleware, hook_config
from langgraph.runtime import Runtime

from copilot.redaction import DEFAULT_REGION, RedactionRule, home_region, redaction_rules


def rule_middleware(rule: RedactionRule) -> PIIMiddleware[Any, Any]:
    """LangChain's ``PIIMiddleware`` for one rule, on input and tool results."""
    return PIIMiddleware[Any, Any](
        rule.pii_type,
        strategy=rule.strategy,
        detector=rule.detector,
        apply_to_input=True,
        apply_to_tool_results=True,
    )


class ContactPIIMiddleware(PIIMiddleware[Any, Any]):
    """LangChain's ``PIIMiddleware`` for several PII types in ONE graph node.

    A ``PIIMiddleware`` takes one type, and each instance adds two LangGraph nodes (its
    ``after_model`` exists even with ``apply_to_output`` off), so email and phone cost four
    steps per model call. This one runs each rule's own ``PIIMiddleware.before_model``
    (which messages: the rep's last message and the tool results since the last AI
    message) in turn, each on the messages the previous one returned, exactly as the
    separate nodes did; it has no after_model hook. Its stream transformers are the rules'
    own, in the same order. Input and tool results only.
    """

    # create_agent adds a hook's node only when the class overrides AgentMiddleware's hook.
    after_model = AgentMiddleware.after_model
    aafter_model = AgentMiddleware.aafter_model

    def __init__(self, rules: Sequence[RedactionRule]) -> None:
        if not rules:
            raise ValueError("ContactPIIMiddleware needs at least one redaction rule")
        parts = tuple(rule_middleware(rule) for rule in rules)
        first = rules[0]
        super().__init__(
            first.pii_type,
            strategy=first.strategy,
            detector=first.detector,
            apply_to_input=True,
            apply_to_tool_results=True,
        )
        # The inherited ``detector`` and ``strategy`` are the first rule's and go unused: only
        # PIIMiddleware's own before_model and after_model read them, both replaced here.
        self.pii_type = "+".join(part.pii_type for part in parts)
        self.parts = parts
        self.transformers = tuple(t for part in parts for t in part.transformers)

    # PIIMiddleware's abefore_model calls this; the jump to "end" is declared as its own is.
    @hook_config(can_jump_to=["end"])
    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        current, changed = state, False
        for part in self.parts:
            update = part.before_model(current, runtime)
            if update is not None:
                current, changed = {**current, "messages": update["messages"]}, True
        return {"messages": current["messages"]} if changed else None


def pii_middleware(phone_region: str = DEFAULT_REGION) -> ContactPIIMiddleware:
    """Email and phone redaction on input and tool results, as one before_model node.

    ``phone_region`` is the tenant's home region for national phone formats (see
    ``detect_phone_numbers``); an unknown region is refused here rather than silently
    finding no national numbers.
    """
    return ContactPIIMiddleware(redaction_rules(home_region(phone_region)))
