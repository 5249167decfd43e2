"""Bad input to ``python -m copilot``: one ``error:`` line, exit code 2, nothing started.

Runs ``copilot.cli.main`` in-process with the sign-in and the service replaced by
recorders, so a test proves both the answer and that nothing was reached.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import pytest

from copilot import cli, cli_input
from copilot import cli_conversation as conversation
from copilot.auth import tokens as auth_tokens
from copilot.decisions import MAX_DEPTH, MAX_VALUES, Edit, edited_args, parse_decisions
from copilot.errors import AuthError, InvalidDecision, ThreadAccessDenied, ThreadNotFound
from copilot.persistence import threads
from copilot.turns import Proposal

THREAD = "AbCdEfGhIjKlMnOpQrStUvWxYz012345"  # the shape new_thread_id makes
APPROVE = json.dumps([{"tool_call_id": "call_1", "type": "approve"}])


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.fixture
def reached(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the command reached: ``sign-in:<rep>`` (the stub then fails as if the identity
    provider were down, exit 1) or ``service`` (never, with the stub sign-in)."""
    calls: list[str] = []
    # Nothing real is reachable either way (port 9: discard, refused).
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody:nothing@127.0.0.1:9/none")
    monkeypatch.setenv("ENTRA_AUTHORITY", "https://127.0.0.1:9")
    monkeypatch.setenv("CRM_MCP_URL", "http://127.0.0.1:9/mcp")

    async def sign_in(settings: Any, rep: str) -> str:
        calls.append(f"sign-in:{rep}")
        raise AuthError("the identity provider at https://127.0.0.1:9 is unreachable: refused")

    @asynccontextmanager
    async def open_service(settings: Any) -> AsyncIterator[Any]:
        calls.append("service")
        raise AssertionError("the service must not be opened")
        yield  # pragma: no cover

    monkeypatch.setattr(auth_tokens, "dev_sign_in", sign_in)
    monkeypatch.setattr(conversation, "open_service", open_service)
    return calls


