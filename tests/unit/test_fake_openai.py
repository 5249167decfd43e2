"""The fake OpenAI server refuses what the real one refuses, through the real openai client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.fake_openai import API_KEY, FakeOpenAI, answer, call, rate_limited, tool_calls


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def _client(fake: FakeOpenAI, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.base_url, api_key=API_KEY, max_retries=0, **options)


def test_a_tool_call_left_unanswered_is_a_400_as_on_the_real_service(fake: FakeOpenAI):
    fake.script(answer("never sent"))
    messages: list[Any] = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_account", "arguments": "{}"}}
            ],
        },
        {"role": "user", "content": "and?"},
    ]
    with pytest.raises(openai.BadRequestError, match="call_1"):
        _client(fake).chat.completions.create(model="m", messages=messages)
    with pytest.raises(openai.BadRequestError, match="must be a response"):
        _client(fake).chat.completions.create(
            model="m", messages=[{"role": "tool", "tool_call_id": "call_9", "content": "x"}]
        )


def test_stream_options_without_streaming_and_an_exhausted_script_are_refused(fake: FakeOpenAI):
    with pytest.raises(openai.BadRequestError, match="stream_options"):
        _client(fake).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream_options={"include_usage": True}
        )
    with pytest.raises(openai.BadRequestError, match="script is exhausted"):
        _client(fake).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])


def test_a_request_without_a_key_or_an_azure_request_without_an_api_version_is_refused(fake: FakeOpenAI):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(f"{fake.base_url}/chat/completions", json=body).status_code == 401
    azure = f"{fake.url}/openai/deployments/dep/chat/completions"
    assert httpx.post(azure, json=body, headers={"api-key": API_KEY}).status_code == 404
    fake.script(answer("hi"))
    ok = httpx.post(azure, json=body, headers={"api-key": API_KEY}, params={"api-version": "2024-10-21"})
    assert ok.json()["choices"][0]["message"]["content"] == "hi"


def test_a_rate_limit_carries_retry_after_and_the_error_body(fake: FakeOpenAI):
    fake.script(rate_limited(retry_after_seconds=7, retry_after_ms=7000))
    with pytest.raises(openai.RateLimitError) as limited:
        _client(fake).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert limited.value.response.headers["retry-after"] == "7"
    assert limited.value.response.headers["retry-after-ms"] == "7000"
    assert limited.value.code == "rate_limit_exceeded"


def test_streamed_parallel_tool_calls_reassemble_with_a_final_usage_chunk(fake: FakeOpenAI):
    fake.script(
        tool_calls(call("get_account", account_id="acc-1"), call("list_contacts", account_id="acc-1"))
    )
    chunks = list(
        _client(fake).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    arguments: dict[int, str] = {}
    names: dict[int, str] = {}
    for chunk in chunks[:-1]:
        for delta in chunk.choices[0].delta.tool_calls or []:
            if delta.function and delta.function.name:
                names[delta.index] = delta.function.name
            arguments[delta.index] = arguments.get(delta.index, "") + (
                delta.function.arguments if delta.function and delta.function.arguments else ""
            )
    assert names == {0: "get_account", 1: "list_contacts"}
    assert arguments == {0: '{"account_id": "acc-1"}', 1: '{"account_id": "acc-1"}'}
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens > 0
