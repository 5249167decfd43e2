"""``python -m evals``'s arguments: which models run, and bad input refused (exit 2)
before anything is started."""

from __future__ import annotations

import pytest

from copilot.settings import Settings
from evals.cli import main
from evals.command import models_to_run


def test_the_primary_model_and_each_fallback_get_a_table_unless_one_model_is_named() -> None:
    settings = Settings(COPILOT_MODEL="offline", COPILOT_FALLBACK_MODELS="openai:a, openai:b,offline")
    assert models_to_run(settings, None) == ["offline", "openai:a", "openai:b"]
    assert models_to_run(settings, "openai:c") == ["openai:c"]


def test_the_evals_own_lazy_model_is_named_scripted_lazy() -> None:
    assert models_to_run(Settings(COPILOT_MODEL="offline"), "scripted:lazy") == ["scripted:lazy"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "gpt"], "--model must be 'offline' or 'provider:model'"),
        (["--model", "scripted:eager"], "no scripted model 'scripted:eager' (known: scripted:lazy)"),
        (["--limit", "0"], "--limit must be at least 1"),
        (["--check"], "--check goes with --generate"),
        (["--dataset", "no-such-split"], "no dataset at"),
    ],
)
def test_bad_eval_arguments_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1
