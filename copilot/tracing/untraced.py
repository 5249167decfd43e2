"""Keep LangSmith's per-hook bookkeeping on the event loop in a process that traces nothing.

LangChain's ``create_agent`` wraps every middleware ``wrap_*`` hook in LangSmith's
``@traceable``. With tracing off it still hands each call's run set-up and run end to
the default thread pool (``langsmith._internal._aiter.aio_to_thread``): two thread hops
per hook, about thirty per turn, each a wake-up of the loop from another thread while
the two fight for the GIL. Those functions then only decide that nothing is traced.

LangSmith's own hook for runtimes without ``run_in_executor`` (``set_runtime_overrides``)
lets them run inline instead, in the same ``contextvars`` context. :func:`install` sets
it when this process has no tracing (``open_tracing`` with ``LANGSMITH_TRACING`` off);
once any :class:`~copilot.tracing.runs.Tracing` with a client exists in the process, or
LangSmith's environment enables tracing, every call takes LangSmith's default path again
(a traced run's bookkeeping can do more than decide). What is traced never changes, only
which thread runs the bookkeeping.

:func:`hooks_untraced` goes one step further where it can: an agent compiled while the
process traces nothing gets its middleware hooks without the ``@traceable`` wrappers at all
(even inline, each wrapper's set-up cost about 0.15 ms per hook call, a dozen per turn). An
agent is compiled per service (``CopilotService._compiled``), after its tracing was set up,
so a process that traces compiles its agents with the wrappers.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from langsmith import utils as ls_utils
from langsmith._runtime_overrides import get_runtime_overrides, set_runtime_overrides

_tracing_in_process = False


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
    """Run LangSmith's untraced bookkeeping inline (unless someone installed an override already)."""
    if get_runtime_overrides().aio_to_thread is None:
        set_runtime_overrides(aio_to_thread=_inline_unless_tracing)


def _not_traced(*args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def unwrapped(func: Callable[..., Any]) -> Callable[..., Any]:
        return func

    return unwrapped


@contextmanager
def hooks_untraced() -> Iterator[None]:
    """While compiling an agent in a process that traces nothing: middleware hooks unwrapped."""
    if _tracing_in_process or ls_utils.tracing_is_enabled():
        yield
        return
    from langchain.agents import factory

    wrapper = factory.traceable
    factory.traceable = _not_traced  # type: ignore[assignment]
    try:
        yield
    finally:
        factory.traceable = wrapper
