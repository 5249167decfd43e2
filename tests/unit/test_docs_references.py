"""The docs cannot go stale silently: every file path and every ``module.symbol`` they name in
backticks exists.

A path may be written from the repository root (``copilot/agent.py``) or, as the
architecture page does, from inside a runtime package (``middleware/pii.py``); a dotted name
whose first part is one of the project's packages (``copilot.grounding.COULD_NOT_LOOK_UP``)
must import and resolve. Placeholders (``<name>``), globs and shell commands are not names.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pathspec
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = ("copilot", "bot", "functions", "sandbox", "tests")
BASES = (ROOT, *(ROOT / p for p in PACKAGES))
_TICKED = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"^[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*/?$")
_DOTTED = re.compile(r"^[a-z_][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+$")
_SUFFIXES = (
    ".py",
    ".md",
    ".json",
    ".jsonl",
    ".sql",
    ".txt",
    ".sh",
    ".mjs",
    ".bicep",
    ".yaml",
    ".yml",
    ".toml",
)


def _references() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for doc in DOCS:
        in_fence = False
        for line in doc.read_text().splitlines():
            if line.lstrip().startswith("```"):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            for token in _TICKED.findall(line):
                token = token.strip()
                if any(c in token for c in "<>*{} ") or token.startswith(("-", "$", "http")):
                    continue
                found.append((doc.name, token))
    return found


def _is_path(token: str) -> bool:
    return "/" in token and bool(_PATH.match(token)) and (token.endswith("/") or token.endswith(_SUFFIXES))


_GENERATED = pathspec.GitIgnoreSpec.from_lines((ROOT / ".gitignore").read_text().splitlines())
"""What the commands make (``.venv/``, ``.data/``, ``test-artifacts/``): absent from a fresh clone."""


def _path_exists(token: str) -> bool:
    if _GENERATED.match_file(token):
        return True
    return any((base / token.rstrip("/")).exists() for base in BASES)


def _is_dotted(token: str) -> bool:
    return bool(_DOTTED.match(token)) and token.split(".")[0] in PACKAGES and not token.endswith(_SUFFIXES)


def _resolves(token: str) -> bool:
    parts = token.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def test_every_file_path_the_docs_name_exists():
    missing = sorted({f"{doc}: {t}" for doc, t in _references() if _is_path(t) and not _path_exists(t)})
    assert missing == []


_PATH_THEN_SYMBOL = re.compile(r"`([A-Za-z0-9_./\-]+\.py)`\s+`([A-Za-z_][A-Za-z0-9_.]*)`")


def _defined_in(path: Path, symbol: str) -> bool:
    """Whether every part of ``symbol`` (``Class.method`` too) is defined in the file."""
    source = path.read_text()
    return all(
        re.search(
            rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(part)}\b|^\s*{re.escape(part)}\s*[:=]",
            source,
            re.M,
        )
        for part in symbol.split(".")
    )


def _paired() -> list[tuple[str, str, str]]:
    """``file.py`` `Symbol` pairs: the symbol is named as a definition of that file."""
    pairs: list[tuple[str, str, str]] = []
    for doc in DOCS:
        for line in doc.read_text().splitlines():
            for path, symbol in _PATH_THEN_SYMBOL.findall(line):
                pairs.append((doc.name, path, symbol))
    return pairs


def test_every_symbol_named_beside_its_file_is_defined_there():
    missing = []
    for doc, path, symbol in _paired():
        files = [base / path for base in BASES if (base / path).is_file()]
        if files and not any(_defined_in(f, symbol) for f in files):
            missing.append(f"{doc}: {path} {symbol}")
    assert sorted(set(missing)) == []


def test_every_module_symbol_the_docs_name_resolves():
    missing = sorted({f"{doc}: {t}" for doc, t in _references() if _is_dotted(t) and not _resolves(t)})
    assert missing == []


@pytest.mark.parametrize(
    ("token", "path", "dotted"),
    [
        ("copilot/agent.py", True, False),
        ("middleware/pii.py", True, False),
        ("copilot.grounding.COULD_NOT_LOOK_UP", False, True),
        ("python -m evals", False, False),
        ("COPILOT_MODEL", False, False),
    ],
)
def test_the_checker_tells_paths_and_dotted_names_from_other_code(token, path, dotted):
    assert _is_path(token) is path
    assert _is_dotted(token) is dotted


def test_the_checker_finds_a_stale_name():
    assert not _path_exists("copilot/no_such_module.py")
    assert _path_exists("test-artifacts/e2e/")  # made by the tests, not in a fresh clone
    assert not _resolves("copilot.prompts.SYSTEM_PROMPT")
    assert _resolves("copilot.prompts.system_prompt")


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in doc.read_text().splitlines() if line.startswith("#")}


def test_every_relative_link_in_the_docs_reaches_a_file_and_heading_that_exist():
    broken = []
    for doc in DOCS:
        for target in _LINK.findall(doc.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (doc.parent / path).resolve() if path else doc
            if not linked.exists():
                broken.append(f"{doc.name}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert broken == []
