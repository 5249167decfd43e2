"""What to do with one model response, by the grounding rules (pure).

Given the run so far and the model's response, :func:`judge` says one of:

* :class:`Accept`: use it (possibly changed: tool calls written as text recovered as real
  calls, a provider refusal given its text);
* :class:`Correct`: ask the model once more, with the reason: a tool error for calls it
  wrote that cannot be used, or a note in the system prompt for an answer that is not
  grounded (``force_tool``: that ask is made with ``tool_choice="required"``);
* :class:`CheckFacts`: a final answer from a run that made no read: whether it states facts
  about CRM records is for the model to say (:data:`FACTS_CHECK_TOOL`), not a phrase list;
* the caller refuses (:data:`copilot.grounding.COULD_NOT_LOOK_UP`) when a correction is
  due and none is left.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ValidationError

from copilot.citations import cited_ids, current_run, ids_in_tool_results, ids_in_value, message_text
from copilot.grounding.shown_text import (
    argument_words,
    capitalised_words,
    content_words,
    degenerate_text,
    identifiers_of,
    internal_text,
    reads_as_question,
)
from copilot.grounding.text_calls import TextCall, find_text_calls
from copilot.tools.crm_client import parse_result_text

Reason = Literal[
    "text_call_unusable",
    "invalid_tool_call",
    "repeated_call",
    "empty",
    "no_read",
    "uncited",
    "unearned_nothing",
    "internal_text",
    "degenerate",
    "unread_id",
    "unrequested_write",
]
"""Why a response was not used as it came."""

ONE_CORRECTION: frozenset[Reason] = frozenset(
    {
        "no_read",
        "uncited",
        "unearned_nothing",
        "internal_text",
        "degenerate",
        "unread_id",
        "unrequested_write",
    }
)
"""Reasons asked about once: a model that does it again is refused (or its writes dropped)."""


@dataclass(frozen=True)
class Accept:
    message: AIMessage
    recovered: int = 0
    """How many tool calls were recovered from the message's text."""


@dataclass(frozen=True)
class Correct:
    reason: Reason
    feedback: tuple[BaseMessage, ...] = ()
    """Messages appended for the next ask (a tool-call exchange ending in the tool errors)."""
    note: str | None = None
    """A line for the system prompt of the next ask."""
    force_tool: bool = False
    otherwise: AIMessage | None = None
    """What to use when no correction is left, instead of refusing (repeated reads: they run,
    and the model-call limit ends a model that keeps at it)."""


@dataclass(frozen=True)
class CheckFacts:
    """A final answer with no read behind it: the model is asked whether it states facts."""

    message: AIMessage


@dataclass(frozen=True)
class CheckRequest:
    """Writes proposed while the rep's message reads as a question: the model is asked whether
    the message asks for a change (:data:`REQUEST_CHECK_TOOL`) before any card is shown."""

    message: AIMessage
    writes: tuple[str, ...]
    """The ids of the proposed write calls."""


Judgement = Accept | Correct | CheckFacts | CheckRequest


@dataclass(frozen=True)
class RunSoFar:
    """What the grounding rules need of the run: its messages since the rep's, and the tools."""

    messages: Sequence[BaseMessage]
    tools: Mapping[str, BaseTool | dict[str, Any]]
    read_tools: Collection[str]
    system: str = ""
    """The system prompt the model was given (text only it may see)."""
    rep_facing: Collection[str] = ()
    """Messages written for the rep that tools return as errors (the CRM outage notice): a
    reply may repeat them."""
    request_checked: bool | None = None
    """The model's own answer, earlier in this model call, to whether the rep asked a change."""
    run: list[BaseMessage] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "run", current_run(self.messages))

    def reads(self) -> list[ToolMessage]:
        return [m for m in self.run if isinstance(m, ToolMessage) and m.name in self.read_tools]

    def latest_batch_read(self) -> bool:
        """Whether the tool results the model is answering now include a read (not only
        write outcomes or rejections, which the rep sees typed on their cards)."""
        batch: list[ToolMessage] = []
        for message in reversed(self.run):
            if isinstance(message, ToolMessage):
                batch.append(message)
            elif batch:
                break
        return any(m.name in self.read_tools for m in batch)

    def question(self) -> str:
        """The rep's latest message (what this run answers)."""
        for message in reversed(self.messages):
            if isinstance(message, HumanMessage):
                return message_text(message)
        return ""

    def internal_sources(self) -> list[str]:
        """Texts only the model was meant to see: the system prompt, the gate's own notes and
        every tool error of the thread."""
        errors = [
            message_text(m)
            for m in self.messages
            if isinstance(m, ToolMessage) and _failed(m) and not written_for_rep(m)
        ]
        for notice in self.rep_facing:
            errors = [e.replace(notice, " ") for e in errors]
        return [self.system, *GATE_NOTES, *errors]

    def read_calls(self) -> list[tuple[ToolCall, ToolMessage]]:
        """This run's reads: each call with its result."""
        results = {m.tool_call_id: m for m in self.run if isinstance(m, ToolMessage)}
        return [
            (call, results[call["id"] or ""])
            for m in self.run
            if isinstance(m, AIMessage)
            for call in m.tool_calls
            if call["name"] in self.read_tools and (call["id"] or "") in results
        ]

    def earlier_calls(self) -> set[str]:
        return {
            _call_key(call["name"], call["args"])
            for m in self.run
            if isinstance(m, AIMessage)
            for call in m.tool_calls
        }


