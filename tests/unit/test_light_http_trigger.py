"""Indexing the Function App, and its HTTP edge, import nothing of the agent.

The Functions worker indexes a Python v2 app by importing ``function_app``, which imports
every blueprint; a cold start pays for whatever they import at module level. The agent
stack (LangChain, LangGraph, MCP, the runner, the models) costs seconds and only the turn
needs it, so it is loaded on first use by the queue trigger and the retention timer
(``bot.runtime.open_runtime``), never by indexing or by ``POST /api/messages`` enqueueing
an activity (``tests/integration/test_light_http_trigger.py`` posts one for real).

Each check runs in a fresh interpreter: this test process has long imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

AGENT_PREFIXES = (
    "langchain",  # also langchain_core, langchain_mcp_adapters, langchain_openai, ...
    "langgraph",
    "mcp",
    "copilot.agent",
    "copilot.runner",
    "copilot.models",
    "offline_model",
)


def is_agent_module(name: str) -> bool:
    """Whether ``name`` is part of the agent stack the HTTP trigger must not import."""
    for prefix in AGENT_PREFIXES:
        if prefix in ("langchain", "langgraph"):
            if name.startswith(prefix):
                return True
        elif name == prefix or name.startswith(prefix + "."):
            return True
    return False


def modules_after(code: str) -> list[str]:
    """``sys.modules`` after running ``code`` in a fresh interpreter at the project root."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    modules: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return modules


def test_the_predicate_catches_the_agent_stack_and_nothing_else():
    assert all(
        map(
            is_agent_module,
            [
                "langchain",
                "langchain.agents",
                "langchain_core.messages",
                "langchain_mcp_adapters.client",
                "langgraph.checkpoint.postgres.aio",
                "mcp",
                "mcp.client.session",
                "copilot.agent",
                "copilot.runner",
                "offline_model",
            ],
        )
    )
    assert not any(
        map(is_agent_module, ["mcpx", "copilot.agents_x", "copilot.settings", "copilot.persistence.pool"])
    )


def test_indexing_the_function_app_imports_nothing_of_the_agent():
    modules = modules_after("import function_app")
    assert "function_app" in modules
    assert [name for name in modules if is_agent_module(name)] == []


def test_indexing_the_function_app_imports_only_azure_functions_and_the_blueprints():
    # What makes the import about as fast as a bare ``import azure.functions``: botbuilder,
    # the database driver, the storage SDK and the settings are the first request's (or
    # message's) imports, not the indexer's.
    modules = modules_after("import function_app")
    late = ("botbuilder", "botframework", "psycopg", "azure.storage", "azure.identity", "pydantic_settings")
    assert [name for name in modules if name.startswith(late)] == []
    ours = {name for name in modules if name.split(".")[0] in ("bot", "copilot", "functions")}
    assert ours == {
        "bot",
        "functions",
        "functions.audit_seal",
        "functions.briefs",
        "functions.digest",
        "functions.doctor_http",
        "functions.followthrough",
        "functions.health",
        "functions.messages",
        "functions.retention",
        "functions.turns",
    }


def test_the_http_edge_imports_nothing_of_the_agent():
    # Everything POST /api/messages imports to enqueue an activity (it opens only the edge).
    modules = modules_after(
        "import function_app, bot.activity_input, bot.runtime, functions.dedupe, functions.envelope, "
        "functions.host"
    )
    assert "bot.runtime" in modules
    assert [name for name in modules if is_agent_module(name)] == []
    assert "bot.handler" not in modules, "the bot handler imports the runner: it is the turn's"
