"""``ask``, ``resume`` and ``chat``: talking to the copilot from a terminal as one rep."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path
from typing import Any, NoReturn

from copilot.auth.tokens import OboTokenBroker, dev_sign_in_rep
from copilot.cli_input import check_question, check_rep, check_thread
from copilot.decisions import parse_decisions
from copilot.errors import InvalidDecision, InvalidInput
from copilot.progress import ProgressEvent
from copilot.render import render_proposal, render_result
from copilot.runner import CopilotService, open_service
from copilot.settings import Settings
from copilot.turns import Proposal, TurnResult, args_digest, dumps

HELP = "approve | edit field=value [field=value ...] | reject <reason>   (or: a / e / r)"

MAX_DECISIONS_BYTES = 1_000_000
"""Largest ``--decisions`` accepted (inline or file): a few proposals' decisions are a few KB."""


def _progress(as_json: bool) -> Any:
    async def show(event: ProgressEvent) -> None:
        if not as_json:
            print(f"  … {event.message}", file=sys.stderr, flush=True)

    return show


def _print(result: TurnResult, as_json: bool) -> None:
    print(dumps(result) if as_json else render_result(result), flush=True)


async def ask(settings: Settings, rep: str, thread: str | None, question: str, as_json: bool) -> int:
    """One turn; stops at pending proposals and prints them with the thread id."""
    check_rep(rep)
    check_thread(thread)
    check_question(question)
    identity, tokens = await dev_sign_in_rep(settings, rep)
    async with open_service(settings) as service:
        # --thread names the conversation: it may go on in a successor thread (printed).
        result = await service.run_turn(identity, tokens, thread, question, _progress(as_json), rotate=True)
    _print(result, as_json)
    return 0


def _read_decisions_file(name: str) -> str:
    """The text of ``--decisions @name``, read with a size bound (``@/dev/zero`` ends too)."""
    where = f"--decisions @{name[:200]}"
    if not name:
        raise InvalidDecision("--decisions @ needs a file name after the @")
    try:
        with Path(name).open("rb") as file:
            data = file.read(MAX_DECISIONS_BYTES + 1)
    except IsADirectoryError as exc:
        raise InvalidDecision(f"{where}: is a directory, not a file") from exc
    except FileNotFoundError as exc:
        raise InvalidDecision(f"{where}: no such file") from exc
    except (OSError, ValueError) as exc:
        # OSError: permissions, a name too long, ...; ValueError: a NUL in the name.
        raise InvalidDecision(f"{where}: cannot be read ({_reason(exc)})") from exc
    if len(data) > MAX_DECISIONS_BYTES:
        raise InvalidDecision(f"{where}: larger than {MAX_DECISIONS_BYTES} bytes")
    try:
        # utf-8-sig: a byte-order mark (as some Windows editors write) is not an error.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidDecision(
            f"{where}: not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x})"
        ) from exc


