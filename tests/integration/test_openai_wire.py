"""The copilot with a real model client: langchain-openai against a local OpenAI-protocol server.

No model API is reachable here, so ``tests/support/fake_openai.py`` stands in for the
provider: a real HTTP server speaking the chat-completions wire protocol (OpenAI's
``/v1`` and Azure OpenAI's deployment path), scripted per test. Everything else is
real: ``COPILOT_MODEL`` through ``init_chat_model`` to ``ChatOpenAI`` /
``AzureChatOpenAI`` and the openai client, PostgreSQL, the sandbox CRM over MCP with the
rep's OBO token (through a recording pass-through, ``tests/support/mcp_recorder.py``,
where a test needs to see tool calls overlap).
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.chat_models import init_chat_model
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_openai import AzureChatOpenAI, ChatOpenAI

from copilot.agent_tools.model_tools import write_tools
from copilot.errors import ConfigurationError
from copilot.middleware.limits import LIMIT_MESSAGE
from copilot.prompts import CORE
from copilot.runner import CopilotService
from copilot.settings import Settings
from copilot.turns import TurnResult
from functions.host import get_host
from tests.integration.test_function_app import (  # noqa: F401 - fixtures used by the Functions tests
    Teams,
    azurite,
    connector,
    deployed_function_app,
    dequeue,
    sign_in_with_sso,
    user_function,
)
from tests.support.copilot_env import Rep, service, sign_in
from tests.support.copilot_env import copilot_settings as make_settings
from tests.support.fake_openai import (
    API_KEY,
    ChatRequest,
    Completion,
    Failure,
    FakeOpenAI,
    Reply,
    answer,
    call,
    rate_limited,
    server_error,
    tool_calls,
    use_openai_at,
)
from tests.support.mcp_recorder import McpRecorder
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

API_VERSION = "2024-10-21"
DEPLOYMENT = "copilot-gpt-4-1"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def openai_env(monkeypatch: pytest.MonkeyPatch, fake: FakeOpenAI) -> FakeOpenAI:
    """OpenAI (or any OpenAI-compatible server) configured the documented way: OPENAI_BASE_URL."""
    return use_openai_at(monkeypatch, fake)


def azure_environment(fake: FakeOpenAI) -> dict[str, str]:
    """Azure OpenAI configured the documented way, at the fake server."""
    return {
        "AZURE_OPENAI_ENDPOINT": fake.url,
        "OPENAI_API_VERSION": API_VERSION,
        "AZURE_OPENAI_API_KEY": API_KEY,
    }


@pytest.fixture
def azure_env(monkeypatch: pytest.MonkeyPatch, fake: FakeOpenAI) -> FakeOpenAI:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in azure_environment(fake).items():
        monkeypatch.setenv(name, value)
    return fake


@pytest.fixture
def recorder(sandbox: SandboxProcess) -> Iterator[McpRecorder]:
    with McpRecorder(sandbox.settings.mcp_url) as running:
        yield running


def _settings(base: Settings, sandbox: SandboxProcess, **overrides: Any) -> Settings:
    assert base.database_url is not None
    return make_settings(base.database_url.get_secret_value(), sandbox, **overrides)


async def _ask(svc: CopilotService, rep: Rep, text: str) -> TurnResult:
    return await svc.run_turn(rep.identity, rep.broker, None, text)


async def _messages(svc: CopilotService, thread_id: str) -> list[BaseMessage]:
    saved = await svc.saver.aget_tuple({"configurable": {"thread_id": thread_id}})
    assert saved is not None
    messages: list[BaseMessage] = saved.checkpoint["channel_values"]["messages"]
    return messages


def _answer_citing_acme(request: ChatRequest) -> Reply:
    """A model that read the account before answering: cites what its tool results hold."""
    assert "acc-acme" in request.tool_result_text(), "the tool results reach the model"
    return answer("Acme Corporation [acc-acme] is your account.")


# --- init_chat_model builds the real client; prompt and tools are sent ---------------------------


async def test_an_openai_model_setting_sends_the_system_prompt_and_every_tool_schema_to_the_base_url(
    openai_env: FakeOpenAI, copilot_settings: Settings, sandbox: SandboxProcess
):
    fake = openai_env
    settings = _settings(
        copilot_settings, sandbox, COPILOT_MODEL="openai:gpt-test", COPILOT_TOOL_SELECTION="all"
    )
    fake.script(
        tool_calls(call("get_account", account_id="acc-acme")),
        lambda request: Completion(
            content=_answer_citing_acme(request).content,  # type: ignore[union-attr]
            prompt_tokens=3210,
            completion_tokens=12,
        ),
    )
    rep = await sign_in(settings, "alex")
    async with service(settings) as svc:
        assert isinstance(svc.model, ChatOpenAI)
        assert not isinstance(svc.model, AzureChatOpenAI)
        result = await _ask(svc, rep, "tell me about Acme")
        messages = await _messages(svc, result.thread_id)

    assert result.answer == "Acme Corporation [acc-acme] is your account."
    assert result.citations == ["acc-acme"]
    first, second = fake.requests
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == f"Bearer {API_KEY}"
    assert first.model == "gpt-test"
    # The system prompt's fixed rules, then the rep's context; every tool offered as registered.
    assert first.system_prompt.startswith(CORE)
    assert first.messages[0]["role"] == "system"
    assert first.messages[-1] == {"role": "user", "content": "tell me about Acme"}
    # Every write tool's schema exactly as the registry defines it, and the CRM's read tools.
    for tool in write_tools():
        assert first.tools[tool.name] == convert_to_openai_tool(tool)["function"], tool.name
    assert {"get_account", "list_contacts", "list_opportunities", "search_accounts"} <= set(first.tools)
    assert "account_id" in first.tools["get_account"]["parameters"]["properties"]
    assert second.tools == first.tools
    # The tool result went back answering the call the model made (under the copilot's own id).
    (assistant,) = [m for m in second.messages if m.get("tool_calls")]
    (tool_result,) = second.tool_results()
    assert tool_result["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert assistant["tool_calls"][0]["function"]["name"] == "get_account"
    # The server's usage is kept on the answer (evals count tokens from it).
    final = [m for m in messages if isinstance(m, AIMessage)][-1]
    assert final.usage_metadata is not None
    assert (final.usage_metadata["input_tokens"], final.usage_metadata["output_tokens"]) == (3210, 12)


async def test_an_azure_openai_deployment_setting_calls_the_deployment_with_its_key_and_api_version(
    azure_env: FakeOpenAI, copilot_settings: Settings, sandbox: SandboxProcess
):
    fake = azure_env
    settings = _settings(
        copilot_settings, sandbox, COPILOT_MODEL=f"azure_openai:{DEPLOYMENT}", COPILOT_TOOL_SELECTION="all"
    )
    fake.script(tool_calls(call("get_account", account_id="acc-acme")), _answer_citing_acme)
    rep = await sign_in(settings, "alex")
    async with service(settings) as svc:
        assert isinstance(svc.model, AzureChatOpenAI)
        result = await _ask(svc, rep, "tell me about Acme")

    assert result.citations == ["acc-acme"]
    assert len(fake.requests) == 2
    for request in fake.requests:
        assert request.path == f"/openai/deployments/{DEPLOYMENT}/chat/completions"
        assert request.query["api-version"] == API_VERSION
        assert request.headers["api-key"] == API_KEY
        assert request.system_prompt.startswith(CORE)
        assert "log_activity" in request.tools


# --- parallel reads --------------------------------------------------------------------------------


async def test_two_reads_in_one_model_message_both_run_and_are_in_flight_at_the_crm_together(
    openai_env: FakeOpenAI, copilot_settings: Settings, sandbox: SandboxProcess, recorder: McpRecorder
):
    fake = openai_env
    settings = _settings(
        copilot_settings, sandbox, COPILOT_MODEL="openai:gpt-test", CRM_MCP_URL=recorder.mcp_url
    )
    fake.script(
        tool_calls(
            call("get_account", account_id="acc-acme"),
            call("list_opportunities", account_id="acc-acme"),
        ),
        _answer_citing_acme,
    )
    rep = await sign_in(settings, "alex")
    async with service(settings) as svc:
        # Hold arriving CRM tool calls until both are in flight: only concurrent calls get there.
        recorder.gate(2)
        result = await _ask(svc, rep, "Acme and its deals")

    assert result.citations == ["acc-acme"]
    events = recorder.tool_events("get_account", "list_opportunities")
    assert sorted(events[:2]) == [("start", "get_account"), ("start", "list_opportunities")], events
    assert sorted(events[2:]) == [("end", "get_account"), ("end", "list_opportunities")], events
    # Both results went back to the model, each answering its own call.
    second = fake.requests[1]
    (assistant,) = [m for m in second.messages if m.get("tool_calls")]
    assert sorted(c["function"]["name"] for c in assistant["tool_calls"]) == [
        "get_account",
        "list_opportunities",
    ]
    assert sorted(m["tool_call_id"] for m in second.tool_results()) == sorted(
        c["id"] for c in assistant["tool_calls"]
    )
    assert "opp-acme-renewal" in second.tool_result_text()


async def test_contact_emails_and_phone_numbers_never_reach_the_model_provider(
    openai_env: FakeOpenAI, copilot_settings: Settings, sandbox: SandboxProcess
):
    fake = openai_env
    settings = _settings(copilot_settings, sandbox, COPILOT_MODEL="openai:gpt-test")
    fake.script(
        tool_calls(call("list_contacts", account_id="acc-acme")),
        answer("Maria Gonzalez [con-0001] is your contact."),
    )
    rep = await sign_in(settings, "alex")
    async with service(settings) as svc:
        result = await _ask(svc, rep, "who are my contacts at Acme")

    assert result.citations == ["con-0001"]
    contacts = [c for c in sandbox.admin("GET", "/admin/export")["contacts"] if c["account_id"] == "acc-acme"]
    assert contacts
    assert all(c.get("email") for c in contacts)
    sent = json.dumps([r.body for r in fake.requests])
    assert "Maria Gonzalez" in sent, "the contact itself reached the model"
    for contact in contacts:
        assert contact["email"] not in sent
        if contact.get("phone"):
            # Neither the number as stored nor its local part (e.g. "555-0123").
            assert contact["phone"] not in sent
            assert contact["phone"][-8:] not in sent


# --- writes: the approval pause and its decision ---------------------------------------------------


@pytest.mark.parametrize("decision", ["approve", "reject"])
async def test_a_write_proposed_beside_a_read_waits_for_the_rep_and_the_model_then_hears_the_outcome(
    openai_env: FakeOpenAI, copilot_settings: Settings, sandbox: SandboxProcess, decision: str
):
    fake = openai_env
    subject = f"Pricing call {uuid.uuid4().hex[:8]}"
    fake.script(
        tool_calls(
            call("get_account", account_id="acc-acme"),
            call(
                "log_activity", type="call", subject=subject, notes="Discussed pricing", account_id="acc-acme"
            ),
        ),
        answer("Done for Acme Corporation [acc-acme]."),
    )
    settings = _settings(copilot_settings, sandbox, COPILOT_MODEL="openai:gpt-test")
    rep = await sign_in(settings, "alex")
    async with service(settings) as svc:
        asked = await _ask(svc, rep, "log my pricing call with Acme")
        assert [p.tool for p in asked.proposals] == ["log_activity"]
        assert len(fake.requests) == 1, "nothing more is asked of the model before the decision"
        (proposal,) = asked.proposals
        answer_to = {"tool_call_id": proposal.tool_call_id, "type": decision}
        if decision == "reject":
            answer_to["reason"] = "wrong account"
        done = await svc.decide(rep.identity, rep.broker, asked.thread_id, [answer_to])

    assert done.answer is not None
    assert done.citations == ["acc-acme"]
    # The conversation sent after the decision is one a real server accepts (the fake refuses
    # an unanswered tool call with a 400): both calls answered, the write with its outcome.
    after = fake.requests[1]
    (assistant,) = [m for m in after.messages if m.get("tool_calls")]
    results = {m["tool_call_id"]: _text_of(m) for m in after.tool_results()}
    assert set(results) == {c["id"] for c in assistant["tool_calls"]}
    write_result = results[proposal.tool_call_id]
    logged = [a for a in sandbox.admin("GET", "/admin/export")["activities"] if a["subject"] == subject]
    if decision == "approve":
        assert '"done"' in write_result
        assert len(logged) == 1
    else:
        assert "wrong account" in write_result
        assert logged == []


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content)


# --- fallback on 429 / 500 -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(rate_limited(retry_after_seconds=1, retry_after_ms=20), id="429-retry-after"),
        pytest.param(server_error(), id="500"),
    ],
)
async def test_a_failing_primary_model_falls_back_to_the_next_configured_model(
    openai_env: FakeOpenAI, copilot_settings: Settings, sandbox: SandboxProcess, failure: Failure
):
    fake = openai_env
    settings = _settings(
        copilot_settings,
        sandbox,
        COPILOT_MODEL="openai:primary-model",
        COPILOT_FALLBACK_MODELS="openai:fallback-model",
    )
    fallback_script: list[Reply | Any] = [
        tool_calls(call("get_account", account_id="acc-acme")),
        _answer_citing_acme,
    ]

    def policy(request: ChatRequest) -> Reply:
        if request.model == "primary-model":
            return failure
        step = fallback_script.pop(0)
        return step(request) if callable(step) else step

    fake.policy = policy
    rep = await sign_in(settings, "alex")
    async with service(settings) as svc:
        assert [type(m) for m in svc.fallbacks] == [ChatOpenAI]
        result = await _ask(svc, rep, "tell me about Acme")

    assert result.answer == "Acme Corporation [acc-acme] is your account."
    assert result.citations == ["acc-acme"]
    # Each of the two model calls tried the primary first (the openai client's own retries
    # included) and moved on to the fallback only once the primary had failed.
    models = [r.model for r in fake.requests]
    attempts = models.index("fallback-model")
    assert attempts >= 1
    assert models == (["primary-model"] * attempts + ["fallback-model"]) * 2, models
    assert fallback_script == []


async def test_without_a_fallback_a_rate_limited_model_fails_the_turn_with_the_providers_error(
    openai_env: FakeOpenAI, copilot_settings: Settings, sandbox: SandboxProcess
):
    import openai

    fake = openai_env
    fake.policy = lambda request: rate_limited(retry_after_seconds=1, retry_after_ms=20)
    settings = _settings(copilot_settings, sandbox, COPILOT_MODEL="openai:gpt-test")
    rep = await sign_in(settings, "alex")
    async with service(settings) as svc:
        with pytest.raises(openai.RateLimitError):
            await _ask(svc, rep, "tell me about Acme")
    assert {r.model for r in fake.requests} == {"gpt-test"}


# --- bounds and grounding --------------------------------------------------------------------------


async def test_a_model_that_never_stops_calling_tools_is_ended_by_the_model_call_limit(
    openai_env: FakeOpenAI, copilot_settings: Settings, sandbox: SandboxProcess
):
    fake = openai_env
    fake.policy = lambda request: tool_calls(call("get_account", account_id="acc-acme"))
    settings = _settings(
        copilot_settings, sandbox, COPILOT_MODEL="openai:gpt-test", COPILOT_MODEL_CALL_RUN_LIMIT=3
    )
    rep = await sign_in(settings, "alex")
    async with service(settings) as svc:
        result = await _ask(svc, rep, "tell me about Acme, again and again")

    assert len(fake.requests) == 3
    assert result.answer == LIMIT_MESSAGE
    assert result.notice == "limit_reached"


async def test_a_record_id_the_model_made_up_is_removed_from_its_answer_by_the_citation_check(
    openai_env: FakeOpenAI, copilot_settings: Settings, sandbox: SandboxProcess
):
    fake = openai_env
    fake.script(
        tool_calls(call("get_account", account_id="acc-acme")),
        answer("Acme Corporation [acc-acme] renews soon [opp-acme-9999]."),
    )
    settings = _settings(copilot_settings, sandbox, COPILOT_MODEL="openai:gpt-test")
    rep = await sign_in(settings, "alex")
    async with service(settings) as svc:
        result = await _ask(svc, rep, "when does Acme renew")

    assert result.citations == ["acc-acme"]
    assert result.unverified_citations == ["opp-acme-9999"]
    assert result.answer is not None
    assert "[opp-acme-9999]" not in result.answer
    assert "[acc-acme]" in result.answer
    assert "could not be verified" in result.answer


# --- streaming -------------------------------------------------------------------------------------


async def test_a_streaming_client_assembles_parallel_tool_calls_and_the_answer_from_streamed_chunks(
    openai_env: FakeOpenAI, copilot_settings: Settings, sandbox: SandboxProcess
):
    # The copilot itself does not stream tokens (it streams graph updates); a deployment
    # that configures a streaming client must still work end to end.
    fake = openai_env
    fake.script(
        tool_calls(
            call("get_account", account_id="acc-acme"),
            call("list_opportunities", account_id="acc-acme"),
        ),
        lambda request: Completion(
            content=_answer_citing_acme(request).content,  # type: ignore[union-attr]
            prompt_tokens=2900,
            completion_tokens=9,
        ),
    )
    settings = _settings(copilot_settings, sandbox, COPILOT_MODEL="openai:gpt-test")
    model = init_chat_model("openai:gpt-test", streaming=True, stream_usage=True)
    rep = await sign_in(settings, "alex")
    async with service(settings, model) as svc:
        result = await _ask(svc, rep, "Acme and its deals")
        messages = await _messages(svc, result.thread_id)

    assert result.answer == "Acme Corporation [acc-acme] is your account."
    assert all(r.streamed and r.body["stream_options"] == {"include_usage": True} for r in fake.requests)
    (assistant,) = [m for m in fake.requests[1].messages if m.get("tool_calls")]
    assert sorted(json.loads(c["function"]["arguments"])["account_id"] for c in assistant["tool_calls"]) == [
        "acc-acme",
        "acc-acme",
    ]
    assert len(fake.requests[1].tool_results()) == 2
    final = [m for m in messages if isinstance(m, AIMessage)][-1]
    assert final.usage_metadata is not None
    assert final.usage_metadata["input_tokens"] == 2900


# --- acceptance: the Function App on requirements.txt with an Azure OpenAI deployment -------------


def test_the_runtime_requirements_carry_the_openai_provider():
    lines = (PROJECT_ROOT / "requirements.txt").read_text().splitlines()
    assert any(re.fullmatch(r"langchain-openai==[\w.]+", line.strip()) for line in lines)


def _deployed(tmp_path: Path) -> dict[str, str]:
    """What a deployment adds to the Functions test's settings (audit key and anchor store)."""
    return {
        "COPILOT_ENVIRONMENT": "deployed",
        "COPILOT_AUDIT_HMAC_KEYS": f"k1:{base64.b64encode(uuid.uuid4().bytes * 2).decode()}",
        "COPILOT_AUDIT_ANCHOR_FILE": str(tmp_path / "anchors.jsonl"),
    }


