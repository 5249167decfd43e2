"""Without tracing, LangSmith's per-hook bookkeeping stays on the event loop's thread."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langsmith import set_runtime_overrides, tracing_context

# The tests may read LangSmith's internals to observe it; the product never does.
from langsmith._internal._aiter import aio_to_thread
from langsmith._runtime_overrides import get_runtime_overrides

from copilot.tracing import untraced


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    before = get_runtime_overrides().aio_to_thread
    traced, installed = untraced._tracing_in_process, untraced._installed
    untraced._tracing_in_process = False  # as in a process that never traced
    untraced._installed = False  # ... nor installed the override
    yield
    set_runtime_overrides(aio_to_thread=before)
    untraced._tracing_in_process, untraced._installed = traced, installed


async def _thread_of_bookkeeping() -> threading.Thread:
    return await aio_to_thread(contextvars.copy_context(), threading.current_thread)


async def test_an_untraced_process_runs_langsmiths_bookkeeping_on_the_loop_thread(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.delenv("LANGSMITH_TRACING", raising=False)
    monkeypatch.delenv("LANGCHAIN_TRACING_V2", raising=False)
    set_runtime_overrides()
    assert await _thread_of_bookkeeping() is not threading.current_thread(), "LangSmith's default"

    untraced.install()

    assert await _thread_of_bookkeeping() is threading.current_thread()


async def test_once_a_process_traces_the_bookkeeping_takes_langsmiths_default_path_again(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.delenv("LANGSMITH_TRACING", raising=False)
    set_runtime_overrides()
    untraced.install()

    untraced.mark_tracing()

    assert await _thread_of_bookkeeping() is not threading.current_thread()


async def test_where_langsmith_itself_enables_tracing_the_bookkeeping_takes_its_default_path(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.delenv("LANGSMITH_TRACING", raising=False)
    set_runtime_overrides()
    untraced.install()

    with tracing_context(enabled=True):
        assert await _thread_of_bookkeeping() is not threading.current_thread()
    assert await _thread_of_bookkeeping() is threading.current_thread()


async def test_an_override_someone_else_installed_after_ours_is_kept():
    async def theirs(default: Any, ctx: Any, func: Any, /, *args: Any, **kwargs: Any) -> Any:
        return "theirs"

    untraced.install()
    set_runtime_overrides(aio_to_thread=theirs)
    untraced.install()  # another untraced service opened in the same process

    assert get_runtime_overrides().aio_to_thread is theirs