def _reason(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _no_constants(name: str) -> NoReturn:
    # Python's json accepts NaN and Infinity; JSON (and so the CRM) does not.
    raise InvalidDecision(f"--decisions is not valid JSON: {name} is not a JSON number")


def load_decisions(raw: str) -> Any:
    """``--decisions``: a JSON list, or ``@path`` to a file holding one.

    Every way it can be unreadable (no file, a directory, not UTF-8, too large, not JSON,
    nested too deeply to parse) is an ``InvalidDecision`` naming the problem.
    """
    text = _read_decisions_file(raw[1:]) if raw.startswith("@") else raw
    if len(text) > MAX_DECISIONS_BYTES:
        raise InvalidDecision(f"--decisions is larger than {MAX_DECISIONS_BYTES} characters")
    try:
        return json.loads(text, parse_constant=_no_constants)
    except RecursionError as exc:
        # The C decoder stops at the interpreter's recursion limit and raises cleanly.
        raise InvalidDecision("--decisions is nested too deeply to be decisions") from exc
    except json.JSONDecodeError as exc:
        raise InvalidDecision(f"--decisions is not valid JSON: {exc}") from exc
    except ValueError as exc:
        # An integer longer than Python's digit limit (4300): no field takes one.
        raise InvalidDecision("--decisions holds a number with too many digits") from exc


async def resume(settings: Settings, rep: str, thread: str, decisions: str, as_json: bool) -> int:
    """Apply decisions to pending proposals (any process, any time after ``ask``)."""
    check_rep(rep)
    check_thread(thread)
    parsed = load_decisions(decisions)
    # Checked here too, so that malformed decisions fail before anything signs in or opens
    # the database (the service checks them again: it has other callers).
    parse_decisions(parsed)
    identity, tokens = await dev_sign_in_rep(settings, rep)
    async with open_service(settings) as service:
        result = await service.decide(identity, tokens, thread, parsed, _progress(as_json))
    _print(result, as_json)
    return 0


def parse_reply(reply: str, proposal: Proposal) -> dict[str, Any] | None:
    """A typed reply at the approval prompt → a decision (None = ask again)."""
    words = reply.strip()
    if not words:
        return None
    verb, _, rest = words.partition(" ")
    verb = verb.lower()
    if verb in ("a", "approve", "y", "yes"):
        return {
            "tool_call_id": proposal.tool_call_id,
            "digest": args_digest(proposal.args),
            "type": "approve",
        }
    if verb in ("r", "reject", "n", "no"):
        if not rest.strip():
            raise InvalidDecision("a rejection needs a reason, e.g. `reject wrong account`")
        return {
            "tool_call_id": proposal.tool_call_id,
            "digest": args_digest(proposal.args),
            "type": "reject",
            "reason": rest.strip(),
        }
    if verb in ("e", "edit"):
        changes: dict[str, Any] = {}
        try:
            pairs = shlex.split(rest)
        except ValueError as exc:
            # e.g. an unclosed quote: `edit stage="Negotiation`
            raise InvalidDecision(f"cannot read that edit: {exc}") from exc
        for pair in pairs:
            field, sep, value = pair.partition("=")
            if not sep or not field:
                raise InvalidDecision(f"edits look like field=value, got {pair!r}")
            changes[field.strip()] = None if value == "" else value
        if not changes:
            raise InvalidDecision("say which fields to change, e.g. `edit stage=Negotiation`")
        return {
            "tool_call_id": proposal.tool_call_id,
            "digest": args_digest(proposal.args),
            "type": "edit",
            "args": changes,
        }
    raise InvalidDecision(f"unknown reply {verb!r}: {HELP}")


async def _decide_one_by_one(
    service: CopilotService, identity: Any, tokens: OboTokenBroker, result: TurnResult, as_json: bool
) -> TurnResult:
    # Each proposal resumes its own thread (one made while others waited has a thread of its own).
    queue = [(p.thread_id or result.thread_id, p) for p in result.proposals]
    while queue:
        thread_id, proposal = queue[0]
        print(render_proposal(proposal, 1, len(queue)), flush=True)
        while True:
            try:
                reply = await _read_line(f"  {HELP}\n  decision> ")
            except EOFError:
                print("\nLeaving the proposal pending; resume later with `python -m copilot resume`.")
                return result
            try:
                decision = parse_reply(reply, proposal)
                if decision is None:
                    continue
                result = await service.decide(identity, tokens, thread_id, [decision], _progress(as_json))
                break
            except InvalidDecision as exc:
                print(f"  ! {exc.message}", flush=True)
        # What now waits on that thread (the rest of its batch, a re-proposal) comes first.
        queue = [(thread_id, p) for p in result.proposals] + [q for q in queue[1:] if q[0] != thread_id]
        if result.answer or result.outcomes:
            _print(result, as_json)
    return result


async def _read_line(prompt: str) -> str:
    """One line typed at the terminal; input that is not UTF-8 text is bad input."""
    try:
        return await asyncio.to_thread(input, prompt)
    except UnicodeDecodeError as exc:
        raise InvalidInput("the terminal sent text that is not UTF-8") from exc


async def chat(settings: Settings, rep: str, thread: str | None, as_json: bool) -> int:
    """Interactive chat; each proposal is decided on its own, in turn."""
    check_rep(rep)
    check_thread(thread)
    identity, tokens = await dev_sign_in_rep(settings, rep)
    print(f"Signed in as {identity.name or rep}. Ask about your accounts and deals; Ctrl-D to quit.")
    async with open_service(settings) as service:
        while True:
            try:
                question = await _read_line("\nyou> ")
            except EOFError:
                print()
                return 0
            if not question.strip():
                continue
            if question.strip().lower() in ("quit", "exit"):
                return 0
            try:
                check_question(question)
                result = await service.run_turn(
                    identity, tokens, thread, question, _progress(as_json), rotate=True
                )
            except (InvalidDecision, InvalidInput) as exc:
                print(f"  ! {exc.message}")
                continue
            thread = result.thread_id
            if result.answer or not result.proposals:
                _print(result, as_json)
            result = await _decide_one_by_one(service, identity, tokens, result, as_json)