async def test_the_function_app_deployed_on_the_offline_model_refuses_to_start_saying_so(
    monkeypatch: pytest.MonkeyPatch,
    copilot_settings: Settings,
    sandbox: SandboxProcess,
    azurite: Any,  # noqa: F811 - the Functions tests' fixture
    channel: Any,
    tmp_path: Path,
):
    async with deployed_function_app(monkeypatch, copilot_settings, sandbox, azurite, channel):
        for name, value in _deployed(tmp_path).items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("COPILOT_MODEL", raising=False)
        with pytest.raises(ConfigurationError, match="refuses COPILOT_MODEL=offline"):
            await get_host()
        monkeypatch.setenv("COPILOT_MODEL", "offline")
        with pytest.raises(ConfigurationError, match="COPILOT_MODEL=azure_openai:<deployment>"):
            await get_host()


async def test_the_function_app_deployed_with_an_azure_openai_deployment_starts_and_answers(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeOpenAI,
    copilot_settings: Settings,
    sandbox: SandboxProcess,
    azurite: Any,  # noqa: F811 - the Functions tests' fixture
    channel: Any,
    connector: Any,  # noqa: F811
    tmp_path: Path,
):
    fake.script(tool_calls(call("get_account", account_id="acc-acme")), _answer_citing_acme)
    async with deployed_function_app(monkeypatch, copilot_settings, sandbox, azurite, channel) as queue:
        deployed = {
            **_deployed(tmp_path),
            "COPILOT_MODEL": f"azure_openai:{DEPLOYMENT}",
            **azure_environment(fake),
        }
        for name, value in deployed.items():
            monkeypatch.setenv(name, value)
        for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "COPILOT_FALLBACK_MODELS"):
            monkeypatch.delenv(name, raising=False)
        await sign_in_with_sso(copilot_settings)
        teams = Teams(connector, channel)
        assert (await teams.post(teams.activity(text="tell me about Acme"))).status_code == 202

        await user_function("turns")(dequeue(queue))

    reply = connector.messages()[-1].body
    # Deployed on Teams desktop: the record's id becomes a numbered Teams citation.
    assert "Acme Corporation [1]" in reply["text"]
    (message,) = [e for e in reply["entities"] if e.get("type") == "https://schema.org/Message"]
    assert [c["appearance"]["name"] for c in message["citation"]] == ["Acme Corporation"]
    assert [r.path for r in fake.requests] == [f"/openai/deployments/{DEPLOYMENT}/chat/completions"] * 2


