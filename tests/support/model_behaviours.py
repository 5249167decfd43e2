"""How real models misbehave, as policies for the fake OpenAI server (``FakeOpenAI.policy``).

Each behaviour was seen from a real model family (small Qwen 2.5 / Llama 3.x models behind
llama.cpp's OpenAI-compatible server, and hosted GPT-4.1-class models on a bad day) and is
replayed here over the real chat-completions wire protocol, so the product's real
``ChatOpenAI`` client parses it exactly as it would parse the real thing:

* tool calls written into the message text, in the five shapes seen in the field, and
  after a reasoning preamble;
* "lazy" answers that state CRM facts without calling any tool;
* a call to a tool that does not exist, and a call whose JSON arguments do not parse;
* the same call repeated; an empty message; a refusal;
* a write called for a question; a tool error echoed as the answer; "nothing found" after an
  unrelated read or after no read at all; the same sentence repeated to the token limit;
  template residue (issue 34's shapes, seen with Qwen2.5-Coder 1.5B behind llama.cpp).

A behaviour misbehaves on the question's first call, then acts as a competent model would
(``then_behaves``) or keeps misbehaving (``persistent``). A competent answer cites the
record ids the question's tool results returned. The grounding gate's facts check
(a call forced to ``report_reply_kind``) is answered honestly: a reply that names records
states facts; a greeting does not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from copilot.grounding.rules import FACTS_CHECK_TOOL, REQUEST_CHECK_TOOL
from tests.support.fake_openai import ChatRequest, Completion, Reply, ToolCall, answer, call, tool_calls

TextShape = Literal["bare_json", "fenced_json", "tool_call_tags", "function_markup", "parameters_list"]
TEXT_SHAPES: tuple[TextShape, ...] = (
    "bare_json",
    "fenced_json",
    "tool_call_tags",
    "function_markup",
    "parameters_list",
)


def text_call(shape: TextShape, name: str, arguments: dict[str, Any]) -> str:
    """A tool call written as message text, the way a model family writes it."""
    if shape == "bare_json":
        return json.dumps({"name": name, "arguments": arguments}, default=str)
    if shape == "fenced_json":
        return (
            "```json\n" + json.dumps({"name": name, "arguments": arguments}, indent=2, default=str) + "\n```"
        )
    if shape == "tool_call_tags":
        return (
            "<tool_call>\n"
            + json.dumps({"name": name, "arguments": arguments}, default=str)
            + "\n</tool_call>"
        )
    if shape == "function_markup":
        return f"<function={name}>{json.dumps(arguments, default=str)}</function>"
    if shape == "parameters_list":
        return json.dumps([{"name": name, "parameters": arguments}], default=str)
    raise AssertionError(shape)


def text_calls(shape: TextShape, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """Several calls in one message, written as text in ``shape``."""
    if len(calls) == 1:
        return text_call(shape, *calls[0])
    if shape in ("tool_call_tags", "function_markup"):
        return "\n".join(text_call(shape, name, args) for name, args in calls)
    listed = [{"name": n, ("parameters" if shape == "parameters_list" else "arguments"): a} for n, a in calls]
    body = json.dumps(listed, default=str)
    return f"```json\n{body}\n```" if shape == "fenced_json" else body


IDS = re.compile(r'"id"\s*:\s*"([A-Za-z0-9][A-Za-z0-9_.:\-]+)"')


CHANGE_WORDS = re.compile(
    r"^\s*(?:please\s+)?(?:log|update|move|set|draft|change|create|undo|add|mark)\b", re.I
)


def facts_check(request: ChatRequest) -> Reply | None:
    """The honest answer to one of the gate's checks (does a reply state facts; does the rep's
    message ask a change), or ``None`` if this is not one."""
    if request.forced_function == REQUEST_CHECK_TOOL:
        asked = bool(CHANGE_WORDS.search(request.latest_user_text()))
        return tool_calls(call(REQUEST_CHECK_TOOL, asks_for_change=asked))
    if request.forced_function != FACTS_CHECK_TOOL:
        return None
    reply = request.latest_user_text().split("<reply>", 1)[-1]
    # What a model reading its own reply sees: a named record, an amount or a date is a fact.
    facts = bool(re.search(r"Acme|Globex|\[|\$|\d", reply))
    return tool_calls(call(FACTS_CHECK_TOOL, states_record_facts=facts))


def grounded_answer(request: ChatRequest) -> Reply:
    """A competent model's answer: the first records its tool results returned, cited."""
    results = "\n".join(str(m.get("content")) for m in request.turn_tool_results())
    ids = list(dict.fromkeys(IDS.findall(results)))[:3]
    if not ids:
        return answer("I found nothing for that in the CRM.")
    return answer("Here is what I found: " + ", ".join(f"record [{i}]" for i in ids) + ".")