class _Service:
    """A stand-in service whose every call raises ``error``."""

    def __init__(self, error: BaseException):
        self.error = error

    async def run_turn(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    async def decide(self, *args: Any) -> Any:
        raise self.error


@pytest.fixture
def service_raising(monkeypatch: pytest.MonkeyPatch, reached: list[str]) -> Callable[[BaseException], None]:
    """Sign-in succeeds and the service raises what the test sets."""

    def install(error: BaseException) -> None:
        async def sign_in(settings: Any, rep: str) -> tuple[Any, Any]:
            reached.append(f"sign-in:{rep}")
            return SimpleNamespace(name="Alex"), object()

        @asynccontextmanager
        async def open_service(settings: Any) -> AsyncIterator[Any]:
            reached.append("service")
            yield _Service(error)

        monkeypatch.setattr(conversation, "dev_sign_in_rep", sign_in)
        monkeypatch.setattr(conversation, "open_service", open_service)

    return install


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


def _bad_input(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = _run(capsys, *argv)
    line = _one_error_line(err)
    assert code == 2, line
    assert out == ""
    return line


# --- --decisions that cannot be read ------------------------------------------------------
# Each of these raised out of main (a traceback, exit 1) before.


def test_a_missing_decisions_file(capsys, reached, tmp_path):
    line = _bad_input(
        capsys, "resume", "--rep", "alex", "--thread", THREAD, "--decisions", f"@{tmp_path}/missing.json"
    )
    assert "no such file" in line
    assert reached == []


def test_a_directory_as_the_decisions_file(capsys, reached, tmp_path):
    line = _bad_input(capsys, "resume", "--rep", "alex", "--thread", THREAD, "--decisions", f"@{tmp_path}")
    assert "is a directory" in line
    assert reached == []


def test_a_decisions_file_that_is_not_utf8(capsys, reached, tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes('[{"tool_call_id": "c", "type": "reject", "reason": "caf\xe9"}]'.encode("latin-1"))
    line = _bad_input(capsys, "resume", "--rep", "alex", "--thread", THREAD, "--decisions", f"@{path}")
    assert "not UTF-8" in line
    assert reached == []


def test_a_decisions_file_with_a_byte_order_mark_is_read(capsys, reached, tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + APPROVE.encode())
    code, _, err = _run(capsys, "resume", "--rep", "alex", "--thread", THREAD, "--decisions", f"@{path}")
    assert code == 1  # got as far as signing in (the stub refuses)
    assert reached == ["sign-in:alex"]
    _one_error_line(err)


@pytest.mark.parametrize("where", ["inline", "file"])
def test_decisions_nested_50000_deep(capsys, reached, tmp_path, where):
    text = _deep(50_000)
    if where == "file":
        path = tmp_path / "deep.json"
        path.write_text(text, encoding="utf-8")
        text = f"@{path}"
    line = _bad_input(capsys, "resume", "--rep", "alex", "--thread", THREAD, "--decisions", text)
    assert "nested too deeply" in line
    assert reached == []


def test_a_decisions_file_larger_than_the_bound(capsys, reached, tmp_path):
    path = tmp_path / "huge.json"
    path.write_bytes(b" " * (conversation.MAX_DECISIONS_BYTES + 1))
    line = _bad_input(capsys, "resume", "--rep", "alex", "--thread", THREAD, "--decisions", f"@{path}")
    assert "larger than" in line
    assert reached == []


@pytest.mark.parametrize(
    ("decisions", "expected"),
    [
        ("{oops", "not valid JSON"),
        ("", "not valid JSON"),
        ("@", "needs a file name"),
        ("{}", "valid list"),
        ("[]", "no decisions"),
        ('"approve"', "valid list"),
        ("[1]", "invalid decisions (0)"),
        ('[{"type": "approve"}]', "tool_call_id"),
        ('[{"tool_call_id": "c", "type": "maybe"}]', "maybe"),
        ('[{"tool_call_id": "c", "type": "reject"}]', "reason"),
        ('[{"tool_call_id": "c", "type": "reject", "reason": ""}]', "reason"),
        ('[{"tool_call_id": 5, "type": "approve"}]', "tool_call_id"),
        ('[{"tool_call_id": "c", "type": "edit", "args": []}]', "args"),
        ('[{"tool_call_id": "c", "type": "approve", "extra": 1}]', "extra"),
        ('[{"tool_call_id": "c", "type": "approve"}, {"tool_call_id": "c", "type": "approve"}]', "twice"),
        ('[{"tool_call_id": "c", "type": "edit", "args": {"amount": NaN}}]', "NaN"),
        ('[{"tool_call_id": "c", "type": "edit", "args": {"amount": -Infinity}}]', "-Infinity"),
        ('[{"tool_call_id": "c", "type": "edit", "args": {"amount": 1e999}}]', "finite"),
        ('[{"tool_call_id": "c", "type": "edit", "args": {"amount": 1' + "0" * 5000 + "}}]", "digits"),
        ('[{"tool_call_id": "c", "type": "edit", "args": {"amount": 1' + "0" * 30 + "}}]", "too large"),
        ('[{"tool_call_id": "c", "type": "reject", "reason": "a\\u0000b"}]', "NUL"),
        ('[{"tool_call_id": "c", "type": "reject", "reason": "\\ud800"}]', "surrogate"),
        (json.dumps([{"tool_call_id": "c", "type": "edit", "args": {"x": json.loads(_deep(40))}}]), "levels"),
    ],
)
def test_malformed_decisions_fail_before_anything_starts(capsys, reached, decisions, expected):
    # Before, the list was only validated inside the service, after signing in and
    # opening the database; NaN, 1e999 and huge integers were not refused at all.
    line = _bad_input(capsys, "resume", "--rep", "alex", "--thread", THREAD, "--decisions", decisions)
    assert expected in line
    assert reached == []


# --- the other arguments ---------------------------------------------------------------------


@pytest.mark.parametrize("question", ["", "   ", "\n\t "])
def test_an_empty_question_is_refused_before_signing_in(capsys, reached, question):
    line = _bad_input(capsys, "ask", "--rep", "alex", question)
    assert "the question is empty" in line
    assert reached == []


@pytest.mark.parametrize("command", [["ask", "--rep", "", "hi"], ["chat", "--rep", "  "]])
def test_an_empty_rep_is_refused(capsys, reached, command):
    line = _bad_input(capsys, *command)
    assert "--rep is empty" in line
    assert reached == []


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["ask", "--rep", "alex", "caf\udce9"], "the question is not valid UTF-8"),
        (["ask", "--rep", "alex", "a\x00b"], "the question contains a NUL"),
        (["ask", "--rep", "al\udcffex", "hi"], "--rep is not valid UTF-8"),
        (["ask", "--rep", "al\x00ex", "hi"], "--rep contains a NUL"),
        (["ask", "--rep", "alex", "--thread", THREAD[:-1] + "\x00", "hi"], "--thread contains a NUL"),
    ],
)
def test_text_the_services_cannot_carry_is_refused(capsys, reached, argv, expected):
    # Non-UTF-8 command-line bytes arrive as lone surrogates; NUL cannot be stored by
    # PostgreSQL. Before, both went on to the identity provider and the database.
    line = _bad_input(capsys, *argv)
    assert expected in line
    assert reached == []


