"""The Azure Functions app imports and its functions answer when invoked directly."""

from __future__ import annotations

import json
from typing import Any

import azure.functions as func


def registered() -> dict[str, Any]:
    """The app's functions by name, as the Functions worker indexes them.

    ``FunctionApp.get_functions()`` records the names it returns and refuses to return
    them a second time (the worker calls it once per process); forget them first.
    """
    import function_app

    function_app.app.functions_bindings = None
    return {str(f.get_function_name()): f for f in function_app.app.get_functions()}


def test_function_app_registers_the_health_function():
    functions = registered()
    assert "health" in functions
    response = functions["health"].get_user_function()(
        func.HttpRequest(method="GET", url="/api/health", body=b"", headers={})
    )
    assert response.status_code == 200
    assert json.loads(response.get_body()) == {"status": "ok"}


def _trigger(name: str) -> dict[str, Any]:
    functions = registered()
    assert name in functions, f"{name} is not registered"
    bindings: list[dict[str, Any]] = json.loads(functions[name].get_function_json())["bindings"]
    triggers = [b for b in bindings if str(b["type"]).endswith("Trigger")]
    assert len(triggers) == 1
    return triggers[0]


def test_function_app_registers_every_function_with_its_trigger():
    assert set(registered()) == {
        "health",
        "messages",
        "turns",
        "turns_poison",
        "retention",
        "audit_seal",
        "briefs",
        "digest",
        "followthrough",
        "doctor",
    }


def test_the_briefs_timer_runs_every_five_minutes():
    trigger = _trigger("briefs")
    assert trigger["type"] == "timerTrigger"
    assert trigger["schedule"] == "0 */5 * * * *"


def test_the_digest_timer_runs_every_fifteen_minutes():
    trigger = _trigger("digest")
    assert trigger["type"] == "timerTrigger"
    assert trigger["schedule"] == "0 */15 * * * *"


def test_messages_is_an_anonymous_post_route():
    # The Bot Framework JWT is the authentication, not a function key.
    trigger = _trigger("messages")
    assert trigger["type"] == "httpTrigger"
    assert trigger["route"] == "messages"
    assert trigger["methods"] == ["POST"]
    assert str(trigger["authLevel"]).lower() == "anonymous"


def test_the_doctor_route_takes_the_master_key_only():
    trigger = _trigger("doctor")
    assert trigger["type"] == "httpTrigger"
    assert trigger["route"] == "doctor"
    assert trigger["methods"] == ["GET"]
    assert str(trigger["authLevel"]).lower() == "admin"


async def test_the_doctor_route_answers_the_report_alone_with_503_on_a_failure_and_no_rep_token(monkeypatch):
    import functions.doctor
    from copilot.doctor.framework import Check, CheckFailed, DoctorContext

    seen: list[DoctorContext] = []

    async def passing(ctx: DoctorContext) -> str:
        seen.append(ctx)
        return "fine"

    async def failing(ctx: DoctorContext) -> str:
        raise CheckFailed("MicrosoftAppPassword is wrong", setting="MicrosoftAppPassword", fix="set it")

    checks = (Check("one.passing", passing), Check("two.failing", failing))
    monkeypatch.setattr(functions.doctor, "all_checks", lambda: checks)
    monkeypatch.setenv("COPILOT_DOCTOR_CRM_TOKEN", "a-reps-token")
    doctor = registered()["doctor"].get_user_function()
    response = await doctor(func.HttpRequest(method="GET", url="/api/doctor", body=b"", headers={}))
    assert response.status_code == 503
    report = json.loads(response.get_body())
    assert set(report) == {"ok", "environment", "checks"}
    assert [(c["name"], c["status"]) for c in report["checks"]] == [
        ("one.passing", "pass"),
        ("two.failing", "fail"),
    ]
    assert report["checks"][1]["setting"] == "MicrosoftAppPassword"
    # Nothing runs as a rep: the rep token variable the CLI reads is not handed to the checks.
    assert seen[0].crm_token is None

    monkeypatch.setattr(functions.doctor, "all_checks", lambda: checks[:1])
    response = await doctor(func.HttpRequest(method="GET", url="/api/doctor", body=b"", headers={}))
    assert response.status_code == 200


def test_the_turn_queue_name_comes_from_settings_with_the_bot_default(monkeypatch):
    from bot.settings import BotSettings
    from functions.turns import turn_queue_name

    monkeypatch.delenv("COPILOT_TURN_QUEUE", raising=False)
    assert turn_queue_name() == BotSettings().queue_name
    monkeypatch.setenv("COPILOT_TURN_QUEUE", "other-queue")
    assert turn_queue_name() == "other-queue"


