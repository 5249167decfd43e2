"""The deployed payload: ``.funcignore`` is an allow-list, its payload is exactly the product,
and it runs on its own.

The payload is built from the working tree as the deployment tools build it
(``tests/support/payload.py``: Core Tools' own parser, and git's rules for the GitHub Action and
the VS Code extension). Both must give exactly ``function_app.py``, ``host.json``,
``requirements.txt``, ``copilot/``, ``bot/`` and ``functions/`` at the top, under a size
ceiling, also in a tree full of what a set-up checkout holds (the tools venvs, ``infra/``,
scratch files). The payload is then copied to a folder of its own and imported there in a
fresh interpreter that cannot see the repository: ``function_app`` imports, its triggers
register, its health endpoint answers, and every module of the runtime packages imports (so no
product code reaches for a piece left out, such as the bench or the evals).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.payload import core_tools_files, gitignore_files, top_level
from tests.support.sandbox_process import PROJECT_ROOT

pytestmark = pytest.mark.integration

PAYLOAD = {"function_app.py", "host.json", "requirements.txt", "copilot/", "bot/", "functions/"}
"""The whole top level of the deployed payload."""

SIZE_CEILING = 6 * 1024 * 1024
"""Bytes the payload may take: the sources are under 2 MB, their bytecode caches (which Core
Tools ships when present) about as much again; a stray venv or data folder is hundreds of MB."""

BUILDERS = {"core-tools": core_tools_files, "gitignore": gitignore_files}

TRIGGERS = {
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

# What a set-up checkout holds besides the product (make setup, an editor, a local run).
CLUTTER = [
    ".venv-infra/lib/python3.11/site-packages/checkov/__init__.py",
    ".venv/bin/python3",
    "infra/main.bicep",
    "infra/main.parameters.json",
    "requirements-infra.txt",
    "requirements-dev.txt",
    "local.settings.json",
    ".env",
    "notes.txt",
    "copilot_scratch/x.py",
    "bot.py.orig",
    "tests/test_x.py",
    "sandbox/app.py",
    "docs/ADMIN.md",
    ".data/postgres/PG_VERSION",
]


def payload_files(root: Path) -> list[str]:
    """The files ``func azure functionapp publish`` takes from ``root`` (Core Tools' reading)."""
    return core_tools_files(root)


@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_the_payload_is_exactly_the_function_app_and_its_three_packages_under_the_size_ceiling(builder):
    files = BUILDERS[builder](PROJECT_ROOT)
    assert top_level(files) == PAYLOAD, sorted(top_level(files) - PAYLOAD)
    size = sum((PROJECT_ROOT / f).stat().st_size for f in files)
    print(f"{builder}: {len(files)} files, {size} bytes; top level {sorted(top_level(files))}")
    assert size <= SIZE_CEILING, f"{builder}: the payload is {size} bytes"


MOVED_OUT = {
    "bot/echo_bot.py": "bench/echo_bot.py",
    "copilot/tracing/experiments.py": "evals/experiments.py",
    "copilot/capacity/model.py": "bench/capacity/model.py",
    "copilot/capacity/command.py": "bench/capacity/command.py",
}
"""Tooling that used to ship inside the product packages, and where it lives now."""


def test_the_echo_bot_the_experiments_and_the_capacity_model_are_tooling_outside_the_payload():
    files = core_tools_files(PROJECT_ROOT)
    for old, new in MOVED_OUT.items():
        assert old not in files
        assert (PROJECT_ROOT / new).is_file(), new
        assert new not in files


@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_what_a_set_up_checkout_holds_besides_the_product_stays_out(builder, tmp_path: Path):
    tree = tmp_path / "checkout"
    shutil.copytree(PROJECT_ROOT / "bot", tree / "bot", ignore=shutil.ignore_patterns("__pycache__"))
    for name in (".funcignore", "function_app.py", "host.json", "requirements.txt"):
        shutil.copy2(PROJECT_ROOT / name, tree / name)
    for package in ("copilot", "functions"):
        (tree / package).mkdir()
        (tree / package / "__init__.py").write_text("")
    for clutter in CLUTTER:
        (tree / clutter).parent.mkdir(parents=True, exist_ok=True)
        (tree / clutter).write_text("x")
    files = BUILDERS[builder](tree)
    assert top_level(files) == PAYLOAD
    assert not [f for f in files if f in CLUTTER]


@pytest.fixture(scope="module")
def payload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("payload")
    for path in payload_files(PROJECT_ROOT):
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT_ROOT / path, target / path)
    return target


PROBE = """
import importlib, json, pkgutil, sys
import azure.functions as func
import function_app

registered = function_app.app.get_functions()  # it refuses a second call
names = sorted(str(f.get_function_name()) for f in registered)
health = next(f for f in registered if f.get_function_name() == "health")
request = func.HttpRequest(method="GET", url="/api/health", body=b"", headers={})
response = health.get_user_function()(request)
failed = {}
for package in ("copilot", "bot", "functions"):
    module = importlib.import_module(package)
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except Exception as exc:
            failed[info.name] = f"{type(exc).__name__}: {exc}"
origins = sorted({m.__file__ for m in sys.modules.values() if getattr(m, "__file__", None)
                  and m.__name__.split(".")[0] in ("copilot", "bot", "functions", "function_app")})
print(json.dumps({"functions": names, "status": response.status_code,
                  "body": response.get_body().decode(), "failed": failed, "origins": origins}))
"""


def test_the_payload_alone_imports_registers_its_triggers_and_answers_health(payload: Path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=payload, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(seen["functions"]) == TRIGGERS
    assert seen["status"] == 200
    assert json.loads(seen["body"]) == {"status": "ok"}
    assert seen["failed"] == {}, seen["failed"]
    # Everything came from the payload folder, none of it from the repository.
    assert all(origin.startswith(str(payload)) for origin in seen["origins"]), seen["origins"][:5]
