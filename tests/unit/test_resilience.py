"""Retry, backoff and the circuit breaker on CRM tool calls, without any network."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.types import Command
from mcp.shared.exceptions import McpError
from mcp.types import ErrorData

from copilot.errors import UNAVAILABLE_MESSAGE, CrmUnavailable
from copilot.middleware import resilience
from copilot.middleware.resilience import (
    CircuitBreaker,
    CircuitBreakerMiddleware,
    CrmRetryMiddleware,
    backoff_delay,
    is_transient,
    retry_after,
)
from copilot.tools.crm_client import CrmCallError
from copilot.tools.mcp_http import JSONRPC_REFUSED, JSONRPC_TRANSIENT


def _mcp_error(code: int, data: Any = None) -> McpError:
    return McpError(ErrorData(code=code, message="CRM answered", data=data))


def _request(name: str = "get_account") -> ToolCallRequest:
    return ToolCallRequest(
        tool_call={"name": name, "args": {"account_id": "acc-acme"}, "id": "call_1", "type": "tool_call"},
        tool=None,
        state={},
        runtime=None,  # type: ignore[arg-type]
    )


def _ok(request: ToolCallRequest) -> ToolMessage:
    return ToolMessage(content='{"id": "acc-acme"}', name=request.tool_call["name"], tool_call_id="call_1")


class FakeHandler:
    """Raises the queued errors in order, then answers successfully; counts its calls."""

    def __init__(self, *errors: BaseException):
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self, request: ToolCallRequest) -> ToolMessage | Command[Any]:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return _ok(request)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Records every delay the retry middleware asks for, without waiting."""
    recorded: list[float] = []

    async def fake_sleep(delay: float) -> None:
        recorded.append(delay)

    monkeypatch.setattr(resilience.asyncio, "sleep", fake_sleep)
    return recorded


# --- classification ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        _mcp_error(JSONRPC_TRANSIENT),
        _mcp_error(JSONRPC_REFUSED, {"transient": True, "status": 503}),
        _mcp_error(-32603, {"transient": True}),
        CrmUnavailable("down"),
        httpx.ReadTimeout("slow"),
        httpx.ConnectTimeout("slow"),
        httpx.PoolTimeout("slow"),
        httpx.ConnectError("refused"),
        TimeoutError(),
    ],
    ids=lambda e: type(e).__name__ + (f"[{e.error.code}]" if isinstance(e, McpError) else ""),
)
def test_transient_failures_are_recognised_as_transient(exc: BaseException):
    assert is_transient(exc)


@pytest.mark.parametrize(
    "exc",
    [
        _mcp_error(JSONRPC_REFUSED, {"status": 403, "transient": False}),
        _mcp_error(-32602),
        _mcp_error(-32603, "not a dict"),
        ValueError("bad argument"),
        CrmCallError("permission_denied", "you cannot see this record"),
        RuntimeError("bug"),
    ],
    ids=lambda e: type(e).__name__ + (f"[{e.error.code}]" if isinstance(e, McpError) else ""),
)
def test_refusals_validation_errors_and_bugs_are_not_transient(exc: BaseException):
    assert not is_transient(exc)


def test_retry_after_is_read_from_the_error_data():
    assert retry_after(_mcp_error(JSONRPC_TRANSIENT, {"retry_after": 2.5})) == 2.5
    assert retry_after(_mcp_error(JSONRPC_TRANSIENT, {"retry_after": 3})) == 3.0
    assert retry_after(_mcp_error(JSONRPC_TRANSIENT, {"retry_after": None})) is None
    assert retry_after(_mcp_error(JSONRPC_TRANSIENT)) is None
    assert retry_after(CrmUnavailable("down")) is None


# --- retry --------------------------------------------------------------------------------------


async def test_a_transient_error_is_retried_until_the_call_succeeds(sleeps: list[float]):
    handler = FakeHandler(_mcp_error(JSONRPC_TRANSIENT), httpx.ReadTimeout("slow"))
    retry = CrmRetryMiddleware(max_retries=2, initial_delay=0.01, max_delay=1.0)

    result = await retry.awrap_tool_call(_request(), handler)

    assert isinstance(result, ToolMessage)
    assert result.content == '{"id": "acc-acme"}'
    assert handler.calls == 3
    assert len(sleeps) == 2


