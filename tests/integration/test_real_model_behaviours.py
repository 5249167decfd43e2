"""Real models misbehave; the rep never sees it (invariant 8, for every model).

The fake OpenAI server replays each behaviour real model families were seen to have
(``tests/support/model_behaviours.py``: tool calls written as text in five shapes and after
a reasoning preamble, lazy answers without a read, unknown tools, malformed arguments,
repeated calls, empty messages, refusals) to the product's real ``ChatOpenAI`` client,
through each way a rep reaches the copilot: ``ask`` (in-process and the CLI), ``chat`` and
the Teams bot. For every one: no raw tool-call text reaches the rep, and no factual answer
from a run that read nothing. A behaviour the model drops when told (``then_behaves``) ends
in an answer citing what the CRM returned; one it keeps (``persistent``) ends in the honest
"couldn't look that up".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from copilot.grounding import COULD_NOT_LOOK_UP
from copilot.grounding.text_calls import find_text_calls
from copilot.middleware.limits import LIMIT_MESSAGE
from copilot.settings import Settings
from copilot.turns import TurnResult
from tests.support.copilot_env import copilot_settings as make_settings
from tests.support.copilot_env import service, sign_in
from tests.support.fake_connector import card_of, find_actions
from tests.support.fake_openai import (
    API_KEY,
    ChatRequest,
    FakeOpenAI,
    Reply,
    answer,
    call,
    tool_calls,
    use_openai_at,
)
from tests.support.model_behaviours import (
    LAZY_ANSWER,
    LOOPED,
    MISBEHAVIOURS,
    NOTHING_FOUND,
    REFUSAL,
    RESIDUE,
    Misbehaviour,
    facts_check,
    greeting_policy,
    refusal_policy,
    repeated_call_policy,
    text_call,
)
from tests.support.sandbox_process import PROJECT_ROOT, SandboxProcess
from tests.support.teams_client import running_bot

pytestmark = pytest.mark.integration

MODEL = "openai:gpt-test"
QUESTION = "How is Acme doing?"
TOOL_NAMES = (
    "get_account",
    "search_accounts",
    "list_opportunities",
    "log_activity",
    "update_opportunity",
    "search_knowledge",
)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield use_openai_at(monkeypatch, server)


@pytest.fixture
def settings(copilot_settings: Settings, sandbox: SandboxProcess) -> Settings:
    assert copilot_settings.database_url is not None
    return make_settings(copilot_settings.database_url.get_secret_value(), sandbox, COPILOT_MODEL=MODEL)


def assert_shown_safely(shown: str, behaviour: Misbehaviour | None) -> None:
    """What the rep saw holds no tool-call text, and is either grounded or the honest refusal."""
    assert find_text_calls(shown, TOOL_NAMES) is None, shown
    for raw in ("<tool_call", "<function", '"arguments"', '"parameters"', "```", "<think>"):
        assert raw not in shown, shown
    assert LAZY_ANSWER not in shown
    # Issue 34's shapes: no tool error, "nothing found" unearned, loop or template residue shown.
    for never in ("validation error", "Field required", NOTHING_FOUND, (LOOPED * 2).strip(), RESIDUE):
        assert never not in shown, shown
    if behaviour is not None and behaviour.persistent:
        # The honest refusal; a model that keeps re-reading is ended by the limit's own message.
        assert COULD_NOT_LOOK_UP in shown or LIMIT_MESSAGE in shown, shown
    elif behaviour is not None:
        assert "acc-acme" in shown, shown  # read from the CRM and cited
        assert COULD_NOT_LOOK_UP not in shown


async def _ask(settings: Settings, text: str = QUESTION) -> TurnResult:
    rep = await sign_in(settings, "alex")
    async with service(settings) as svc:
        return await svc.run_turn(rep.identity, rep.broker, None, text)


# --- in-process, through the real ChatOpenAI client --------------------------------------------


@pytest.mark.parametrize("behaviour", MISBEHAVIOURS, ids=lambda b: b.name)
async def test_each_misbehaviour_reaches_the_rep_only_as_a_grounded_answer_or_an_honest_refusal(
    fake: FakeOpenAI, settings: Settings, behaviour: Misbehaviour
):
    fake.policy = behaviour.policy()
    result = await _ask(settings)

    assert result.answer is not None
    assert_shown_safely(result.answer, behaviour)
    if behaviour.persistent:
        assert result.notice in ("ungrounded", "limit_reached")
        assert result.citations == []
    else:
        assert result.notice is None
        assert "acc-acme" in result.citations
    assert result.proposals == []  # every question here asks no change: no card, ever
    # Bounded: the model-call limit (12) holds with the gate's extra asks counted.
    assert len([r for r in fake.requests if facts_check(r) is None]) <= settings.model_call_run_limit


async def test_a_lazy_answer_naming_what_the_rep_asked_is_asked_again_with_a_read_required_and_no_check(
    fake: FakeOpenAI, settings: Settings
):
    fake.policy = next(b for b in MISBEHAVIOURS if b.name == "lazy_answer").policy()
    await _ask(settings)
    # "Acme" is the rep's word: the reply speaks of it with nothing read, so asking the model
    # whether it states facts could not change the outcome, and costs no call.
    assert [r for r in fake.requests if facts_check(r) is not None] == []
    asked_again = fake.requests[1]
    assert asked_again.tool_choice == "required"
    assert "without calling any tool" in asked_again.system_prompt


async def test_a_lazy_answer_naming_nothing_asked_is_checked_by_the_model_first(
    fake: FakeOpenAI, settings: Settings
):
    fake.policy = next(b for b in MISBEHAVIOURS if b.name == "lazy_answer").policy()
    await _ask(settings, "how is my biggest customer doing?")
    checks = [r for r in fake.requests if facts_check(r) is not None]
    assert len(checks) == 1
    assert LAZY_ANSWER in checks[0].latest_user_text()
    asked_again = fake.requests[fake.requests.index(checks[0]) + 1]
    assert asked_again.tool_choice == "required"


async def test_a_greeting_answered_without_a_read_is_shown_after_the_models_own_check(
    fake: FakeOpenAI, settings: Settings
):
    fake.policy = greeting_policy
    result = await _ask(settings, "Hi there!")
    assert result.answer == "Hello! Ask me about your accounts, deals or contacts."
    assert result.notice is None
    assert len(fake.requests) == 2  # the answer, then the facts check: no regeneration


async def test_a_refusal_is_shown_as_the_models_words_not_as_an_empty_answer(
    fake: FakeOpenAI, settings: Settings
):
    fake.policy = refusal_policy
    result = await _ask(settings, "Write me a poem about my competitors")
    assert result.answer == REFUSAL
    assert result.notice is None


async def test_the_same_read_repeated_is_answered_from_the_first_result_not_run_again(
    fake: FakeOpenAI, settings: Settings, sandbox: SandboxProcess
):
    fake.policy = repeated_call_policy()
    before = _crm_calls(sandbox, "get_account")
    result = await _ask(settings)
    assert result.answer is not None
    assert "acc-acme" in result.citations
    assert _crm_calls(sandbox, "get_account") == before + 1


def _crm_calls(sandbox: SandboxProcess, tool: str) -> int:
    log = sandbox.admin("GET", "/admin/export").get("request_log", [])
    return sum(1 for entry in log if entry.get("tool") == tool)


async def test_an_answer_after_a_read_that_cites_nothing_is_regenerated_then_refused(
    fake: FakeOpenAI, settings: Settings
):
    def uncited(request: ChatRequest) -> Reply:
        if request.turn_tool_results():
            return answer("Acme Corporation looks healthy, with plenty of pipeline.")
        return tool_calls(call("get_account", account_id="acc-acme"))

    fake.policy = uncited
    result = await _ask(settings)
    assert result.answer == COULD_NOT_LOOK_UP
    assert result.notice == "ungrounded"
    answers = [r for r in fake.requests if r.turn_tool_results()]
    assert len(answers) == 2  # one regeneration, with the reason
    assert "cited no record id" in answers[1].system_prompt


# --- writes recovered from text still wait for the rep ------------------------------------------


def _text_writer(shape: Any, subject: str) -> Any:
    """A model that writes a log_activity call as text, then reports the outcome it is given."""
    args = {"account_id": "acc-acme", "type": "call", "subject": subject}

    def writer(request: ChatRequest) -> Reply:
        check = facts_check(request)
        if check is not None:
            return check
        if request.turn_tool_results():
            return answer("Logged the call [acc-acme].")
        return answer(text_call(shape, "log_activity", args))

    return writer


@pytest.mark.parametrize("shape", ["bare_json", "tool_call_tags", "function_markup"])
async def test_a_write_written_as_text_becomes_an_approval_and_nothing_is_written_before_a_decision(
    fake: FakeOpenAI, settings: Settings, sandbox: SandboxProcess, shape: Any
):
    subject = f"Text-call write {shape} {os.getpid()}"
    fake.policy = _text_writer(shape, subject)
    rep = await sign_in(settings, "alex")
    async with service(settings) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "log a call with Acme")
        assert [p.tool for p in result.proposals] == ["log_activity"]
        assert result.proposals[0].args["subject"] == subject
        assert _activities(sandbox, subject) == []  # nothing reached the CRM without a decision
        decided = await svc.decide(
            rep.identity,
            rep.broker,
            result.thread_id,
            [{"tool_call_id": result.proposals[0].tool_call_id, "type": "reject", "reason": "not now"}],
        )
    assert decided.proposals == []
    assert _activities(sandbox, subject) == []


async def test_in_teams_a_write_written_as_text_gets_an_approval_card_and_approving_writes_it_once(
    fake: FakeOpenAI, settings: Settings, sandbox: SandboxProcess
):
    subject = f"Text-call write in Teams {os.getpid()}"
    fake.policy = _text_writer("tool_call_tags", subject)
    async with running_bot(settings) as teams:
        await teams.say("log a call with Acme")
        card_activity = teams.connector.cards()[-1]
        card = card_of(card_activity)
        assert subject in json.dumps(card)
        assert _activities(sandbox, subject) == []  # the card waits; nothing is written
        [approve] = find_actions(card, "Approve")
        await teams.submit(card_activity.activity_id or "", approve["data"])
        await teams.submit(card_activity.activity_id or "", approve["data"])  # a double click
    assert len(_activities(sandbox, subject)) == 1


def _activities(sandbox: SandboxProcess, subject: str) -> list[dict[str, Any]]:
    return [a for a in sandbox.admin("GET", "/admin/export")["activities"] if a.get("subject") == subject]


# --- the Teams bot -------------------------------------------------------------------------------


@pytest.mark.parametrize("behaviour", MISBEHAVIOURS, ids=lambda b: b.name)
async def test_in_teams_each_misbehaviour_shows_only_a_grounded_answer_or_an_honest_refusal(
    fake: FakeOpenAI, settings: Settings, behaviour: Misbehaviour
):
    fake.policy = behaviour.policy()
    async with running_bot(settings) as teams:
        await teams.say(QUESTION)
        shown = "\n".join(
            (m.body.get("text") or "") + json.dumps(m.body.get("attachments") or [])
            for m in teams.connector.messages()
        )
        assert teams.connector.cards() == [] or all(
            not find_actions(card_of(c), "Approve") for c in teams.connector.cards()
        )
    assert_shown_safely(shown, behaviour)


# --- the CLI: ask and chat, each a process of its own ---------------------------------------------


@pytest.fixture
def cli_env(fake: FakeOpenAI, sandbox: SandboxProcess, settings: Settings) -> dict[str, str]:
    assert settings.database_url is not None
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": settings.database_url.get_secret_value(),
            "CRM_MCP_URL": sandbox.settings.mcp_url,
            "GRAPH_BASE_URL": f"{sandbox.settings.http_base_url}/v1.0",
            "ENTRA_AUTHORITY": sandbox.settings.idp_base_url,
            "ENTRA_CA_BUNDLE": str(sandbox.settings.ca_cert_path),
            "COPILOT_MODEL": MODEL,
            "OPENAI_BASE_URL": fake.base_url,
            "OPENAI_API_KEY": API_KEY,
        }
    )
    return env


def _cli(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "copilot", *args],
        cwd=PROJECT_ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _by_question(behaviours: tuple[Misbehaviour, ...]) -> tuple[dict[str, Misbehaviour], Any]:
    """One policy for many questions: each question replays its own behaviour."""
    questions = {f"{QUESTION} (case {b.name})": b for b in behaviours}
    policies = {q: b.policy() for q, b in questions.items()}

    def reply(request: ChatRequest) -> Reply:
        check = facts_check(request)
        if check is not None:
            return check
        policy = policies.get(request.latest_user_text())
        if policy is None:  # the summarisation middleware condensing a long chat
            return answer("The rep asked how Acme is doing, several times.")
        return policy(request)

    return questions, reply


def test_ask_on_the_command_line_never_prints_tool_call_text_or_an_ungrounded_answer(
    fake: FakeOpenAI, cli_env: dict[str, str]
):
    questions, fake.policy = _by_question(MISBEHAVIOURS)
    # Every behaviour runs through the service in process above, and through the CLI's
    # printing in the chat test below; a process per behaviour adds only start-up time. The
    # CLI's own part is the answer and notice it prints, the same for each kind: every
    # persistent behaviour (a notice) and one corrected behaviour of each family (none).
    cases = {
        q: b
        for q, b in questions.items()
        if b.persistent or b.name in ("text_call_bare_json", "lazy_answer", "malformed_arguments_as_text")
    }
    for question, behaviour in cases.items():
        done = _cli(cli_env, "ask", "--rep", "alex", "--json", question)
        assert done.returncode == 0, done.stderr
        shown = json.loads(done.stdout)
        assert_shown_safely(shown["answer"], behaviour)
        if behaviour.persistent:
            assert shown["notice"] in ("ungrounded", "limit_reached"), behaviour.name
        else:
            assert shown["notice"] is None, behaviour.name
    # The plain (not --json) printing is the chat's too, which the next test drives through
    # every behaviour in one process; here one corrected and one persistent case suffice.
    for name in ("text_call_fenced_json", "lazy_answer_persistent"):
        question = next(q for q, b in questions.items() if b.name == name)
        plain = _cli(cli_env, "ask", "--rep", "alex", question)
        assert plain.returncode == 0, plain.stderr
        assert_shown_safely(plain.stdout, questions[question])


def test_chat_never_prints_tool_call_text_or_an_ungrounded_answer(fake: FakeOpenAI, cli_env: dict[str, str]):
    questions, fake.policy = _by_question(MISBEHAVIOURS)
    done = _cli(cli_env, "chat", "--rep", "alex", stdin="\n".join([*questions, "quit"]) + "\n")
    assert done.returncode == 0, done.stderr
    assert_shown_safely(done.stdout, None)
    persistent = sum(1 for b in questions.values() if b.persistent)
    assert done.stdout.count(COULD_NOT_LOOK_UP) + done.stdout.count(LIMIT_MESSAGE) == persistent
    assert done.stdout.count("acc-acme") >= len(questions) - persistent


# --- fallback before refusal ----------------------------------------------------------------------


async def test_when_the_gate_gives_up_on_the_primary_the_fallback_model_gets_the_turn(
    fake: FakeOpenAI, settings: Settings
):
    broken = next(b for b in MISBEHAVIOURS if b.name == "lazy_answer_persistent").policy()
    competent = next(b for b in MISBEHAVIOURS if b.name == "lazy_answer").policy()

    def by_model(request: ChatRequest) -> Reply:
        if request.model == "gpt-test":
            return broken(request)
        # The fallback answers as a competent model does once it is asked: it reads first.
        check = facts_check(request)
        if check is not None:
            return check
        if request.turn_tool_results():
            return competent(request)
        return tool_calls(call("get_account", account_id="acc-acme"))

    fake.policy = by_model
    with_fallback = settings.model_copy(update={"fallback_models": "openai:gpt-fallback"})
    result = await _ask(with_fallback)

    assert result.notice is None
    assert "acc-acme" in result.citations
    assert COULD_NOT_LOOK_UP not in (result.answer or "")
    models = [r.model for r in fake.requests if facts_check(r) is None]
    assert models[0] == "gpt-test"
    assert "gpt-fallback" in models
    assert len([r for r in fake.requests if facts_check(r) is None]) <= settings.model_call_run_limit


async def test_without_a_fallback_the_gate_refuses_honestly(fake: FakeOpenAI, settings: Settings):
    fake.policy = next(b for b in MISBEHAVIOURS if b.name == "lazy_answer_persistent").policy()
    result = await _ask(settings)
    assert result.answer == COULD_NOT_LOOK_UP
    assert {r.model for r in fake.requests} == {"gpt-test"}
