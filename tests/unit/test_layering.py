"""Dependencies point one way: functions/ → bot/ → copilot/; sandbox/ only over the network."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FORBIDDEN = {
    "copilot": {"bot", "functions", "sandbox", "botbuilder", "azure.functions", "function_app"},
    "bot": {"functions", "sandbox", "azure.functions", "function_app"},
    "functions": {"sandbox"},
    "sandbox": {"copilot", "bot", "functions", "function_app"},
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_what_the_layering_allows(package: str):
    offending = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in _imports(path):
            if any(name == banned or name.startswith(banned + ".") for banned in FORBIDDEN[package]):
                offending.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offending == []