def _call_key(name: str, args: Mapping[str, Any]) -> str:
    return name + json.dumps(args, sort_keys=True, default=str)


# --- the rules ---------------------------------------------------------------------------------


NO_READ_NOTE = (
    "Your previous reply to the rep's latest message stated facts without calling any tool, so "
    "it was not shown. Call the tools that read what the rep asked about, then answer only "
    "from their results, citing each record id."
)
UNCITED_NOTE = (
    "Your previous reply was not shown: it cited no record id from this turn's tool results. "
    "Answer again only from those results, citing each fact's record as <name> [<record id>]; "
    "if the results hold nothing relevant, say plainly that nothing was found."
)
EMPTY_NOTE = "Your previous reply was empty. Answer the rep's latest message."
TEXT_CALL_HINT = (
    " Call tools through the tool-calling interface (not as text), with one of the bound tools "
    "and arguments that match its schema."
)
UNEARNED_NOTE = (
    "Your previous reply was not shown: it said nothing was found, but no read of what the rep "
    "asked about came back empty. Look up the account, deal or contact the rep named, then "
    "answer only from those results, citing each record id."
)
INTERNAL_NOTE = (
    "Your previous reply was not shown: it repeated text meant only for you (a tool error, "
    "these instructions, a tool or argument name, an error report or a schema). Answer the "
    "rep in plain words from the tool results; if a call failed, say briefly what you could "
    "not do, and try a different read if one fits."
)
DEGENERATE_NOTE = (
    "Your previous reply was not shown: it was empty, cut off, repeated itself, or held "
    "markup or placeholders. Answer once, briefly, in plain sentences, citing each record "
    "as <name> [<record id>] with an id a tool returned."
)
UNREQUESTED_NOTE = (
    "The rep's latest message asks a question and no change, so the change you proposed was "
    "not shown. Answer the question with read tools only, citing each record id; propose no "
    "change."
)
REPEATED_RESULT = (
    "Not run again: this exact call was already made in this turn and its result is above. "
    "Answer from it, or make a different call."
)


GATE_NOTES: tuple[str, ...] = ()
"""The gate's own notes to the model (filled below, once every note is defined)."""