async def test_a_transient_error_is_retried_max_retries_times_then_re_raised(sleeps: list[float]):
    errors = [_mcp_error(JSONRPC_TRANSIENT, {"transient": True}) for _ in range(10)]
    handler = FakeHandler(*errors)
    retry = CrmRetryMiddleware(max_retries=3, initial_delay=0.01, max_delay=1.0)

    with pytest.raises(McpError) as raised:
        await retry.awrap_tool_call(_request(), handler)

    assert raised.value is errors[3]
    assert handler.calls == 4  # the first attempt and three retries
    assert len(sleeps) == 3


async def test_without_retries_a_transient_error_is_raised_at_once(sleeps: list[float]):
    handler = FakeHandler(CrmUnavailable("down"))
    retry = CrmRetryMiddleware(max_retries=0, initial_delay=0.01, max_delay=1.0)

    with pytest.raises(CrmUnavailable):
        await retry.awrap_tool_call(_request(), handler)

    assert handler.calls == 1
    assert sleeps == []


@pytest.mark.parametrize(
    "exc",
    [
        _mcp_error(JSONRPC_REFUSED, {"status": 403, "transient": False}),
        ValueError("bad argument"),
        CrmCallError("validation", "stage is not valid"),
    ],
    ids=["mcp-refused", "value-error", "crm-refusal"],
)
async def test_a_non_transient_error_is_never_retried(sleeps: list[float], exc: BaseException):
    handler = FakeHandler(exc, exc, exc)
    retry = CrmRetryMiddleware(max_retries=3, initial_delay=0.01, max_delay=1.0)

    with pytest.raises(type(exc)) as raised:
        await retry.awrap_tool_call(_request(), handler)

    assert raised.value is exc
    assert handler.calls == 1
    assert sleeps == []


async def test_the_wait_is_never_shorter_than_the_servers_retry_after(sleeps: list[float]):
    handler = FakeHandler(
        _mcp_error(JSONRPC_TRANSIENT, {"retry_after": 0.7}),
        _mcp_error(JSONRPC_TRANSIENT, {"retry_after": 0.4}),
    )
    retry = CrmRetryMiddleware(max_retries=2, initial_delay=0.01, max_delay=5.0)

    await retry.awrap_tool_call(_request(), handler)

    assert len(sleeps) == 2
    assert sleeps[0] >= 0.7
    assert sleeps[1] >= 0.4


async def test_a_retry_after_longer_than_max_delay_gives_up_at_once_instead_of_retrying_early(
    sleeps: list[float],
):
    handler = FakeHandler(*[_mcp_error(JSONRPC_TRANSIENT, {"retry_after": 120}) for _ in range(3)])
    retry = CrmRetryMiddleware(max_retries=3, initial_delay=2.0, max_delay=1.5)

    with pytest.raises(McpError):
        await retry.awrap_tool_call(_request(), handler)

    assert sleeps == []
    assert handler.calls == 1


async def test_backoff_delays_grow_exponentially_with_bounded_jitter(sleeps: list[float]):
    initial = 0.1
    for _ in range(20):  # jitter is random: check the bounds many times
        sleeps.clear()
        handler = FakeHandler(*[httpx.ConnectTimeout("slow") for _ in range(4)])
        retry = CrmRetryMiddleware(max_retries=4, initial_delay=initial, max_delay=100.0)

        await retry.awrap_tool_call(_request(), handler)

        assert len(sleeps) == 4
        for attempt, delay in enumerate(sleeps):
            base = initial * 2**attempt
            assert base * 0.75 <= delay <= base * 1.25
        assert sleeps == sorted(sleeps)
        assert len(set(sleeps)) == 4


async def test_backoff_is_capped_at_max_delay(sleeps: list[float]):
    handler = FakeHandler(*[httpx.ReadTimeout("slow") for _ in range(5)])
    retry = CrmRetryMiddleware(max_retries=5, initial_delay=0.5, max_delay=1.0)

    await retry.awrap_tool_call(_request(), handler)

    assert len(sleeps) == 5
    assert all(delay <= 1.0 for delay in sleeps)
    assert sleeps[-1] >= 0.75  # 0.5 * 2**4 capped to 1.0, minus at most 25% jitter


