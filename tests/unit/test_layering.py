"""Dependencies point one way: functions/ → bot/ → copilot/; sandbox/ only over the network."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TOOLING = {"bench", "evals", "offline_model", "sandbox", "tests"}
"""Local-only packages: never shipped, never imported by the product at module level."""

FORBIDDEN = {
    "copilot": {"bot", "functions", "botbuilder", "azure.functions", "function_app"} | TOOLING,
    "bot": {"functions", "azure.functions", "function_app"} | TOOLING,
    "functions": TOOLING,
    "sandbox": {"copilot", "bot", "functions", "function_app"},
}

LAZY_ENTRY_POINTS = {
    "copilot/cli.py": {"functions.doctor"},
    "copilot/cli_data.py": {"functions.rep_data"},
    "copilot/models/factory.py": {"offline_model"},
}
"""The only places the product reaches local-only tooling, inside the function that needs it
(``COPILOT_MODEL=offline``): never at import time.

One upward reach too: ``python -m copilot doctor`` is the preflight of the whole deployed
app, so the CLI's ``_doctor`` imports ``functions.doctor`` (which composes the copilot's,
the bot's and the Functions app's checks, each defined in its own layer) for that command
only, inside the function, never at import time; nothing else of bot/ or functions/. Likewise
``data delete`` reaches ``functions.rep_data`` (the rep's sign-in at the token service and their
queued turns, which only the top layer knows) inside ``cli_data.default_erasers``."""

# Inside copilot/, lower layers never import the ones above them (farm-studio's floors).
BELOW = {
    "copilot/tls.py": {"copilot.tools", "copilot.agent_tools", "copilot.writes", "copilot.middleware"},
    "copilot/redaction.py": {"copilot.middleware", "copilot.tracing", "copilot.agent_tools"},
    "copilot/tools": {"copilot.context", "copilot.writes", "copilot.agent_tools", "copilot.middleware"},
    "copilot/writes": {"copilot.agent_tools", "copilot.middleware", "copilot.runner", "copilot.agent"},
    "copilot/auth": {"copilot.tools", "copilot.agent_tools", "copilot.middleware"},
    "copilot/knowledge": {"copilot.tools", "copilot.agent_tools", "copilot.middleware"},
    "copilot/tracing": {"copilot.middleware", "copilot.agent_tools", "copilot.runner"},
    "copilot/grounding": {"copilot.middleware", "copilot.runner", "copilot.agent"},
}


def _imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    names: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_what_the_layering_allows(package: str):
    offending = []
    for path in sorted((ROOT / package).rglob("*.py")):
        lazy = LAZY_ENTRY_POINTS.get(path.relative_to(ROOT).as_posix(), set())
        for name in _imports(path):
            if _banned(name, FORBIDDEN[package]) and not _banned(name, lazy):
                offending.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offending == []


def _banned(name: str, banned: set[str]) -> bool:
    return any(name == b or name.startswith(b + ".") for b in banned)


def _product_files() -> list[Path]:
    return [p for package in ("copilot", "bot", "functions") for p in sorted((ROOT / package).rglob("*.py"))]


def test_local_only_tooling_is_reached_only_lazily_from_its_entry_points():
    offending = []
    for path in _product_files():
        relative = path.relative_to(ROOT).as_posix()
        allowed = LAZY_ENTRY_POINTS.get(relative, set())
        for name in _imports(path):
            if _banned(name, TOOLING) and not _banned(name, allowed):
                offending.append(f"{relative} imports {name}")
        # Even an entry point imports its tooling (or its one upward reach) inside a
        # function, never at import time.
        offending += [
            f"{relative} imports {n} at import time"
            for n in _imports(path, top_level_only=True)
            if _banned(n, TOOLING | allowed)
        ]
    assert offending == []


@pytest.mark.parametrize("layer", sorted(BELOW))
def test_a_lower_layer_of_copilot_never_imports_one_above_it(layer: str):
    target = ROOT / layer
    files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    offending = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        for name in _imports(path)
        if _banned(name, BELOW[layer])
    ]
    assert offending == []


BENCH_AND_EVALS = {"bench", "evals"}
"""The tooling with entry points of its own (``python -m bench run|capacity``, ``python -m evals``)."""


def test_no_product_module_imports_the_bench_or_the_evals_even_lazily():
    files = [*_product_files(), ROOT / "function_app.py"]
    offending = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        for name in _imports(path)
        if _banned(name, BENCH_AND_EVALS)
    ]
    assert offending == []


def test_the_product_cli_offers_no_bench_eval_or_capacity_command():
    done = subprocess.run(
        [sys.executable, "-m", "copilot", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    commands = done.stdout.split("{", 1)[1].split("}", 1)[0].split(",")
    assert "ask" in commands, done.stdout
    assert not {"bench", "eval", "evals", "capacity"} & set(commands), commands
