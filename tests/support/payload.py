"""The Function App's payload as the deployment tools build it from ``.funcignore``.

Two readings of the same file, since the tools differ:

* **Core Tools** (``func azure functionapp publish``): a port of its ``GitIgnoreParser`` (itself
  a port of codemix's ``gitignore-parser``) and ``GetLocalFiles``. Every file under the root is
  walked, except ``.git``/``.vscode`` folders and files named ``.funcignore``, ``.gitignore``,
  ``local.settings.json`` or ``project.lock.json``; a file ships when any ``!`` pattern matches
  its path or no other pattern does. Patterns match as regular expressions anchored at the
  start of the path only (``*`` is ``[^/]+``, ``**`` is ``.+``), whatever their order.
* **gitignore** (the GitHub Action, the VS Code extension): git's own rules (the last matching
  pattern wins; a file under an excluded folder cannot be re-included), via ``pathspec``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pathspec

CORE_TOOLS_SKIPPED_DIRS = {".git", ".vscode"}
CORE_TOOLS_SKIPPED_FILES = {".funcignore", ".gitignore", "local.settings.json", "project.lock.json"}


def _core_tools_regex(patterns: list[str]) -> re.Pattern[str]:
    """Core Tools' ``PrepareRegexPattern``, joined as ``^((p1)|(p2)…)``; none matches nothing."""
    if not patterns:
        return re.compile(r"$^")
    prepared = [
        re.sub(r"[\-\[\]/{}()+?.\\^$|]", lambda m: "\\" + m.group(0), p)
        .replace("**", "(.+)")
        .replace("*", "([^\\/]+)")
        for p in sorted(patterns)
    ]
    return re.compile("^((" + ")|(".join(prepared) + "))")


def core_tools_accepts(funcignore: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(positive, negative) regexes of Core Tools' parser for ``funcignore``'s text."""
    positive: list[str] = []
    negative: list[str] = []
    for raw in funcignore.split("\n"):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        line = line[1:] if negated else line
        line = line[1:] if line.startswith("/") else line
        (negative if negated else positive).append(line)
    return _core_tools_regex(positive), _core_tools_regex(negative)


def core_tools_files(root: Path) -> list[str]:
    """The files ``func azure functionapp publish`` would zip from ``root`` (POSIX, sorted)."""
    positive, negative = core_tools_accepts((root / ".funcignore").read_text())
    files: list[str] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in CORE_TOOLS_SKIPPED_DIRS)
        here = Path(folder).relative_to(root)
        for name in names:
            if name.lower() in CORE_TOOLS_SKIPPED_FILES:
                continue
            path = (here / name).as_posix()
            if negative.match(path) or not positive.match(path):
                files.append(path)
    return sorted(files)


def gitignore_files(root: Path) -> list[str]:
    """The files a tool with git's ignore rules would take from ``root`` (POSIX, sorted)."""
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


def top_level(files: list[str]) -> set[str]:
    """The top-level entries of ``files``: a file's name, or a folder's name with a slash."""
    return {path.split("/", 1)[0] + ("/" if "/" in path else "") for path in files}