@pytest.mark.parametrize("thread", ["-x", "short", "../../etc/passwd-aaaaaaaaaaaaa", "a" * 201, THREAD + " "])
def test_something_that_is_no_thread_id_is_refused(capsys, reached, thread):
    line = _bad_input(capsys, "ask", "--rep", "alex", f"--thread={thread}", "hi")
    assert "is not a conversation thread id" in line
    assert reached == []


def test_thread_equals_form_takes_an_id_that_starts_with_a_dash(capsys, reached):
    old_style = "-" + THREAD[1:]  # about 1 in 64 ids made before the generator was fixed
    assert (
        cli._parser().parse_args(["ask", "--rep", "alex", f"--thread={old_style}", "hi"]).thread == old_style
    )
    code, _, err = _run(capsys, "ask", "--rep", "alex", f"--thread={old_style}", "hi")
    assert reached == ["sign-in:alex"]  # the id passed every check
    assert code == 1  # (the stub identity provider is down)
    _one_error_line(err)


def test_thread_as_a_separate_word_cannot_start_with_a_dash(capsys):
    # Why generated ids must never start with "-": argparse reads it as an option.
    with pytest.raises(SystemExit) as exited:
        cli.main(["ask", "--rep", "alex", "--thread", "-" + THREAD[1:], "hi"])
    assert exited.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_an_unknown_rep_is_bad_input(capsys, monkeypatch, reached):
    async def unknown(settings: Any, rep: str) -> str:
        reached.append(f"sign-in:{rep}")
        raise AuthError(
            f"sign-in as {rep!r} failed: AADSTS50034: The user account {rep} does not exist in the "
            "directory. To sign into this application, the account must be added to the directory."
        )

    monkeypatch.setattr(auth_tokens, "dev_sign_in", unknown)
    line = _bad_input(capsys, "ask", "--rep", "nobody", "hi")  # exit 1 before
    assert "unknown rep 'nobody'" in line


def test_an_unreachable_identity_provider_is_not_bad_input(capsys, reached):
    code, _, err = _run(capsys, "ask", "--rep", "alex", "hi")
    assert code == 1
    assert "unreachable" in _one_error_line(err)


@pytest.mark.parametrize(
    "error",
    [
        ThreadNotFound("this conversation thread does not exist (it may have expired); start a new one"),
        ThreadAccessDenied("you do not have access to this conversation thread"),
    ],
)
@pytest.mark.parametrize("command", ["ask", "resume"])
def test_a_thread_that_is_unknown_or_not_yours_is_bad_input(capsys, service_raising, error, command):
    service_raising(error)
    argv = (
        ["ask", "--rep", "alex", "--thread", THREAD, "hi"]
        if command == "ask"
        else ["resume", "--rep", "alex", "--thread", THREAD, "--decisions", APPROVE]
    )
    line = _bad_input(capsys, *argv)  # exit 1 before
    assert error.message in line


def test_an_error_message_is_always_one_line(capsys, service_raising):
    # e.g. a tool_call_id with newlines in it, quoted back (two lines or more before).
    service_raising(InvalidDecision("proposal call\n\nx is not waiting\r\nfor a decision"))
    line = _bad_input(capsys, "resume", "--rep", "alex", "--thread", THREAD, "--decisions", APPROVE)
    assert line == "error: proposal call  x is not waiting for a decision"


def test_a_huge_error_message_is_shortened(capsys, service_raising):
    service_raising(InvalidDecision("proposal " + "x" * 100_000 + " is not waiting"))
    line = _bad_input(capsys, "resume", "--rep", "alex", "--thread", THREAD, "--decisions", APPROVE)
    assert len(line) <= len("error: ") + cli.MAX_ERROR_CHARS
    assert line.endswith("…")


def test_an_unexpected_failure_is_one_line_not_a_traceback(capsys, service_raising):
    service_raising(RuntimeError("boom"))
    code, _, err = _run(capsys, "ask", "--rep", "alex", "hi")  # raised out of main before
    assert code == 1
    assert _one_error_line(err) == "error: unexpected internal error (RuntimeError): boom"


def test_invalid_configuration_is_one_line(capsys, reached, monkeypatch):
    monkeypatch.setenv("COPILOT_DB_POOL_MAX", "many")  # a pydantic ValidationError before
    code, _, err = _run(capsys, "ask", "--rep", "alex", "hi")
    assert code == 1
    assert "COPILOT_DB_POOL_MAX" in _one_error_line(err)


