"""``ask``, ``resume`` and ``chat``: talking to the copilot from a terminal as one rep."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from copilot.auth.tokens import OboTokenBroker, dev_sign_in, identity_from_assertion
from copilot.errors import InvalidDecision
from copilot.progress import ProgressEvent
from copilot.render import render_proposal, render_result
from copilot.runner import CopilotService, Proposal, TurnResult, dumps, open_service
from copilot.settings import Settings

HELP = "approve | edit field=value [field=value ...] | reject <reason>   (or: a / e / r)"


async def _sign_in(settings: Settings, rep: str) -> tuple[Any, OboTokenBroker]:
    assertion = await dev_sign_in(settings, rep)
    identity = identity_from_assertion(assertion)
    return identity, OboTokenBroker(settings, identity, assertion)


def _progress(as_json: bool) -> Any:
    async def show(event: ProgressEvent) -> None:
        if not as_json:
            print(f"  … {event.message}", file=sys.stderr, flush=True)

    return show


def _print(result: TurnResult, as_json: bool) -> None:
    print(dumps(result) if as_json else render_result(result), flush=True)


async def ask(settings: Settings, rep: str, thread: str | None, question: str, as_json: bool) -> int:
    """One turn; stops at pending proposals and prints them with the thread id."""
    identity, tokens = await _sign_in(settings, rep)
    async with open_service(settings) as service:
        result = await service.run_turn(identity, tokens, thread, question, _progress(as_json))
    _print(result, as_json)
    return 0


def load_decisions(raw: str) -> Any:
    """``--decisions``: a JSON list, or ``@path`` to a file holding one."""
    text = Path(raw[1:]).read_text(encoding="utf-8") if raw.startswith("@") else raw
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidDecision(f"--decisions is not valid JSON: {exc}") from exc


async def resume(settings: Settings, rep: str, thread: str, decisions: str, as_json: bool) -> int:
    """Apply decisions to pending proposals (any process, any time after ``ask``)."""
    parsed = load_decisions(decisions)
    identity, tokens = await _sign_in(settings, rep)
    async with open_service(settings) as service:
        result = await service.resume(identity, tokens, thread, parsed, _progress(as_json))
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
        return {"tool_call_id": proposal.tool_call_id, "type": "approve"}
    if verb in ("r", "reject", "n", "no"):
        if not rest.strip():
            raise InvalidDecision("a rejection needs a reason, e.g. `reject wrong account`")
        return {"tool_call_id": proposal.tool_call_id, "type": "reject", "reason": rest.strip()}
    if verb in ("e", "edit"):
        changes: dict[str, Any] = {}
        for pair in shlex.split(rest):
            field, sep, value = pair.partition("=")
            if not sep or not field:
                raise InvalidDecision(f"edits look like field=value, got {pair!r}")
            changes[field.strip()] = None if value == "" else value
        if not changes:
            raise InvalidDecision("say which fields to change, e.g. `edit stage=Negotiation`")
        return {"tool_call_id": proposal.tool_call_id, "type": "edit", "args": changes}
    raise InvalidDecision(f"unknown reply {verb!r}: {HELP}")


async def _decide_one_by_one(
    service: CopilotService, identity: Any, tokens: OboTokenBroker, result: TurnResult, as_json: bool
) -> TurnResult:
    while result.proposals:
        proposal = result.proposals[0]
        print(render_proposal(proposal, 1, len(result.proposals)), flush=True)
        while True:
            try:
                reply = await asyncio.to_thread(input, f"  {HELP}\n  decision> ")
            except EOFError:
                print("\nLeaving the proposal pending; resume later with `python -m copilot resume`.")
                return result
            try:
                decision = parse_reply(reply, proposal)
                if decision is None:
                    continue
                result = await service.resume(
                    identity, tokens, result.thread_id, [decision], _progress(as_json)
                )
                break
            except InvalidDecision as exc:
                print(f"  ! {exc.message}", flush=True)
        if result.answer or result.outcomes:
            _print(result, as_json)
    return result


async def chat(settings: Settings, rep: str, thread: str | None, as_json: bool) -> int:
    """Interactive chat; each proposal is decided on its own, in turn."""
    identity, tokens = await _sign_in(settings, rep)
    print(f"Signed in as {identity.name or rep}. Ask about your accounts and deals; Ctrl-D to quit.")
    async with open_service(settings) as service:
        while True:
            try:
                question = await asyncio.to_thread(input, "\nyou> ")
            except EOFError:
                print()
                return 0
            if not question.strip():
                continue
            if question.strip().lower() in ("quit", "exit"):
                return 0
            try:
                result = await service.run_turn(identity, tokens, thread, question, _progress(as_json))
            except InvalidDecision as exc:
                print(f"  ! {exc.message}")
                continue
            thread = result.thread_id
            if result.answer or not result.proposals:
                _print(result, as_json)
            result = await _decide_one_by_one(service, identity, tokens, result, as_json)