Behaviour = Callable[[ChatRequest], Reply]


@dataclass(frozen=True)
class Misbehaviour:
    """One behaviour: what the model does wrong on a question, and whether it keeps doing it."""

    name: str
    wrong: Callable[[ChatRequest], Reply]
    """The misbehaving reply, given the request."""
    read: tuple[str, dict[str, Any]] = ("get_account", {"account_id": "acc-acme"})
    """The read a competent model makes for the question."""
    persistent: bool = False
    """Keeps misbehaving when asked again (then only an honest refusal can be shown)."""
    wrong_calls: int = 1
    """How many of a question's first calls misbehave (a shape that needs a tool result first,
    such as echoing a tool's error, takes two)."""

    def policy(self) -> Behaviour:
        """A fresh policy for the fake server: misbehaves on each question's first call (every
        call if ``persistent``), then reads and answers from what it read."""
        calls_per_question: dict[str, int] = {}

        def reply(request: ChatRequest) -> Reply:
            check = facts_check(request)
            if check is not None:
                return check
            question = request.latest_user_text()
            calls_per_question[question] = calls_per_question.get(question, 0) + 1
            if self.persistent or calls_per_question[question] <= self.wrong_calls:
                return self.wrong(request)
            if any(
                not _is_error(m) and IDS.search(str(m.get("content"))) for m in request.turn_tool_results()
            ):
                return grounded_answer(request)
            return tool_calls(call(self.read[0], **self.read[1]))

        return reply


def _is_error(result: dict[str, Any]) -> bool:
    content = str(result.get("content", ""))
    return content.startswith("Error") or "Field required" in content or "validation error" in content


def _texted(shape: TextShape, preamble: str = "") -> Callable[[ChatRequest], Reply]:
    def wrong(request: ChatRequest) -> Reply:
        return Completion(content=preamble + text_call(shape, "get_account", {"account_id": "acc-acme"}))

    return wrong


LAZY_ANSWER = "Acme Corporation has no open deals right now."

NOTHING_FOUND = "I found no recent interaction with Acme in the CRM."
LOOPED = "Acme Corporation [acc-acme] is one of your accounts. "
RESIDUE = '<record name="opp-1234" [<record id>]>'


def _write_for_question(request: ChatRequest) -> Reply:
    """A change proposed for a question (the rep asked how a deal is doing)."""
    return tool_calls(call("update_opportunity", opportunity_id="opp-acme-renewal", stage="Renewal"))


def _echo_tool_error(request: ChatRequest) -> Reply:
    """A read with the wrong argument, then the tool's error given to the rep as the answer."""
    errors = [str(m.get("content")) for m in request.turn_tool_results()]
    if not errors:
        return tool_calls(call("get_account", account="Acme"))
    return answer("To address the validation error, please ensure that " + errors[-1])


def _nothing_after_unrelated_read(request: ChatRequest) -> Reply:
    """An empty read of something else, then "nothing found" about what the rep asked."""
    if not request.turn_tool_results():
        return tool_calls(call("search_accounts", query="Zzyzx Holdings"))
    return answer(NOTHING_FOUND)


def _residue_after_read(request: ChatRequest) -> Reply:
    """A read, then an answer that cites it but ends in the prompt's template, unfilled."""
    if not request.turn_tool_results():
        return tool_calls(call("get_account", account_id="acc-acme"))
    return answer("Acme Corporation [acc-acme]: " + RESIDUE)