def judge(response: AIMessage, run: RunSoFar) -> Judgement:
    """The grounding rules applied to one model response (see the module docstring)."""
    if response.tool_calls:
        return _calls(Accept(response), run)
    text = message_text(response)
    refusal = response.additional_kwargs.get("refusal")
    if not text.strip() and isinstance(refusal, str) and refusal.strip():
        # A provider refusal (OpenAI's ``refusal`` field) states no record facts: say it.
        return Accept(response.model_copy(update={"content": refusal.strip()}))
    found = find_text_calls(text, run.tools.keys())
    if found is not None:
        return _from_text(response, found.calls, found.preamble, run)
    if response.invalid_tool_calls:
        errors = [
            (
                TextCall(c.get("name"), None, c.get("error") or "the call's arguments could not be read"),
                "its arguments are not valid JSON",
            )
            for c in response.invalid_tool_calls
        ]
        return Correct("invalid_tool_call", feedback=_error_exchange(errors))
    if not text.strip():
        return Correct("empty", note=EMPTY_NOTE)
    shown = _unshowable(response, text, run)
    if shown is not None:
        return shown
    if any(isinstance(m, ToolMessage) for m in run.run) and not run.latest_batch_read():
        # It answers write outcomes or rejections, which the rep also sees typed on the cards.
        return Accept(response)
    reads = run.reads()
    if not reads:
        return CheckFacts(response)
    # "Nothing found" is allowed when a read ran and returned nothing; when every read
    # returned records, an answer must cite at least one of them.
    if not run.latest_batch_read():
        return Accept(response)
    # Each result's ids are read once (its JSON parsed once), for every question below.
    ids = {id(m): ids_in_tool_results([m]) for m in run.run if isinstance(m, ToolMessage)}
    seen: set[str] = set().union(*ids.values())
    cited = cited_ids(text)
    if any(ident in seen for ident in cited):
        return Accept(response)
    if all(ids[id(m)] for m in reads):
        return Correct("uncited", note=UNCITED_NOTE)
    if cited:
        # Every id it cites is one no tool returned: placeholders, not citations.
        return Correct("unread_id", note=DEGENERATE_NOTE)
    if any(_failed(m) and any(n in message_text(m) for n in run.rep_facing) for m in reads):
        # A read the copilot answered with a notice for the rep (the CRM is down): saying so
        # is the honest answer, with nothing to cite.
        return Accept(response)
    # "Nothing found" is allowed only when a read about what the rep named came back empty.
    if not nothing_earned(run, ids):
        return Correct("unearned_nothing", note=UNEARNED_NOTE)
    return Accept(response)


def _unshowable(response: AIMessage, text: str, run: RunSoFar) -> Correct | None:
    """A reply no rep may see whatever its grounding: internal text or degenerate text."""
    finish = response.response_metadata.get("finish_reason")
    answers_reads = bool(run.reads()) and run.latest_batch_read()
    if (
        degenerate_text(
            text, finish_reason=finish if isinstance(finish, str) else None, answers_reads=answers_reads
        )
        is not None
    ):
        return Correct("degenerate", note=DEGENERATE_NOTE)
    internal = internal_text(
        text, sources=run.internal_sources(), identifiers=identifiers_of(run.tools), question=run.question()
    )
    if internal is not None:
        return Correct("internal_text", note=INTERNAL_NOTE)
    return None


def nothing_earned(run: RunSoFar, ids: Mapping[int, set[str]]) -> bool:
    """Whether a read about what the rep asked came back empty in this run.

    What the rep named: the words of the question that this run's reads asked about (in their
    arguments) and the capitalised words after its first. With nothing named ("what deals do I
    have open?") any empty read earns it; otherwise an empty read must ask about a named word,
    or about a record whose fields hold one (an id found by an earlier read, as a Dataverse
    query asks by GUID)."""
    calls = run.read_calls()
    # A read that failed (an error, not an empty answer) found nothing out.
    empty = [(call, result) for call, result in calls if not ids.get(id(result)) and not _failed(result)]
    if not empty:
        return False
    question = run.question()
    asked = content_words(question)
    argued: set[str] = set().union(*(argument_words(call["args"]) for call, _ in calls)) if calls else set()
    named = (asked & argued) | capitalised_words(question)
    if not named:
        return True
    about = _records_about(calls, named)
    for call, _ in empty:
        if argument_words(call["args"]) & named:
            return True
        argued_text = json.dumps(call["args"], default=str)
        if any(ident in argued_text for ident in about):
            return True
    return False


FOR_REP = "for_rep"
"""Key of a tool error (``{"error": {"code", "message", "for_rep": true}}``) whose message is
written for the rep (a question back: "more than one person is called 'Megan' … Which one?"):
a reply may repeat it, as it may the CRM-outage notice."""


def written_for_rep(result: ToolMessage) -> bool:
    """Whether a tool error's message is written for the rep (see :data:`FOR_REP`)."""
    try:
        body = json.loads(message_text(result))
    except ValueError:
        return False
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and error.get(FOR_REP) is True


def _failed(result: ToolMessage) -> bool:
    return result.status == "error" or message_text(result).startswith("Error")


def _records_about(calls: Sequence[tuple[ToolCall, ToolMessage]], named: set[str]) -> set[str]:
    """Ids of the records in these reads' results whose own text holds a named word."""
    found: set[str] = set()

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            texts = " ".join(v for v in value.values() if isinstance(v, str))
            if content_words(texts) & named:
                found.update(ids_in_value(value))
            for child in value.values():
                if isinstance(child, dict | list):
                    visit(child)
        elif isinstance(value, list):
            for child in value:
                visit(child)

    for _, result in calls:
        visit(parse_result_text(message_text(result)))
    return found


