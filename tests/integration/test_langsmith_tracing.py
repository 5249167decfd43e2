"""LangSmith tracing over the real stack, against a fake LangSmith that speaks the ingest API.

Real turns and decisions (CopilotService, real PostgreSQL, the sandbox over MCP with OBO
tokens, a scripted model) send their traces with the installed ``langsmith`` client to
``tests/support/fake_langsmith.py``; the tests assert what arrived: the run tree, tags,
metadata and feedback, that no token, email or phone number left the process, and that
an audit row links to the run LangSmith received. Each test flushes the client before it
reads the fake (``Tracing.flush`` returns once everything queued was sent).
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatResult

from copilot.citations import message_text
from copilot.errors import InvalidInput
from copilot.persistence import audit
from copilot.persistence.database import connect
from copilot.runner import CopilotService
from copilot.settings import Settings
from copilot.tracing.pseudonym import rep_pseudonym
from evals.experiments import ExperimentExample, ExperimentResult, example_uuid, record_experiment
from tests.support.copilot_env import Rep, service, sign_in
from tests.support.copilot_env import copilot_settings as make_settings
from tests.support.fake_langsmith import TENANT_ID, FakeLangSmith, running_fake_langsmith
from tests.support.idn_emails import stored_contact_emails
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls

pytestmark = pytest.mark.integration

PROJECT = "copilot-under-test"
KEY = b"k" * 32
REASON_PHONE = "+1 206 555 0147"
COMMENT_EMAIL = "jane.doe@example.com"


class DownModel(ScriptedChatModel):
    """A primary model whose provider is down."""

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise RuntimeError("primary model provider is down (HTTP 503)")


@pytest.fixture
def fake_langsmith() -> Iterator[FakeLangSmith]:
    with running_fake_langsmith() as fake:
        yield fake


def _settings(base: Settings, sandbox: SandboxProcess, fake: FakeLangSmith, **overrides: Any) -> Settings:
    assert base.database_url is not None
    values: dict[str, Any] = {
        "LANGSMITH_TRACING": True,
        "LANGSMITH_ENDPOINT": fake.url,
        "LANGSMITH_PROJECT": PROJECT,
        "COPILOT_TRACE_PSEUDONYM_KEY": base64.b64encode(KEY).decode(),
        **overrides,
    }
    return make_settings(base.database_url.get_secret_value(), sandbox, **values)


@pytest.fixture
def traced(copilot_settings: Settings, sandbox: SandboxProcess, fake_langsmith: FakeLangSmith) -> Settings:
    return _settings(copilot_settings, sandbox, fake_langsmith)


def _log(subject: str) -> dict[str, Any]:
    return call(
        "log_activity", type="call", subject=subject, notes="Discussed pricing", account_id="acc-acme"
    )


def _metadata(run: dict[str, Any]) -> dict[str, Any]:
    return dict((run.get("extra") or {}).get("metadata") or {})


def _events(fake: FakeLangSmith, event: str, trace_id: str) -> list[dict[str, Any]]:
    return [
        r for r in fake.tagged(event) if r.get("trace_id") == trace_id and r["name"] == f"copilot.{event}"
    ]


async def _audit_rows(settings: Settings) -> list[audit.StoredAuditEntry]:
    async with connect(settings) as conn:
        return await audit.list_entries(conn, limit=100)


async def _tool_call_ids(svc: CopilotService, thread_id: str) -> set[str]:
    saved = await svc.saver.aget_tuple({"configurable": {"thread_id": thread_id}})
    assert saved is not None
    return {
        m.tool_call_id for m in saved.checkpoint["channel_values"]["messages"] if isinstance(m, ToolMessage)
    }


def _contact_pii(sandbox: SandboxProcess, account_id: str) -> list[str]:
    contacts = [
        c for c in sandbox.admin("GET", "/admin/export")["contacts"] if c.get("account_id") == account_id
    ]
    found = [str(c[k]) for c in contacts for k in ("email", "phone", "mobile") if c.get(k)]
    assert found, "the account has contacts with emails and phones"
    return found


def _assert_nothing_secret(fake: FakeLangSmith, rep: Rep, *also: str) -> None:
    sent = fake.all_bytes()
    assert sent, "something was sent"
    tokens = rep.issued_tokens()
    assert tokens, "the rep's tokens were used"
    for token in tokens:
        assert token.encode() not in sent
    assert b"Bearer " not in sent
    for secret in (rep.identity.aad_object_id, rep.identity.username, *also):
        assert secret.encode() not in sent, secret


# --- the run tree and its metadata ---------------------------------------------------------------


async def test_a_traced_turn_arrives_as_one_run_tree_with_its_metadata_and_no_token_email_or_phone(
    traced, sandbox, fake_langsmith
):
    model = ScriptedChatModel(
        steps=[
            calls(call("get_account", account_id="acc-acme"), call("list_contacts", account_id="acc-acme"))
        ],
        final="Acme Corporation [acc-acme] has its contacts listed.",
    )
    rep = await sign_in(traced, "alex")
    async with service(traced, model) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "who are the contacts at acme?")
        tool_call_ids = await _tool_call_ids(svc, result.thread_id)
        svc.tracing.flush()

    assert result.run_id is not None
    root = fake_langsmith.runs[result.run_id]
    assert root["name"] == "copilot.turn"
    assert root.get("parent_run_id") is None
    assert {"copilot", "turn"} <= set(root["tags"])
    assert root.get("end_time") is not None
    assert root.get("error") is None
    assert root["session_name"] == PROJECT
    pseudonym = rep_pseudonym(KEY, rep.identity)
    assert rep.identity.aad_object_id not in pseudonym
    trace = fake_langsmith.in_trace(result.run_id)
    ids = {r["id"] for r in trace}
    assert all(r["id"] == result.run_id or r.get("parent_run_id") in ids for r in trace), "one tree"
    for run in trace:
        meta = _metadata(run)
        assert meta["tenant_id"] == rep.identity.tenant_id
        assert meta["rep"] == pseudonym
        assert meta["thread_id"] == result.thread_id
        assert meta["copilot_run"] == "turn"
        assert meta["model"] == "scriptedchatmodel"
    graph = [r for r in trace if r.get("parent_run_id") == result.run_id]
    assert [r["name"] for r in graph] == ["LangGraph"]
    assert len([r for r in trace if r["run_type"] == "llm"]) == 2  # the reads, then the answer
    tools = [r for r in trace if r["run_type"] == "tool"]
    assert sorted(r["name"] for r in tools) == ["get_account", "list_contacts"]
    # A traced process compiles its agent with LangChain's spans around middleware hooks.
    assert any(r["name"].endswith(".awrap_tool_call") for r in trace), [r["name"] for r in trace]
    assert {_metadata(r)["tool_call_id"] for r in tools} == tool_call_ids
    assert set(_metadata(root)["tool_call_ids"]) == tool_call_ids
    assert all("tool_call_ids" not in _metadata(r) for r in trace if r is not root)
    contacts = next(r for r in tools if r["name"] == "list_contacts")
    assert "[REDACTED_EMAIL]" in json.dumps(contacts["outputs"])
    assert "[REDACTED_PHONE_NUMBER]" in json.dumps(contacts["outputs"])
    _assert_nothing_secret(fake_langsmith, rep, *_contact_pii(sandbox, "acc-acme"))


async def test_no_internationalised_email_reaches_a_trace(traced, sandbox, fake_langsmith):
    contacts = sandbox.call("alex", "list_contacts", account_id="acc-acme")["structuredContent"]["items"]
    stored = {
        contacts[0]["id"]: "josé.garcía@bücher.example",
        contacts[1]["id"]: "иван@xn--e1afmkfd.xn--p1ai",
    }
    asked = "用户@例子.中国"
    model = ScriptedChatModel(
        steps=[calls(call("list_contacts", account_id="acc-acme"))],
        final=f"{contacts[0]['name']} [{contacts[0]['id']}] is at Acme.",
    )
    rep = await sign_in(traced, "alex")
    with stored_contact_emails(sandbox.settings.db_path, stored):
        async with service(traced, model) as svc:
            result = await svc.run_turn(rep.identity, rep.broker, None, f"who is at acme? cc mailto:{asked}")
            svc.tracing.flush()

    tools = [r for r in fake_langsmith.in_trace(result.run_id) if r["run_type"] == "tool"]
    assert "[REDACTED_EMAIL]" in json.dumps(tools[0]["outputs"])
    sent = fake_langsmith.all_bytes()
    for email in (*stored.values(), asked):
        for written in (
            email,
            json.dumps(email)[1:-1],
            email.split("@")[0],
            json.dumps(email.split("@")[0])[1:-1],
        ):
            assert written.encode() not in sent, written


async def test_an_audit_row_carries_the_trace_url_of_the_tool_run_langsmith_received(traced, fake_langsmith):
    rep = await sign_in(traced, "alex")
    async with service(
        traced, ScriptedChatModel(steps=[calls(_log("Traced write"))], final="Logged.")
    ) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call with acme")
        call_id = asked.proposals[0].tool_call_id
        done = await svc.decide(
            rep.identity, rep.broker, asked.thread_id, [{"tool_call_id": call_id, "type": "approve"}]
        )
        svc.tracing.flush()

    assert done.outcomes[0]["result"]["status"] == "done"
    (row,) = await _audit_rows(traced)
    assert row.entry.trace_url is not None
    url = urlparse(row.entry.trace_url)
    match = re.fullmatch(r"/o/([^/]+)/projects/p/([^/]+)/r/([^/]+)", url.path)
    assert match is not None, row.entry.trace_url
    tenant, project_id, run_id = match.groups()
    run = fake_langsmith.runs[run_id]
    assert run["run_type"] == "tool"
    assert run["name"] == "log_activity"
    assert _metadata(run)["tool_call_id"] == call_id == row.entry.tool_call_id
    assert run["trace_id"] == done.run_id == parse_qs(url.query)["trace_id"][0]
    assert fake_langsmith.runs[done.run_id]["name"] == "copilot.decision"
    assert _metadata(fake_langsmith.runs[done.run_id])["tool_call_ids"] == [call_id]
    project = fake_langsmith.session_by_name(PROJECT)
    assert project is not None
    assert (tenant, project_id) == (TENANT_ID, project["id"])
    assert run["session_name"] == PROJECT
    # The audit chain still verifies with the link in it.
    async with connect(traced) as conn:
        assert (await audit.verify(conn, config=audit.audit_config(traced))).ok


# --- decisions: rejections, edits, conflicts -------------------------------------------------------


async def test_a_rejection_with_its_reason_and_an_edit_with_its_diff_are_tagged_runs_and_feedback(
    traced, fake_langsmith
):
    model = ScriptedChatModel(
        steps=[
            calls(
                _log("Reject me"),
                call("update_opportunity", opportunity_id="opp-acme-renewal", stage="Negotiation"),
            )
        ],
        final="Done.",
    )
    reason = f"Wrong account, call me on {REASON_PHONE} instead"
    rep = await sign_in(traced, "alex")
    async with service(traced, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log it and move the renewal")
        by_tool = {p.tool: p for p in asked.proposals}
        decided = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [
                {"tool_call_id": by_tool["log_activity"].tool_call_id, "type": "reject", "reason": reason},
                {
                    "tool_call_id": by_tool["update_opportunity"].tool_call_id,
                    "type": "edit",
                    "args": {"stage": "Proposal"},
                },
            ],
        )
        svc.tracing.flush()

    assert decided.run_id is not None
    assert {"rejection", "edit"} <= set(fake_langsmith.runs[decided.run_id]["tags"])
    (rejected,) = _events(fake_langsmith, "rejection", decided.run_id)
    assert rejected["inputs"]["tool"] == "log_activity"
    assert rejected["inputs"]["tool_call_id"] == by_tool["log_activity"].tool_call_id
    assert rejected["inputs"]["reason"] == "Wrong account, call me on [REDACTED_PHONE_NUMBER] instead"
    (feedback,) = [f for f in fake_langsmith.feedback if f["key"] == "rejection"]
    assert feedback["run_id"] == feedback["trace_id"] == decided.run_id
    assert feedback["score"] == 0
    assert feedback["comment"] == "Wrong account, call me on [REDACTED_PHONE_NUMBER] instead"
    assert feedback["value"] == {"tool": "log_activity", "tool_call_id": by_tool["log_activity"].tool_call_id}
    (edited,) = _events(fake_langsmith, "edit", decided.run_id)
    assert edited["inputs"]["tool_call_id"] == by_tool["update_opportunity"].tool_call_id
    assert edited["inputs"]["diff"] == {"stage": {"from": "Negotiation", "to": "Proposal"}}
    assert fake_langsmith.runs[edited["parent_run_id"]]["trace_id"] == decided.run_id
    _assert_nothing_secret(fake_langsmith, rep, REASON_PHONE)


async def test_a_conflict_is_a_tagged_run_of_the_decision_that_met_it(traced, sandbox, fake_langsmith):
    model = ScriptedChatModel(
        steps=[
            calls(
                call(
                    "update_opportunity",
                    opportunity_id="opp-acme-analytics",
                    next_step="Confirm the conflict is traced",
                )
            )
        ],
        final="It changed meanwhile.",
    )
    rep = await sign_in(traced, "alex")
    async with service(traced, model) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "set the analytics next step")
        proposal = asked.proposals[0]
        assert proposal.record is not None
        changed = sandbox.call(
            "nestor",
            "update_opportunity",
            opportunity_id="opp-acme-analytics",
            expected_version=int(proposal.record["version"] or 0),
            changes={"next_step": "Manager: confirm budget"},
        )
        assert changed["isError"] is False
        decided = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": proposal.tool_call_id, "type": "approve"}],
        )
        svc.tracing.flush()

    assert decided.outcomes[0]["result"]["status"] == "conflict"
    assert decided.run_id is not None
    (conflict,) = _events(fake_langsmith, "conflict", decided.run_id)
    assert conflict["inputs"]["tool"] == "update_opportunity"
    assert conflict["inputs"]["tool_call_id"] == proposal.tool_call_id
    assert conflict["inputs"]["outcome"]["status"] == "conflict"
    assert "conflict" in fake_langsmith.runs[decided.run_id]["tags"]
    assert _events(fake_langsmith, "conflict", asked.run_id or "") == []


# --- bounds: the model-call limit, fallbacks, the breaker -------------------------------------------


async def test_the_model_call_limit_ending_a_turn_is_a_tagged_run(copilot_settings, sandbox, fake_langsmith):
    settings = _settings(copilot_settings, sandbox, fake_langsmith, COPILOT_MODEL_CALL_RUN_LIMIT=2)
    looping = [calls(call("search_accounts", query=f"a{i}")) for i in range(3)]
    rep = await sign_in(settings, "alex")
    async with service(settings, ScriptedChatModel(steps=looping)) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "loop")
        svc.tracing.flush()

    assert result.notice == "limit_reached"
    (root,) = [r for r in fake_langsmith.roots() if r["name"] == "copilot.turn"]
    (limit,) = _events(fake_langsmith, "model_call_limit", root["id"])
    assert limit["inputs"]["run_limit"] == 2
    assert "model_call_limit" in root["tags"]


async def test_a_fallback_to_the_next_model_is_a_tagged_run_naming_both_models(
    copilot_settings, sandbox, fake_langsmith
):
    settings = _settings(copilot_settings, sandbox, fake_langsmith, COPILOT_FALLBACK_MODELS="offline")
    rep = await sign_in(settings, "alex")
    async with service(settings, DownModel()) as svc:
        result = await svc.run_turn(rep.identity, rep.broker, None, "summarise Acme")
        svc.tracing.flush()

    assert result.answer is not None
    assert "[acc-acme]" in result.answer
    assert result.run_id is not None
    fallbacks = _events(fake_langsmith, "fallback", result.run_id)
    assert fallbacks, "the fallback was recorded"
    assert {(f["inputs"]["failed"], f["inputs"]["error"], f["inputs"]["caller"]) for f in fallbacks} == {
        ("downmodel", "RuntimeError", "agent")
    }
    assert {f["inputs"]["to"] for f in fallbacks} == {"offlinechatmodel:offline"}
    root = fake_langsmith.runs[result.run_id]
    assert "fallback" in root["tags"]
    assert _metadata(root)["fallback_models"] == ["offlinechatmodel:offline"]
    failed = [r for r in fake_langsmith.in_trace(result.run_id) if r["run_type"] == "llm" and r.get("error")]
    assert failed, "the failed primary call is in the trace too"


async def test_the_crm_outage_that_opens_the_breaker_is_a_tagged_run_once(
    copilot_settings, sandbox, fake_langsmith
):
    # Long enough that the breaker stays open (no half-open probe re-opening it) in this test.
    traced = _settings(copilot_settings, sandbox, fake_langsmith, COPILOT_BREAKER_RESET_SECONDS=600)

    def echo_tool_result(messages: list[BaseMessage]) -> AIMessage:
        return AIMessage(content=message_text(messages[-1]))

    model = ScriptedChatModel(steps=[calls(call("get_account", account_id="acc-acme")), echo_tool_result] * 5)
    rep = await sign_in(traced, "alex")
    async with service(traced, model) as svc:
        sandbox.admin("PUT", "/admin/knobs", {"failure_rate": 1.0, "failure_kinds": ["503"]})
        turns = []
        while svc.breaker.state != "open":
            turns.append(await svc.run_turn(rep.identity, rep.broker, None, "how is acme"))
        fast = await svc.run_turn(rep.identity, rep.broker, None, "how is acme")
        svc.tracing.flush()

    assert fast.notice == "crm_unavailable"
    opened = fake_langsmith.tagged("breaker_open")
    events = [r for r in opened if r["name"] == "copilot.breaker_open"]
    assert len(events) == 1
    assert events[0]["inputs"]["failures"] == traced.breaker_failure_threshold
    assert events[0]["trace_id"] == turns[-1].run_id
    assert "breaker_open" in fake_langsmith.runs[events[0]["trace_id"]]["tags"]


# --- feedback from the rep ----------------------------------------------------------------------------


async def test_a_reps_thumbs_down_on_an_answer_becomes_masked_feedback_on_its_run(traced, fake_langsmith):
    rep = await sign_in(traced, "alex")
    model = ScriptedChatModel(
        steps=[calls(call("get_account", account_id="acc-acme"))], final="Acme [acc-acme]."
    )
    async with service(traced, model) as svc:
        answered = await svc.run_turn(rep.identity, rep.broker, None, "how is acme")
        assert answered.run_id is not None
        sent = await svc.tracing.record_feedback(
            answered.run_id, "dislike", f"Wrong, ask {COMMENT_EMAIL} or 206-555-0199"
        )
        with pytest.raises(InvalidInput, match="not a run id"):
            await svc.tracing.record_feedback("not-a-run", "like")
        svc.tracing.flush()

    assert sent is True
    (feedback,) = [f for f in fake_langsmith.feedback if f["key"] == "rep_rating"]
    assert feedback["run_id"] == answered.run_id == feedback["trace_id"]
    assert fake_langsmith.runs[answered.run_id]["name"] == "copilot.turn"
    assert feedback["score"] == 0
    assert feedback["value"] == "dislike"
    assert feedback["comment"] == "Wrong, ask [REDACTED_EMAIL] or [REDACTED_PHONE_NUMBER]"
    project = fake_langsmith.session_by_name(PROJECT)
    assert project is not None
    assert feedback["session_id"] == project["id"]
    _assert_nothing_secret(fake_langsmith, rep, COMMENT_EMAIL, "206-555-0199")


# --- tracing off ------------------------------------------------------------------------------------


async def test_with_tracing_off_nothing_is_sent_and_everything_still_works(
    copilot_settings, sandbox, fake_langsmith, monkeypatch
):
    from langsmith import run_helpers

    from copilot.tracing import untraced

    # As in a process that never traced (earlier tests in this one did).
    monkeypatch.setattr(untraced, "_tracing_in_process", False)
    # (thread, run) of every @traceable set-up LangChain's middleware-hook wrappers made.
    set_up: list[tuple[threading.Thread, object]] = []
    real_setup = run_helpers._setup_run

    def counted_setup(*args: Any, **kwargs: Any) -> Any:
        container = real_setup(*args, **kwargs)
        set_up.append((threading.current_thread(), container["new_run"]))
        return container

    monkeypatch.setattr(run_helpers, "_setup_run", counted_setup)
    settings = _settings(copilot_settings, sandbox, fake_langsmith, LANGSMITH_TRACING=False)
    rep = await sign_in(settings, "alex")
    async with service(settings, ScriptedChatModel(steps=[calls(_log("Untraced"))], final="Logged.")) as svc:
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call")
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": asked.proposals[0].tool_call_id, "type": "approve"}],
        )
        assert svc.tracing.enabled is False
        assert await svc.tracing.record_feedback(str(done.thread_id), "like") is False
        svc.tracing.flush()

    assert done.outcomes[0]["result"]["status"] == "done"
    assert asked.run_id is None
    assert done.run_id is None
    (row,) = await _audit_rows(settings)
    assert row.entry.trace_url is None
    assert fake_langsmith.received == []
    # The hooks keep LangChain's @traceable wrappers (no public way to compile without them);
    # each wrapper's set-up ran inline on the loop's thread, never in the pool, and traced nothing.
    assert set_up, "the middleware hooks went through @traceable"
    assert {thread for thread, _ in set_up} == {threading.current_thread()}
    assert {run for _, run in set_up} == {None}


async def test_an_unreachable_langsmith_fails_no_turn_and_no_write(copilot_settings, sandbox):
    with running_fake_langsmith() as gone:
        pass  # its port is closed again: nothing listens there
    settings = _settings(copilot_settings, sandbox, gone)
    rep = await sign_in(settings, "alex")
    async with service(
        settings, ScriptedChatModel(steps=[calls(_log("Unobserved"))], final="Logged.")
    ) as svc:
        assert svc.tracing.enabled
        asked = await svc.run_turn(rep.identity, rep.broker, None, "log a call")
        done = await svc.decide(
            rep.identity,
            rep.broker,
            asked.thread_id,
            [{"tool_call_id": asked.proposals[0].tool_call_id, "type": "approve"}],
        )

    assert done.outcomes[0]["result"]["status"] == "done"
    (row,) = await _audit_rows(settings)
    assert row.entry.trace_url is None  # the project was never found: no link to invent


# --- eval --langsmith: dataset and experiment ---------------------------------------------------------


def test_a_dataset_uploads_once_and_each_experiment_records_a_scored_run_per_item(traced, fake_langsmith):
    examples = [
        ExperimentExample(
            id="lookup-001",
            inputs={"question": "What is the amount of the Acme renewal?"},
            reference={"facts": ["120000"], "records": ["opp-acme-renewal"]},
            split="held_out",
        ),
        ExperimentExample(
            id="contact-002",
            inputs={"question": f"Who is {COMMENT_EMAIL}?"},
            reference={"records": ["con-0001"]},
            split="train",
        ),
    ]
    results = [
        ExperimentResult(
            example_id="lookup-001",
            outputs={"answer": "120,000 [opp-acme-renewal]"},
            scores={"correctness": 1.0, "grounded": True},
        ),
        ExperimentResult(
            example_id="contact-002",
            outputs={"answer": "Nothing found."},
            scores={"correctness": 0.0, "leak": None},
        ),
    ]
    first = record_experiment(
        traced, dataset_name="copilot-eval", examples=examples, results=results, experiment_name="offline-1"
    )
    again = record_experiment(
        traced,
        dataset_name="copilot-eval",
        examples=examples,
        results=results[:1],
        experiment_name="offline-2",
    )
    with pytest.raises(InvalidInput, match="not in the dataset"):
        record_experiment(
            traced,
            dataset_name="copilot-eval",
            examples=examples[:1],
            results=results,
            experiment_name="offline-3",
        )
    with pytest.raises(InvalidInput, match="exists already"):
        record_experiment(
            traced,
            dataset_name="copilot-eval",
            examples=examples,
            results=results,
            experiment_name="offline-1",
        )

    assert (first.examples_uploaded, again.examples_uploaded) == (2, 0)
    (dataset,) = fake_langsmith.datasets.values()
    assert dataset["name"] == "copilot-eval"
    assert dataset["id"] == first.dataset_id == again.dataset_id
    assert sorted(e["id"] for e in fake_langsmith.examples) == sorted(
        str(example_uuid("copilot-eval", e.id)) for e in examples
    )
    assert {e["split"] for e in fake_langsmith.examples} == {"held_out", "train"}
    experiment = fake_langsmith.sessions[first.experiment_id]
    assert experiment["name"] == "offline-1"
    assert experiment["reference_dataset_id"] == first.dataset_id
    assert experiment.get("end_time") is not None
    runs = [r for r in fake_langsmith.runs.values() if r.get("session_name") == "offline-1"]
    assert sorted(r["reference_example_id"] for r in runs) == sorted(e["id"] for e in fake_langsmith.examples)
    scores = {(f["run_id"], f["key"], f["score"]) for f in fake_langsmith.feedback}
    lookup_run = next(
        r["id"] for r in runs if r["reference_example_id"] == str(example_uuid("copilot-eval", "lookup-001"))
    )
    assert {(k, s) for run, k, s in scores if run == lookup_run} == {("correctness", 1.0), ("grounded", 1.0)}
    assert not any(k == "leak" for _, k, _ in scores)
    assert COMMENT_EMAIL.encode() not in fake_langsmith.all_bytes()
