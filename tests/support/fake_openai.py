"""A local HTTP server speaking the OpenAI chat-completions wire protocol, scripted per test.

Stands in for the LLM provider (OpenAI, Azure OpenAI, or any OpenAI-compatible server
such as vLLM, llama.cpp's server or Ollama), which cannot be reached here. It is not a
model: each test scripts what it answers, as a queue of replies or a policy function of
the request, and asserts on every request body it recorded.

What it speaks, as the real services do:

* ``POST /v1/chat/completions`` (OpenAI and compatible servers; ``Authorization: Bearer``)
  and ``POST /openai/deployments/{deployment}/chat/completions?api-version=...`` (Azure
  OpenAI; ``api-key`` header);
* non-streamed answers (``chat.completion``) and streamed ones (``text/event-stream`` of
  ``data:`` ``chat.completion.chunk`` lines, content and tool-call argument deltas, a final
  usage chunk when ``stream_options.include_usage``, then ``data: [DONE]``);
* tool calls, several in one message (parallel), and ``usage``;
* failures with the real error body: 429 with ``Retry-After`` (and Azure's
  ``retry-after-ms``), 500, and the 400s a real server gives a malformed conversation
  (a tool call left unanswered, a tool result answering no call).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.threaded_server import ThreadedServer

API_KEY = "fake-openai-key"
"""The key tests configure; any non-empty key is accepted (the header's presence is checked)."""

_OTHER_PROVIDER_SETTINGS = (
    "AZURE_OPENAI_ENDPOINT",
    "OPENAI_API_VERSION",
    "AZURE_OPENAI_API_KEY",
    "OPENAI_API_BASE",
)


def use_openai_at(monkeypatch: pytest.MonkeyPatch, server: FakeOpenAI) -> FakeOpenAI:
    """OpenAI (or any OpenAI-compatible server) configured the documented way, at ``server``:
    ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``, with no Azure or legacy setting left to win."""
    for name in _OTHER_PROVIDER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    return server


# --- what a test scripts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """One function call the model makes."""

    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")
    raw_arguments: str | None = None
    """Sent instead of ``arguments`` as the wire's argument string: malformed JSON, as small
    models and truncated generations produce."""

    @property
    def wire_arguments(self) -> str:
        return self.raw_arguments if self.raw_arguments is not None else json.dumps(self.arguments)


@dataclass(frozen=True)
class Completion:
    """An assistant message: text, tool calls, or both; usage as the server reports it."""

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    refusal: str | None = None
    """OpenAI's ``message.refusal`` (structured-output models refuse there, content null)."""
    prompt_tokens: int | None = None
    """``None``: a rough count of the request (about four characters a token)."""
    completion_tokens: int | None = None
    finish: str | None = None
    """``finish_reason`` as sent (``"length"``: cut at the token limit); ``None``: from the content."""

    @property
    def finish_reason(self) -> str:
        if self.finish is not None:
            return self.finish
        return "tool_calls" if self.tool_calls else "stop"


@dataclass(frozen=True)
class Failure:
    """An error answer with the OpenAI error body."""

    status: int
    message: str
    code: str | None = None
    retry_after_seconds: int | None = None
    """Sent as ``Retry-After``."""
    retry_after_ms: int | None = None
    """Sent as ``retry-after-ms`` (Azure OpenAI sends it; the openai client prefers it)."""


Reply = Completion | Failure
Policy = Callable[["ChatRequest"], Reply]


def call(name: str, **arguments: Any) -> ToolCall:
    """A tool call with a fresh id."""
    return ToolCall(name, arguments)


def answer(text: str) -> Completion:
    """A final text answer."""
    return Completion(content=text)


def tool_calls(*calls: ToolCall) -> Completion:
    """One assistant message carrying ``calls`` (several = parallel tool calls)."""
    return Completion(tool_calls=calls)


def rate_limited(retry_after_seconds: int = 1, retry_after_ms: int | None = None) -> Failure:
    return Failure(
        429,
        "Rate limit reached for requests. Please try again later.",
        code="rate_limit_exceeded",
        retry_after_seconds=retry_after_seconds,
        retry_after_ms=retry_after_ms,
    )


def server_error() -> Failure:
    return Failure(500, "The server had an error while processing your request. Sorry about that!")


# --- what it records -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatRequest:
    """One chat-completions request as it arrived."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]
    """Lower-cased names."""
    body: dict[str, Any]
    deployment: str | None
    """The Azure deployment named in the path; ``None`` on ``/v1``."""

    @property
    def model(self) -> str:
        """The deployment (Azure), else the body's ``model``."""
        return self.deployment or str(self.body.get("model", ""))

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    @property
    def system_prompt(self) -> str:
        """The system (or developer) messages' text."""
        return "\n".join(
            _text(m.get("content")) for m in self.messages if m.get("role") in ("system", "developer")
        )

    @property
    def tools(self) -> dict[str, dict[str, Any]]:
        """The offered functions by name (their ``function`` objects)."""
        return {t["function"]["name"]: t["function"] for t in self.body.get("tools", [])}

    @property
    def streamed(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def tool_choice(self) -> Any:
        """The body's ``tool_choice``: ``None``, ``"auto"``, ``"required"`` or a named function."""
        return self.body.get("tool_choice")

    @property
    def forced_function(self) -> str | None:
        """The function ``tool_choice`` names, if it names one."""
        choice = self.tool_choice
        if isinstance(choice, dict):
            return str((choice.get("function") or {}).get("name") or "") or None
        return None

    def latest_user_text(self) -> str:
        """The text of the last ``user`` message (the rep's question, or a check's prompt)."""
        users = [m for m in self.messages if m.get("role") == "user"]
        return _text(users[-1].get("content")) if users else ""

    def turn_tool_results(self) -> list[dict[str, Any]]:
        """The ``tool`` messages since the last ``user`` message (this question's results)."""
        results: list[dict[str, Any]] = []
        for message in self.messages:
            if message.get("role") == "user":
                results = []
            elif message.get("role") == "tool":
                results.append(message)
        return results

    def tool_results(self) -> list[dict[str, Any]]:
        """The ``tool`` messages, in order."""
        return [m for m in self.messages if m.get("role") == "tool"]

    def tool_result_text(self) -> str:
        return "\n".join(_text(m.get("content")) for m in self.tool_results())


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


# --- the server ------------------------------------------------------------------------------------


class FakeOpenAI:
    """The fake server: ``with FakeOpenAI() as fake: fake.script(...)``.

    ``fake.base_url`` is the OpenAI base (``OPENAI_BASE_URL``), ``fake.url`` the Azure
    endpoint (``AZURE_OPENAI_ENDPOINT``). Replies come from the script queue first (each
    entry a reply or a function of the request), then from ``policy``; with neither, the
    request is answered 400 "script exhausted" so the test fails visibly.
    """

    def __init__(self, policy: Policy | None = None):
        self.policy = policy
        self.requests: list[ChatRequest] = []
        self._script: deque[Reply | Policy] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server = ThreadedServer(self._app())

    # lifecycle
    def __enter__(self) -> FakeOpenAI:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    @property
    def url(self) -> str:
        return self._server.url

    @property
    def base_url(self) -> str:
        return f"{self._server.url}/v1"

    # scripting
    def script(self, *replies: Reply | Policy) -> None:
        """Append replies (or functions of the request) to answer the next requests in order."""
        with self._lock:
            self._script.extend(replies)

    # HTTP
    def _app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._openai, methods=["POST"]),
                Route("/openai/deployments/{deployment}/chat/completions", self._azure, methods=["POST"]),
            ]
        )

    async def _openai(self, request: Request) -> Response:
        if not request.headers.get("authorization", "").startswith("Bearer "):
            return _error(401, "You didn't provide an API key.", code="invalid_api_key")
        return await self._chat(request, deployment=None)

    async def _azure(self, request: Request) -> Response:
        if not request.headers.get("api-key") and not request.headers.get("authorization"):
            return _error(
                401, "Access denied due to missing subscription key.", code="401", kind="invalid_request"
            )
        if not request.query_params.get("api-version"):
            return _error(404, "Resource not found", code="404", kind="invalid_request")
        return await self._chat(request, deployment=request.path_params["deployment"])

    async def _chat(self, request: Request, *, deployment: str | None) -> Response:
        try:
            body = json.loads(await request.body())
        except json.JSONDecodeError:
            return _error(400, "We could not parse the JSON body of your request.")
        if not isinstance(body, dict):
            return _error(400, "The request body must be a JSON object.")
        recorded = ChatRequest(
            path=request.url.path,
            query=dict(request.query_params),
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            deployment=deployment,
        )
        with self._lock:
            self.requests.append(recorded)
        problem = _protocol_problem(body, azure=deployment is not None)
        if problem is not None:
            return _error(400, problem, param="messages")
        reply = self._next(recorded)
        if isinstance(reply, Failure):
            return _failure(reply)
        completion_id = f"chatcmpl-{next(self._ids)}"
        if recorded.streamed:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(
                _chunks(completion_id, recorded, reply, include_usage=include_usage),
                media_type="text/event-stream",
            )
        return JSONResponse(_completion(completion_id, recorded, reply))

    def _next(self, request: ChatRequest) -> Reply:
        with self._lock:
            step = self._script.popleft() if self._script else None
        if step is None and self.policy is not None:
            step = self.policy
        if step is None:
            return Failure(400, "fake OpenAI server: the test's script is exhausted", code="script_exhausted")
        return step(request) if callable(step) else step