def test_without_jitter_the_delay_doubles_from_the_initial_delay_up_to_the_cap():
    delays = [
        backoff_delay(n, backoff_factor=2.0, initial_delay=0.5, max_delay=3.0, jitter=False) for n in range(5)
    ]

    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_a_backoff_factor_of_zero_waits_the_initial_delay_every_time():
    delays = {
        backoff_delay(n, backoff_factor=0.0, initial_delay=0.2, max_delay=1.0, jitter=False) for n in range(4)
    }

    assert delays == {0.2}


def test_jitter_stays_within_a_quarter_of_the_delay_either_way_and_varies():
    delays = [
        backoff_delay(2, backoff_factor=2.0, initial_delay=1.0, max_delay=10.0, jitter=True)
        for _ in range(200)
    ]

    assert all(3.0 <= d <= 5.0 for d in delays)
    assert len(set(delays)) > 100
    assert backoff_delay(0, backoff_factor=2.0, initial_delay=0.0, max_delay=1.0, jitter=True) == 0.0


# --- circuit breaker -----------------------------------------------------------------------------


def test_the_breaker_opens_after_n_consecutive_failures():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=3, reset_seconds=30, clock=clock)

    breaker.record_failure()
    breaker.record_failure()
    assert breaker.state == "closed"
    assert breaker.allow()

    breaker.record_failure()
    assert breaker.state == "open"
    assert not breaker.allow()
    clock.now += 29.9
    assert not breaker.allow()


def test_a_success_resets_the_count_of_consecutive_failures():
    breaker = CircuitBreaker(failure_threshold=3, reset_seconds=30, clock=Clock())

    breaker.record_failure()
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    breaker.record_failure()

    assert breaker.state == "closed"
    assert breaker.allow()


def test_after_reset_seconds_the_breaker_is_half_open_and_lets_a_probe_through():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=2, reset_seconds=30, clock=clock)
    breaker.record_failure()
    breaker.record_failure()

    clock.now += 30
    assert breaker.state == "half_open"
    assert breaker.allow()


def test_a_failed_probe_in_half_open_reopens_the_breaker_for_another_reset_period():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=2, reset_seconds=30, clock=clock)
    breaker.record_failure()
    breaker.record_failure()
    clock.now += 31

    breaker.record_failure()

    assert breaker.state == "open"
    assert not breaker.allow()
    clock.now += 29
    assert not breaker.allow()
    clock.now += 1
    assert breaker.state == "half_open"


def test_a_successful_probe_in_half_open_closes_the_breaker():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=2, reset_seconds=30, clock=clock)
    breaker.record_failure()
    breaker.record_failure()
    clock.now += 31

    breaker.record_success()

    assert breaker.state == "closed"
    assert breaker.allow()
    breaker.record_failure()  # one failure after closing does not reopen it
    assert breaker.state == "closed"


def _is_unavailable(result: ToolMessage | Command[Any], request: ToolCallRequest) -> bool:
    return (
        isinstance(result, ToolMessage)
        and result.status == "error"
        and "Live CRM data is unavailable" in str(result.content)
        and result.tool_call_id == request.tool_call["id"]
        and result.name == request.tool_call["name"]
    )


async def test_an_open_breaker_answers_unavailable_without_calling_the_crm():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, reset_seconds=30, clock=clock)
    breaker.record_failure()
    handler = FakeHandler()
    middleware = CircuitBreakerMiddleware(breaker, crm_tools={"get_account"})
    request = _request("get_account")

    result = await middleware.awrap_tool_call(request, handler)

    assert _is_unavailable(result, request)
    assert UNAVAILABLE_MESSAGE in str(result.content if isinstance(result, ToolMessage) else "")
    assert handler.calls == 0


async def test_a_transient_failure_becomes_the_unavailable_answer_and_counts_towards_opening():
    breaker = CircuitBreaker(failure_threshold=2, reset_seconds=30, clock=Clock())
    middleware = CircuitBreakerMiddleware(breaker, crm_tools={"get_account"})
    request = _request("get_account")

    first = await middleware.awrap_tool_call(request, FakeHandler(_mcp_error(JSONRPC_TRANSIENT)))
    assert _is_unavailable(first, request)
    assert breaker.failures == 1
    assert breaker.state == "closed"

    second = await middleware.awrap_tool_call(request, FakeHandler(CrmUnavailable("down")))
    assert _is_unavailable(second, request)
    assert breaker.state == "open"