def _calls(accepted: Accept, run: RunSoFar) -> Judgement:
    """Tool calls are made, unless every one repeats a read this run already made, or writes
    are proposed for a message that reads as a question and the model says it asks no change."""
    calls = accepted.message.tool_calls
    writes = tuple(c["id"] or "" for c in calls if c["name"] not in run.read_tools)
    if writes and reads_as_question(run.question()):
        if run.request_checked is None:
            return CheckRequest(accepted.message, writes)
        if run.request_checked is False:
            kept = [c for c in calls if c["name"] in run.read_tools]
            if not kept:
                return Correct("unrequested_write", note=UNREQUESTED_NOTE)
            message = accepted.message.model_copy(update={"tool_calls": kept})
            return _calls(Accept(message, recovered=accepted.recovered), run)
    earlier = run.earlier_calls()
    # Only reads: a write proposed again (after a conflict, say) is a fresh approval.
    if all(c["name"] in run.read_tools and _call_key(c["name"], c["args"]) in earlier for c in calls):
        return Correct(
            "repeated_call", feedback=_exchange(calls, REPEATED_RESULT), otherwise=accepted.message
        )
    return accepted


def _from_text(response: AIMessage, calls: Sequence[TextCall], preamble: str, run: RunSoFar) -> Judgement:
    usable: list[ToolCall] = []
    errors: list[tuple[TextCall, str]] = []
    for call in calls:
        problem = _problem(call, run.tools)
        if problem is None:
            assert call.name is not None
            assert call.arguments is not None
            usable.append(ToolCall(name=call.name, args=call.arguments, id=_call_id(), type="tool_call"))
        else:
            errors.append((call, problem))
    if usable:
        # The calls that can be used run as if the model had made them through the protocol
        # (fresh ids, the same approval for writes); the tool results tell it what happened.
        recovered = AIMessage(
            content=preamble,
            tool_calls=usable,
            id=response.id,
            response_metadata=response.response_metadata,
            usage_metadata=response.usage_metadata,
        )
        return _calls(Accept(recovered, recovered=len(usable)), run)
    return Correct("text_call_unusable", feedback=_error_exchange(errors))


def _problem(call: TextCall, tools: Mapping[str, BaseTool | dict[str, Any]]) -> str | None:
    """Why a call read from text cannot be made; ``None`` when it can."""
    if call.error is not None:
        return call.error
    if call.name is None or call.name not in tools:
        known = ", ".join(sorted(tools))
        return f"there is no tool named {call.name!r} (the tools are: {known})"
    assert call.arguments is not None
    return schema_problem(tools[call.name], call.arguments)


def schema_problem(tool: BaseTool | dict[str, Any], args: Mapping[str, Any]) -> str | None:
    """Why ``args`` do not fit the tool's argument schema (the same schema a structured call is
    checked against); ``None`` when they do."""
    if isinstance(tool, BaseTool):
        schema: Any = tool.args_schema
    else:  # an OpenAI-style function dict, bare or under "function"
        schema = tool.get("parameters") or (tool.get("function") or {}).get("parameters")
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            schema.model_validate(dict(args))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "arguments"
            return f"the arguments do not fit the tool's schema ({where}: {first['msg']})"
        return None
    if isinstance(schema, dict):
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(schema).iter_errors(dict(args))
        )
        if error is not None:
            where = ".".join(str(p) for p in error.absolute_path) or "arguments"
            return f"the arguments do not fit the tool's schema ({where}: {error.message})"
    return None


def _call_id() -> str:
    # Replaced by ToolCallIdMiddleware's fresh id before anything else sees the message.
    return f"text_call_{uuid.uuid4().hex[:16]}"


def _exchange(calls: Sequence[ToolCall], result: str) -> tuple[BaseMessage, ...]:
    ids = [_call_id() for _ in calls]
    asked = AIMessage(content="", tool_calls=[{**c, "id": i} for c, i in zip(calls, ids, strict=True)])
    return (
        asked,
        *(ToolMessage(result, tool_call_id=i, name=c["name"]) for c, i in zip(calls, ids, strict=True)),
    )