# --- the wire format -------------------------------------------------------------------------------


def _protocol_problem(body: dict[str, Any], *, azure: bool) -> str | None:
    """What a real server refuses about a conversation (``None``: acceptable)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array."
    if not azure and not isinstance(body.get("model"), str):
        # Azure names the deployment in the path; OpenAI needs the model in the body.
        return "you must provide a model parameter"
    if body.get("stream_options") is not None and not body.get("stream"):
        return "The 'stream_options' parameter is only allowed when 'stream' is enabled."
    pending: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"Invalid value for 'messages[{i}].role'."
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                return (
                    f"Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                    f"message with 'tool_calls' (messages[{i}], tool_call_id {call_id!r})."
                )
            pending.discard(call_id)
            continue
        if pending:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages responding "
                f"to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                f"{', '.join(sorted(pending))}"
            )
        if role == "assistant":
            for tool_call in message.get("tool_calls") or []:
                pending.add(tool_call["id"])
    return None


def _tokens(value: Any) -> int:
    return max(1, len(json.dumps(value)) // 4)


def _usage(request: ChatRequest, reply: Completion) -> dict[str, int]:
    prompt = reply.prompt_tokens if reply.prompt_tokens is not None else _tokens(request.body)
    completion = (
        reply.completion_tokens
        if reply.completion_tokens is not None
        else _tokens([reply.content, [(c.name, c.arguments) for c in reply.tool_calls]])
    )
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _wire_call(tool_call: ToolCall) -> dict[str, Any]:
    return {
        "id": tool_call.id,
        "type": "function",
        "function": {"name": tool_call.name, "arguments": tool_call.wire_arguments},
    }


def _completion(completion_id: str, request: ChatRequest, reply: Completion) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": reply.refusal}
    if reply.tool_calls:
        message["tool_calls"] = [_wire_call(c) for c in reply.tool_calls]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}],
        "usage": _usage(request, reply),
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


async def _chunks(
    completion_id: str, request: ChatRequest, reply: Completion, *, include_usage: bool
) -> AsyncIterator[bytes]:
    def chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> bytes:
        payload: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": request.model,
            "system_fingerprint": None,
            "choices": choices,
        }
        if include_usage:
            payload["usage"] = usage
        return f"data: {json.dumps(payload)}\n\n".encode()

    def delta(fields: dict[str, Any], finish_reason: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": fields, "logprobs": None, "finish_reason": finish_reason}]

    yield chunk(delta({"role": "assistant", "content": ""}))
    if reply.refusal:
        yield chunk(delta({"refusal": reply.refusal}))
    if reply.content:
        for piece in _pieces(reply.content, 7):
            yield chunk(delta({"content": piece}))
    for index, tool_call in enumerate(reply.tool_calls):
        yield chunk(
            delta(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": tool_call.id,
                            "type": "function",
                            "function": {"name": tool_call.name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        for piece in _pieces(tool_call.wire_arguments, 9):
            yield chunk(delta({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    yield chunk(delta({}, reply.finish_reason))
    if include_usage:
        yield chunk([], _usage(request, reply))
    yield b"data: [DONE]\n\n"


def _error(
    status: int,
    message: str,
    *,
    code: str | None = None,
    kind: str = "invalid_request_error",
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _failure(failure: Failure) -> JSONResponse:
    headers: dict[str, str] = {}
    if failure.retry_after_seconds is not None:
        headers["retry-after"] = str(failure.retry_after_seconds)
    if failure.retry_after_ms is not None:
        headers["retry-after-ms"] = str(failure.retry_after_ms)
    kind = {429: "requests", 500: "server_error"}.get(failure.status, "invalid_request_error")
    return _error(failure.status, failure.message, code=failure.code, kind=kind, headers=headers)
