"""Keep LangSmith's per-hook bookkeeping on the event loop in a process that traces nothing.

LangChain's ``create_agent`` wraps every middleware ``wrap_*`` hook in LangSmith's
``@traceable``. With tracing off, each call of a wrapped hook still hands its run set-up and
run end to the default thread pool: two thread hops per hook, about thirty per turn, each a
wake-up of the loop from another thread while the two fight for the GIL. Those functions
then only decide that nothing is traced.

LangSmith's public hook for runtimes without ``run_in_executor``
(``langsmith.set_runtime_overrides``) lets them run inline instead, in the same
``contextvars`` context. :func:`install` sets it when this process has no tracing
(``open_tracing`` with ``LANGSMITH_TRACING`` off); once any
:class:`~copilot.tracing.runs.Tracing` with a client exists in the process, or LangSmith's
environment enables tracing (``langsmith.utils.tracing_is_enabled``), every call takes
LangSmith's default path again (a traced run's bookkeeping can do more than decide). What is
traced never changes, only which thread runs the bookkeeping.

The wrappers themselves stay, traced or not: LangChain has no public way to compile an agent
without them, and replacing ``langchain.agents.factory``'s ``traceable`` while compiling (as
this module once did) rewrote another package's global for every thread of the process. In
an untraced process each wrapped hook call therefore still pays its inline set-up (see
docs/ARCHITECTURE.md, "What a queued turn costs").
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

import langsmith
from langsmith import utils as ls_utils

_tracing_in_process = False
_installed = False


def mark_tracing() -> None:
    """A tracing client exists in this process: LangSmith's default path from now on."""
    global _tracing_in_process
    _tracing_in_process = True


async def _inline_unless_tracing(
    default: Callable[..., Awaitable[Any]],
    ctx: contextvars.Context,
    func: Callable[..., Any],
    /,
    *args: Any,
    **kwargs: Any,
) -> Any:
    if _tracing_in_process or ls_utils.tracing_is_enabled():
        return await default(ctx, func, *args, **kwargs)
    return ctx.run(func, *args, **kwargs)


def install() -> None:
    """Run LangSmith's untraced bookkeeping inline: installed once per process.

    LangSmith offers no public way to read the override in place, so this never installs
    twice: an override set after the first call (a runtime of its own) is not replaced by a
    later one. One set before the first call is replaced; the copilot sets none.
    """
    global _installed
    if not _installed:
        langsmith.set_runtime_overrides(aio_to_thread=_inline_unless_tracing)
        _installed = True
