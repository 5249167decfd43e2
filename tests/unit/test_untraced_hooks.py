"""Without tracing, LangSmith's per-hook bookkeeping stays on the event loop's thread."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langsmith._internal._aiter import aio_to_thread
from langsmith._runtime_overrides import get_runtime_overrides, set_runtime_overrides

from copilot.tracing import untraced


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    before, traced = get_runtime_overrides().aio_to_thread, untraced._tracing_in_process
    untraced._tracing_in_process = False  # as in a process that never traced
    yield
    set_runtime_overrides(aio_to_thread=before)
    untraced._tracing_in_process = traced


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


async def test_an_override_someone_else_installed_is_kept():
    async def theirs(default: Any, ctx: Any, func: Any, /, *args: Any, **kwargs: Any) -> Any:
        return "theirs"

    set_runtime_overrides(aio_to_thread=theirs)
    untraced.install()

    assert get_runtime_overrides().aio_to_thread is theirs