async def test_a_successful_crm_call_passes_through_and_resets_the_failure_count():
    breaker = CircuitBreaker(failure_threshold=2, reset_seconds=30, clock=Clock())
    breaker.record_failure()
    middleware = CircuitBreakerMiddleware(breaker, crm_tools={"get_account"})

    result = await middleware.awrap_tool_call(_request(), FakeHandler())

    assert isinstance(result, ToolMessage)
    assert result.content == '{"id": "acc-acme"}'
    assert breaker.failures == 0


async def test_the_breaker_middleware_re_raises_non_transient_errors_without_counting_them():
    breaker = CircuitBreaker(failure_threshold=1, reset_seconds=30, clock=Clock())
    middleware = CircuitBreakerMiddleware(breaker, crm_tools={"get_account"})
    refused = _mcp_error(JSONRPC_REFUSED, {"status": 401, "transient": False})

    with pytest.raises(McpError):
        await middleware.awrap_tool_call(_request(), FakeHandler(refused))
    with pytest.raises(ValueError, match="bad"):
        await middleware.awrap_tool_call(_request(), FakeHandler(ValueError("bad")))

    assert breaker.failures == 0
    assert breaker.state == "closed"


async def test_tools_outside_the_crm_bypass_the_breaker():
    breaker = CircuitBreaker(failure_threshold=1, reset_seconds=30, clock=Clock())
    breaker.record_failure()
    assert breaker.state == "open"
    middleware = CircuitBreakerMiddleware(breaker, crm_tools={"get_account", "log_activity"})
    local = _request("get_preferences")

    handler = FakeHandler()
    result = await middleware.awrap_tool_call(local, handler)
    assert isinstance(result, ToolMessage)
    assert handler.calls == 1

    # Their failures are neither converted nor counted.
    fresh = CircuitBreaker(failure_threshold=1, reset_seconds=30, clock=Clock())
    with pytest.raises(CrmUnavailable):
        await CircuitBreakerMiddleware(fresh, crm_tools={"get_account"}).awrap_tool_call(
            local, FakeHandler(CrmUnavailable("graph down"))
        )
    assert fresh.state == "closed"
    assert fresh.failures == 0


async def test_a_half_open_breaker_lets_only_one_probe_through_at_a_time():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, reset_seconds=30, clock=clock)
    breaker.record_failure()
    clock.now += 30
    middleware = CircuitBreakerMiddleware(breaker, crm_tools={"get_account"})
    release = asyncio.Event()
    calls = 0

    async def slow_probe(request: ToolCallRequest) -> ToolMessage:
        nonlocal calls
        calls += 1
        await release.wait()
        return _ok(request)

    first = asyncio.create_task(middleware.awrap_tool_call(_request(), slow_probe))
    await asyncio.sleep(0)  # the probe is now in flight
    second = asyncio.create_task(middleware.awrap_tool_call(_request(), slow_probe))
    await asyncio.sleep(0.01)
    release.set()
    results = await asyncio.gather(first, second)

    assert calls == 1
    assert _is_unavailable(results[1], _request())


@pytest.mark.parametrize("failure", [RuntimeError("bug"), _mcp_error(-32002, {"status": 401})])
async def test_a_half_open_probe_that_fails_for_another_reason_does_not_jam_the_breaker(failure):
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, reset_seconds=10, clock=clock)
    breaker.record_failure()
    clock.now += 11
    middleware = CircuitBreakerMiddleware(breaker, {"get_account"})

    with pytest.raises(type(failure)):
        await middleware.awrap_tool_call(_request(), FakeHandler(failure))

    assert breaker.probing is False
    result = await middleware.awrap_tool_call(_request(), FakeHandler())
    assert isinstance(result, ToolMessage)
    assert result.status != "error"


def test_retry_after_is_read_from_a_crm_unavailable_that_carries_the_crms_hint():
    assert retry_after(CrmUnavailable("throttled", retry_after=4.0)) == 4.0
    assert retry_after(CrmUnavailable("down")) is None


async def test_a_throttled_web_api_write_waits_at_least_its_retry_after_before_retrying(sleeps: list[float]):
    # The Dataverse writer raises CrmUnavailable(retry_after=...) on a 429: the retry honours it.
    handler = FakeHandler(CrmUnavailable("HTTP 429", retry_after=0.9))
    retry = CrmRetryMiddleware(max_retries=2, initial_delay=0.01, max_delay=5.0)

    await retry.awrap_tool_call(_request(), handler)

    assert handler.calls == 2
    assert len(sleeps) == 1
    assert sleeps[0] >= 0.9