def _error_exchange(errors: Sequence[tuple[TextCall, str]]) -> tuple[BaseMessage, ...]:
    """The unusable calls as a tool-call exchange whose results are the errors: the model sees
    its mistake the way the protocol reports any tool error."""
    calls = [
        ToolCall(name=call.name or "unnamed_tool", args=call.arguments or {}, id=_call_id(), type="tool_call")
        for call, _ in errors
    ]
    asked = AIMessage(content="", tool_calls=calls)
    results = [
        ToolMessage(
            f"Error: the call was not made: {problem}.{TEXT_CALL_HINT}",
            tool_call_id=c["id"],
            name=c["name"],
            status="error",
        )
        for c, (_, problem) in zip(calls, errors, strict=True)
    ]
    return (asked, *results)


# --- the facts check ---------------------------------------------------------------------------

FACTS_CHECK_TOOL = "report_reply_kind"

FACTS_CHECK_SYSTEM = (
    "You review a CRM sales copilot's reply that was written without looking anything up. "
    f"Call {FACTS_CHECK_TOOL} once."
)


def _yes_no_tool(name: str, description: str, answer: str, meaning: str) -> dict[str, Any]:
    """An OpenAI function with one required boolean, ``answer``: how the gate asks the model
    a yes-or-no question about its own turn."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {answer: {"type": "boolean", "description": meaning}},
                "required": [answer],
            },
        },
    }


def facts_check_tool() -> dict[str, Any]:
    """The tool the model fills to say whether a reply states CRM facts (an OpenAI function)."""
    return _yes_no_tool(
        FACTS_CHECK_TOOL,
        "Say whether the reply states facts about CRM records or documents.",
        "states_record_facts",
        "True if the reply says anything about specific accounts, deals, "
        "contacts, activities, people, amounts, dates or documents, including "
        "that none exist or that nothing was found. False if it only greets, "
        "thanks, explains what the copilot can do, or asks the rep to clarify.",
    )


REQUEST_CHECK_TOOL = "report_request_kind"

REQUEST_CHECK_SYSTEM = (
    "You review a message a sales rep sent to a CRM copilot. Say whether it asks for a change: "
    "to log, create, update, move, draft, undo or set something. A question about records asks "
    f"for no change. Call {REQUEST_CHECK_TOOL} once."
)


def request_check_tool() -> dict[str, Any]:
    """The tool the model fills to say whether the rep's message asks for a change."""
    return _yes_no_tool(
        REQUEST_CHECK_TOOL,
        "Say whether the rep's message asks the copilot to change something.",
        "asks_for_change",
        "True if the message asks to log, create, update, move, draft, undo or "
        "set something in the CRM or the rep's settings. False if it only asks "
        "a question about records or for information.",
    )


def asks_for_change(response: AIMessage) -> bool:
    """The model's answer to the request check; an answer that cannot be read counts as
    "asks for a change": the proposal still waits for the rep's approval, so an unreadable
    check never drops a change the rep asked for."""
    for call in _forced_calls(response, REQUEST_CHECK_TOOL):
        value = call["args"].get("asks_for_change")
        if isinstance(value, bool):
            return value
    return True


def _forced_calls(response: AIMessage, tool: str) -> list[ToolCall]:
    calls = list(response.tool_calls)
    if not calls:
        found = find_text_calls(message_text(response), [tool])
        calls = [
            ToolCall(name=c.name, args=c.arguments, id="", type="tool_call")
            for c in (found.calls if found else ())
            if c.name and c.arguments is not None
        ]
    return [c for c in calls if c["name"] == tool]


def facts_check_prompt(question: str, reply: str) -> str:
    return f"The rep wrote:\n<message>\n{question}\n</message>\n\nThe reply was:\n<reply>\n{reply}\n</reply>"


def states_facts(response: AIMessage) -> bool:
    """The model's answer to the facts check; an answer that cannot be read counts as "states
    facts", so an unreadable check never lets an answer through."""
    for call in _forced_calls(response, FACTS_CHECK_TOOL):
        if isinstance(call["args"].get("states_record_facts"), bool):
            return bool(call["args"]["states_record_facts"])
    return True


GATE_NOTES = (
    NO_READ_NOTE,
    UNCITED_NOTE,
    UNEARNED_NOTE,
    INTERNAL_NOTE,
    DEGENERATE_NOTE,
    UNREQUESTED_NOTE,
    EMPTY_NOTE,
    TEXT_CALL_HINT,
    REPEATED_RESULT,
    FACTS_CHECK_SYSTEM,
    REQUEST_CHECK_SYSTEM,
)