def test_turns_and_poison_read_the_turn_queue_and_its_poison_queue():
    # The name is fixed when the app is indexed (an earlier test may have set it).
    from functions.turns import TURN_QUEUE

    expected = TURN_QUEUE
    turns, poison = _trigger("turns"), _trigger("turns_poison")
    assert turns["type"] == poison["type"] == "queueTrigger"
    assert turns["queueName"] == expected
    assert poison["queueName"] == f"{expected}-poison"
    assert turns["connection"] == poison["connection"] == "AzureWebJobsStorage"


def test_retention_runs_daily_on_a_timer():
    trigger = _trigger("retention")
    assert trigger["type"] == "timerTrigger"
    seconds, minutes, hours, day, month, weekday = str(trigger["schedule"]).split()
    assert (day, month, weekday) == ("*", "*", "*")
    assert all(part.isdigit() for part in (seconds, minutes, hours))


def test_the_audit_seal_runs_every_seal_interval_the_docs_state():
    from datetime import timedelta

    from copilot.persistence.audit import SEAL_INTERVAL

    trigger = _trigger("audit_seal")
    assert trigger["type"] == "timerTrigger"
    seconds, minutes, hours, day, month, weekday = str(trigger["schedule"]).split()
    assert (seconds, hours, day, month, weekday) == ("0", "*", "*", "*", "*")
    assert minutes.startswith("*/")
    assert timedelta(minutes=int(minutes[2:])) == SEAL_INTERVAL
    # The documented bound is this interval.
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert f"within {int(SEAL_INTERVAL.total_seconds() // 60)} minutes" in docs


def test_host_json_matches_the_triggers():
    from pathlib import Path

    host = json.loads((Path(__file__).resolve().parents[2] / "host.json").read_text())
    assert host["extensionBundle"]["version"] == "[4.*, 5.0.0)"
    assert host["extensions"]["http"]["routePrefix"] == "api"
    queues = host["extensions"]["queues"]
    # The HTTP trigger enqueues base64 (TextBase64EncodePolicy): the trigger must decode it.
    assert queues["messageEncoding"] == "base64"
    assert queues["maxDequeueCount"] == 5
    assert "functionTimeout" in host


def _runtime_imports(path: str) -> set[str]:
    """Modules a file imports at run time (``if TYPE_CHECKING:`` blocks are for the type checker)."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[2] / path).read_text(encoding="utf-8"))
    type_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for node in ast.walk(block)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_http_trigger_leaves_botbuilder_to_bot():
    # botbuilder is bot/'s business: the trigger and its queue message only call bot/ (the
    # edge checks in bot.activity_input and bot.runtime are shared with the dev server).
    for path in ("functions/messages.py", "functions/envelope.py", "functions/dedupe.py"):
        imports = _runtime_imports(path)
        assert not {name for name in imports if name.startswith(("botbuilder", "botframework"))}, path
    assert "bot.activity_input" in _runtime_imports("functions/messages.py")


def test_the_edge_check_is_pure():
    # No I/O and no botbuilder: both hosts and the queue consumer can run it anywhere.
    imports = _runtime_imports("bot/activity_input.py")
    assert imports <= {
        "__future__",
        "ipaddress",
        "json",
        "math",
        "re",
        "dataclasses",
        "typing",
        "urllib.parse",
        "pydantic",
    }


def test_with_identity_based_storage_the_turn_queue_is_reached_with_the_managed_identity(monkeypatch):
    # Shared keys off (the template): no connection string, only AzureWebJobsStorage__* settings.
    from azure.identity.aio import ManagedIdentityCredential

    from bot.settings import BotSettings
    from functions.host import turn_queue_client

    monkeypatch.delenv("AzureWebJobsStorage", raising=False)
    monkeypatch.setenv("AzureWebJobsStorage__queueServiceUri", "https://copilotstore.queue.core.windows.net")
    monkeypatch.setenv("AzureWebJobsStorage__clientId", "11111111-2222-4333-8444-555555555555")
    monkeypatch.setenv("COPILOT_TURN_QUEUE", "copilot-turns")

    client = turn_queue_client(BotSettings())

    assert client.url == "https://copilotstore.queue.core.windows.net/copilot-turns"
    assert isinstance(client.credential, ManagedIdentityCredential)


def test_without_a_queue_service_uri_the_turn_queue_uses_the_connection_string(monkeypatch):
    from bot.settings import BotSettings
    from functions.host import turn_queue_client

    monkeypatch.delenv("AzureWebJobsStorage__queueServiceUri", raising=False)
    monkeypatch.setenv("AzureWebJobsStorage", "UseDevelopmentStorage=true")

    client = turn_queue_client(BotSettings())

    assert client.url.startswith("http://127.0.0.1:10001/devstoreaccount1/")
