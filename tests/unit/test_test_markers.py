"""Test markers are consistent: ``make unit`` runs exactly the tests that need no service."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def _marked_integration(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            return "integration" in ast.unparse(node.value)
    return False


@pytest.mark.parametrize("folder", ["integration", "e2e"])
def test_every_module_that_needs_services_is_marked_integration(folder):
    unmarked = [p.name for p in sorted((TESTS / folder).glob("test_*.py")) if not _marked_integration(p)]
    assert unmarked == []


def test_no_unit_test_module_is_marked_integration():
    marked = [p.name for p in sorted((TESTS / "unit").glob("test_*.py")) if _marked_integration(p)]
    assert marked == []