def test_a_deployment_left_on_the_offline_model_is_one_line_naming_the_setting(capsys, reached, monkeypatch):
    deployed = {
        "COPILOT_ENVIRONMENT": "deployed",
        "MicrosoftAppId": "0f1e2d3c-4b5a-4697-8877-665544332211",
        "MicrosoftAppPassword": "a-real-secret",
        "CRM_MCP_URL": "https://crm.contoso.example/mcp",
        "GRAPH_BASE_URL": "https://graph.microsoft.com/v1.0",
        "ENTRA_AUTHORITY": "https://login.microsoftonline.com",
    }
    for name, value in deployed.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("COPILOT_MODEL", raising=False)
    monkeypatch.delenv("COPILOT_DEV_SIGN_IN_PASSWORD", raising=False)
    code, _, err = _run(capsys, "ask", "--rep", "alex", "hi")
    assert code == 1
    assert "refuses COPILOT_MODEL=offline" in _one_error_line(err)
    assert reached == [], "nothing started"


def test_chat_input_that_is_not_utf8_ends_the_chat_as_bad_input(capsys, service_raising, monkeypatch):
    service_raising(AssertionError("not reached"))

    def undecodable(prompt: str = "") -> str:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    monkeypatch.setattr("builtins.input", undecodable)
    code, _, err = _run(capsys, "chat", "--rep", "alex")  # a traceback before
    assert code == 2
    assert "not UTF-8" in _one_error_line(err)


def test_an_edit_reply_with_an_unclosed_quote_is_asked_again():
    proposal = Proposal(
        tool_call_id="call_1",
        tool="update_opportunity",
        args={},
        record=None,
        description="",
        interrupt_id="i",
    )
    with pytest.raises(InvalidDecision, match="cannot read that edit"):  # ValueError (shlex) before
        conversation.parse_reply('edit stage="Negotiation', proposal)


# --- the decisions parser and what walks the value -------------------------------------------


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _edit(args: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"tool_call_id": "call_1", "type": "edit", "args": args}]


def test_parse_decisions_refuses_deep_nesting_without_recursing():
    # Accepted before (edit args are ``Any``), to blow up later wherever the value was walked.
    with pytest.raises(InvalidDecision, match=f"more than {MAX_DEPTH} levels"):
        parse_decisions(_edit({"notes": _nested(100_000)}))
    parse_decisions(_edit({"notes": _nested(MAX_DEPTH - 3)}))  # within the bound: fine


def test_parse_decisions_ends_on_self_referencing_data():
    loop: list[Any] = []
    loop.append(loop)
    loop.append(loop)
    with pytest.raises(InvalidDecision):
        parse_decisions(_edit({"notes": loop}))


def test_parse_decisions_bounds_the_number_of_values():
    many = [{"tool_call_id": f"call_{i}", "type": "approve"} for i in range(MAX_VALUES)]
    with pytest.raises(InvalidDecision, match=f"more than {MAX_VALUES} values"):
        parse_decisions(many)


@pytest.mark.parametrize(
    "args",
    [
        {"notes": "a\x00b"},
        {"no\x00tes": "x"},
        {"notes": "\ud800"},
        {"amount": float("nan")},
        {"amount": float("inf")},
        {"amount": 2**63},
        {"amount": -(2**63) - 1},
    ],
)
def test_parse_decisions_refuses_values_no_store_can_hold(args):
    with pytest.raises(InvalidDecision):  # all accepted before
        parse_decisions(_edit(args))


def test_a_deep_value_in_an_edit_is_reported_without_recursing():
    # validation_problems quoted the rejected value with a plain repr: RecursionError before.
    edit = Edit.model_construct(
        tool_call_id="call_1", type="edit", args={"stage": _nested(100_000)}, tool=None
    )
    with pytest.raises(InvalidDecision, match="stage"):
        edited_args("update_opportunity", {"opportunity_id": "opp-1", "stage": "Proposal"}, edit)


# --- thread ids --------------------------------------------------------------------------------


def test_a_thread_id_never_starts_with_a_dash(monkeypatch):
    draws = iter(["-" + THREAD[1:], "_" + THREAD[1:]])
    monkeypatch.setattr(threads.secrets, "token_urlsafe", lambda nbytes: next(draws))
    assert threads.new_thread_id() == "_" + THREAD[1:]  # the first draw was returned before


def test_generated_thread_ids_are_random_url_safe_and_never_an_option():
    ids = [threads.new_thread_id() for _ in range(5000)]  # (63/64)**5000: no "-" start by chance
    assert len(set(ids)) == len(ids)
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 32 and cli_input._THREAD_ID.fullmatch(i) for i in ids)
