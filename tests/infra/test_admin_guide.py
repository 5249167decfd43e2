"""docs/ADMIN.md stays runnable: each command in its code blocks is a ``make`` target of this
repository or a command run here, its cost figure is what the command prints, and it names
every module of the template."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from bench.cli import main as bench_main
from tests.infra.bicep import INFRA, ROOT

GUIDE = ROOT / "docs" / "ADMIN.md"
# Commands of the guide's code blocks that these tests run (the rest must be make targets).
RUN_HERE = {
    ("python", "-m", "bench", "capacity"): "test_the_cost_estimate_is_what_the_capacity_command_prints",
    # Section 11 (Connect Dynamics 365 Sales), run against the sandbox's Dataverse face by
    # tests/integration/test_doctor_dataverse.py.
    (
        "python",
        "-m",
        "copilot",
        "crm",
        "prepare",
    ): "test_every_command_of_the_admin_guides_dynamics_section_runs_against_the_emulator",
    (
        "python",
        "-m",
        "copilot",
        "doctor",
    ): "test_every_command_of_the_admin_guides_dynamics_section_runs_against_the_emulator",
}


def guide_commands() -> list[list[str]]:
    """Every command line in the guide's fenced code blocks."""
    commands, fenced = [], False
    for line in GUIDE.read_text().splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if fenced and line.strip() and not line.strip().startswith("#"):
            commands.append(shlex.split(line))
    assert commands, "the guide has no command"
    return commands


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


def _run_here(command: list[str]) -> str | None:
    for prefix, test in RUN_HERE.items():
        if tuple(command[: len(prefix)]) == prefix:
            return test
    return None


def test_every_command_in_the_guide_is_a_make_target_or_run_by_a_test():
    targets = make_targets()
    for command in guide_commands():
        if command[0] == "make":
            assert command[1] in targets, f"`{' '.join(command)}`: no make target {command[1]!r}"
        else:
            assert _run_here(command), f"`{' '.join(command)}` is neither a make target nor run by a test"


def test_the_cost_estimate_is_what_the_capacity_command_prints(capsys):
    (command,) = [
        c
        for c in guide_commands()
        if _run_here(c) == "test_the_cost_estimate_is_what_the_capacity_command_prints"
    ]
    assert bench_main(command[3:]) == 0
    printed = capsys.readouterr().out
    cost = re.search(r"LLM cost\s+\$(\d+)\.\d+/day", printed)
    assert cost, printed
    assert f"about ${cost.group(1)} a day" in GUIDE.read_text()
    instances = re.search(r"Functions instances\s+(\d+)", printed)
    assert instances, printed
    assert (
        f"{'one' if instances.group(1) == '1' else instances.group(1)} Functions instance"
        in GUIDE.read_text()
    )


@pytest.mark.integration
def test_the_migration_make_infra_database_runs_migrates_a_fresh_database(database_url):
    """``make infra-database`` runs ``<venv python> -m copilot db migrate`` at the repository's root
    (tests/infra/test_admin_setup_targets.py asserts the argv); here that command migrates."""
    done = subprocess.run(
        [sys.executable, "-m", "copilot", "db", "migrate"], cwd=ROOT, capture_output=True, text=True,
        timeout=300, check=False, env={**os.environ, "DATABASE_URL": database_url},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_guide_starts_with_its_step_count_and_keeps_the_budget():
    """The count line at the top is the table's, and within 12 commands and 10 portal steps."""
    text = GUIDE.read_text()
    count = re.search(r"\*\*From zero to a pilot: (\d+) commands and (\d+) portal steps\*\*", text)
    assert count, "docs/ADMIN.md does not start with its step count"
    assert text.index(count.group(0)) < text.index("\n## ")
    kinds = re.findall(r"^\| (\d+) \| (command|portal) \|", text, re.M)
    assert [int(number) for number, _ in kinds] == list(range(1, len(kinds) + 1))
    commands = sum(kind == "command" for _, kind in kinds)
    portal = sum(kind == "portal" for _, kind in kinds)
    assert (commands, portal) == (int(count.group(1)), int(count.group(2)))
    assert commands <= 12
    assert portal <= 10


def test_every_make_target_in_the_step_table_exists():
    targets = make_targets()
    table = re.findall(r"^\| \d+ \| command \| `make ([\w-]+)", GUIDE.read_text(), re.M)
    assert table
    assert set(table) <= targets


def test_the_guide_names_every_module_of_the_template_and_is_linked_from_the_readme():
    text = GUIDE.read_text()
    for module in sorted((INFRA / "modules").glob("*.bicep")):
        assert f"`{module.name}`" in text, f"docs/ADMIN.md does not say what {module.name} is for"
    assert "(docs/ADMIN.md)" in (ROOT / "README.md").read_text()
