"""Run a real copilot entry point that kills itself (SIGKILL) at a chosen point of a write.

``python -m tests.adversarial.crash_launcher cli resume ...`` runs ``python -m copilot``;
``... bot serve --port P`` runs the bot dev server. ``CRASH_AT`` names the point:

``after_begin``    the key is committed in flight, the backend not yet called;
``after_backend``  the backend (CRM, mailbox, store) applied the write, nothing of ours committed;
``in_audit``       the audit row is inserted, its transaction not yet committed;
``after_done``     the key and audit row are committed, the checkpoint not yet written;
``before_card``    (bot) the decision ran to its end, the card not yet updated;
``random``         a timer fires after ``CRASH_AFTER_MS`` milliseconds, wherever the process is
                   (for the bot: counted from the decision's arrival, not from start-up).

A kill is SIGKILL to the process itself: no ``finally``, no ``except``, no flush, no
connection closed politely. That is what a host crash or an OOM kill does.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _arm_timer() -> None:
    delay = int(os.environ.get("CRASH_AFTER_MS", "1000")) / 1000
    timer = threading.Timer(delay, _die)
    timer.daemon = True
    timer.start()


def _install(point: str, target: str) -> None:
    from copilot.persistence import audit, idempotency

    if point == "after_begin":
        begin = idempotency.Claim.begin

        async def begin_then_die(self: idempotency.Claim, plan: dict[str, Any]) -> None:
            await begin(self, plan)
            _die()

        idempotency.Claim.begin = begin_then_die  # type: ignore[method-assign]
    elif point == "after_backend":
        from copilot.middleware import write_guard

        init = write_guard.WriteGuardMiddleware.__init__

        def init_with_kill(self: Any, after_commit_hook: Any = None) -> None:
            init(self, after_commit_hook=lambda key: _die())

        write_guard.WriteGuardMiddleware.__init__ = init_with_kill  # type: ignore[method-assign]
    elif point == "in_audit":
        append = audit.append

        async def append_then_die(conn: Any, entry: Any, **kwargs: Any) -> int:
            await append(conn, entry, **kwargs)
            _die()
            raise AssertionError("unreachable")

        audit.append = append_then_die
    elif point == "after_done":
        complete = idempotency.Claim.complete

        async def complete_then_die(self: idempotency.Claim, result: Any, entry: Any = None) -> Any:
            await complete(self, result, entry)
            _die()

        idempotency.Claim.complete = complete_then_die  # type: ignore[method-assign,assignment]
    elif point == "before_card":
        from bot.decision_flow import DecisionFlow

        async def die(*_: Any, **__: Any) -> None:
            _die()

        DecisionFlow.update_card = die  # type: ignore[method-assign]
    elif point == "random" and target == "bot":
        # A bot starts slower than any delay worth testing: the clock starts when the
        # rep's decision arrives, so the kill lands somewhere in (or after) the approval.
        from bot.decision_flow import DecisionFlow

        on_decision = DecisionFlow.on_decision

        async def armed(self: Any, *args: Any, **kwargs: Any) -> None:
            _arm_timer()
            await on_decision(self, *args, **kwargs)

        DecisionFlow.on_decision = armed  # type: ignore[method-assign]
    elif point == "random":
        _arm_timer()
    elif point:
        raise SystemExit(f"unknown CRASH_AT {point!r}")


def _install_proposing_model(account_id: str) -> None:
    """``CRASH_LOG_ACCOUNT``: the process's model proposes logging the rep's message as a call on
    that account, and answers once it has a result (stateless: any process continues any thread).
    For profiles the offline model does not serve yet (Dataverse's GUIDs)."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    from copilot import runner

    class Proposing(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "proposing"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Proposing:
            return self

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            last = messages[-1] if messages else None
            if isinstance(last, HumanMessage):
                call = {
                    "name": "log_activity",
                    "args": {"type": "call", "subject": str(last.content)[:200], "account_id": account_id},
                    "id": f"call_{os.urandom(6).hex()}",
                    "type": "tool_call",
                }
                message = AIMessage(content="", tool_calls=[call])
            else:
                message = AIMessage(content="Logged.")
            return ChatResult(generations=[ChatGeneration(message=message)])

    runner.build_model = lambda name: Proposing()


def main(argv: list[str]) -> int:
    target, rest = argv[0], argv[1:]
    _install(os.environ.get("CRASH_AT", ""), target)
    if os.environ.get("CRASH_LOG_ACCOUNT"):
        _install_proposing_model(os.environ["CRASH_LOG_ACCOUNT"])
    if target == "cli":
        from copilot.cli import main as cli

        return cli(rest)
    if target == "bot":
        from bot.__main__ import main as bot

        return bot(rest)
    raise SystemExit(f"unknown target {target!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
