"""The deployed payload: what ``.funcignore`` lets through is the product, and it runs on its own.

The payload is assembled from the working tree exactly as the Functions deployment tools do
(everything not matched by ``.funcignore``), copied to a folder of its own and imported there
in a fresh interpreter that cannot see the repository: ``function_app`` imports, its triggers
register, its health endpoint answers, and every module of the runtime packages imports (so
no product code reaches for a piece left out, such as the bench or the evals).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pathspec
import pytest

from tests.support.sandbox_process import PROJECT_ROOT

pytestmark = pytest.mark.integration

LOCAL_ONLY = ("tests/", "sandbox/", "bench/", "evals/", "offline_model/", "scripts/")
"""What must never ship: the stand-ins, the tests and the tooling."""

TRIGGERS = {"health", "messages", "turns", "turns_poison", "retention", "audit_seal", "briefs", "digest"}


def payload_files(root: Path) -> list[str]:
    """The files a deployment of ``root`` takes, as POSIX paths relative to it (sorted)."""
    spec = pathspec.GitIgnoreSpec.from_lines((root / ".funcignore").read_text().splitlines())
    files: list[str] = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder).relative_to(root)
        dirs[:] = sorted(d for d in dirs if d != ".git" and not spec.match_file(f"{(here / d).as_posix()}/"))
        for name in sorted(names):
            path = (here / name).as_posix()
            if not spec.match_file(path):
                files.append(path)
    return sorted(files)


@pytest.fixture(scope="module")
def payload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("payload")
    for path in payload_files(PROJECT_ROOT):
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT_ROOT / path, target / path)
    return target


def test_the_payload_holds_the_function_app_and_its_packages_and_none_of_the_local_tooling(payload: Path):
    files = sorted(p.relative_to(payload).as_posix() for p in payload.rglob("*") if p.is_file())
    for needed in ("function_app.py", "host.json", "requirements.txt"):
        assert needed in files
    for package in ("copilot/", "bot/", "functions/"):
        assert any(f.startswith(package) for f in files), package
    shipped = [f for f in files if f.startswith(LOCAL_ONLY)]
    assert shipped == [], f"local-only files in the deployed payload: {shipped[:10]}"


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