async def test_a_question_is_offered_the_reads_only_and_an_instruction_the_write_it_names(
    openai_env: FakeOpenAI, copilot_settings: Settings, sandbox: SandboxProcess
):
    fake = openai_env
    fake.script(
        tool_calls(call("get_account", account_id="acc-acme")),
        _answer_citing_acme,
        tool_calls(call("log_activity", account_id="acc-acme", type="call", subject="Renewal", notes="ok")),
    )
    settings = _settings(copilot_settings, sandbox, COPILOT_MODEL="openai:gpt-test")
    rep = await sign_in(settings, "alex")
    async with service(settings) as svc:
        asked = await _ask(svc, rep, "how is Acme doing?")
        await svc.run_turn(
            rep.identity, rep.broker, asked.thread_id, "log a call with Acme about the renewal"
        )

    question, answered, instruction = fake.requests[:3]
    writes = {t.name for t in write_tools()}
    assert {"get_account", "list_opportunities", "search_accounts"} <= set(question.tools)
    assert not writes & set(question.tools)
    assert "write tools" not in question.system_prompt
    assert answered.tools == question.tools  # the same offer on every call of a run
    assert "log_activity" in instruction.tools
    assert "update_opportunity" not in instruction.tools
    assert "log_activity" in instruction.system_prompt
    # The fixed rules open every prompt (a provider's prompt cache sees one prefix).
    assert all(r.system_prompt.startswith(CORE) for r in (question, answered, instruction))