def _loop_after_read(request: ChatRequest) -> Reply:
    """A read, then one cited sentence again and again until the token limit cuts it."""
    if not request.turn_tool_results():
        return tool_calls(call("get_account", account_id="acc-acme"))
    return Completion(content=LOOPED * 40, finish="length")


MISBEHAVIOURS: tuple[Misbehaviour, ...] = (
    *(Misbehaviour(f"text_call_{shape}", _texted(shape)) for shape in TEXT_SHAPES),
    Misbehaviour(
        "reasoning_preamble",
        _texted(
            "tool_call_tags",
            "<think>The user wants a summary of Acme. I should look up the account first.</think>\n"
            "Let me look up the account.\n",
        ),
    ),
    Misbehaviour("lazy_answer", lambda r: answer(LAZY_ANSWER)),
    Misbehaviour("lazy_answer_persistent", lambda r: answer(LAZY_ANSWER), persistent=True),
    Misbehaviour("unknown_tool", lambda r: tool_calls(call("get_deals", account="Acme"))),
    Misbehaviour(
        "unknown_tool_as_text",
        lambda r: answer(text_call("tool_call_tags", "lookup_crm", {"q": "Acme"})),
    ),
    Misbehaviour(
        "malformed_arguments",
        lambda r: tool_calls(ToolCall("get_account", {}, raw_arguments='{"account_id": "acc-acme"')),
    ),
    Misbehaviour(
        "malformed_arguments_as_text",
        lambda r: answer(
            '<tool_call>\n{"name": "get_account", "arguments": {"account_id": "acc-acme"}\n</tool_call>'
        ),
    ),
    Misbehaviour("empty_message", lambda r: Completion(content="")),
    Misbehaviour("empty_message_persistent", lambda r: Completion(content=""), persistent=True),
    Misbehaviour(
        "text_call_persistent",
        _texted("tool_call_tags"),
        persistent=True,
    ),
    Misbehaviour("write_for_question", _write_for_question),
    Misbehaviour("write_for_question_persistent", _write_for_question, persistent=True),
    Misbehaviour("tool_error_echoed", _echo_tool_error, wrong_calls=2),
    Misbehaviour("tool_error_echoed_persistent", _echo_tool_error, persistent=True),
    Misbehaviour("nothing_found_after_unrelated_read", _nothing_after_unrelated_read, wrong_calls=2),
    Misbehaviour("nothing_found_without_read", lambda r: answer(NOTHING_FOUND)),
    Misbehaviour("repetition_to_token_limit", _loop_after_read, wrong_calls=2),
    Misbehaviour("repetition_to_token_limit_persistent", _loop_after_read, persistent=True),
    Misbehaviour("template_residue", _residue_after_read, wrong_calls=2),
)
"""Every behaviour the product is tested against (by name)."""


def repeated_call_policy() -> Behaviour:
    """A model that makes the same read twice before answering (seen with small models)."""

    def reply(request: ChatRequest) -> Reply:
        check = facts_check(request)
        if check is not None:
            return check
        results = request.turn_tool_results()
        repeats = sum(1 for m in request.messages if m.get("role") == "assistant" and m.get("tool_calls"))
        if (results and repeats >= 2) or any("Not run again" in str(m.get("content")) for m in results):
            return grounded_answer(request)
        return tool_calls(call("get_account", account_id="acc-acme"))

    return reply


REFUSAL = "I'm sorry, but I can't help with that request."


def refusal_policy(request: ChatRequest) -> Reply:
    """A model that refuses (OpenAI's ``refusal`` field, content null)."""
    check = facts_check(request)
    return check if check is not None else Completion(content=None, refusal=REFUSAL)


def greeting_policy(request: ChatRequest) -> Reply:
    """A model that answers a greeting without a tool, as it should."""
    check = facts_check(request)
    return check if check is not None else answer("Hello! Ask me about your accounts, deals or contacts.")
