"""Proof: the command line never prints a traceback, and bad input changes nothing (invariant 10: clear errors, never a stack trace).

Hypothesis drives ``copilot.cli.main`` in-process with arbitrary argument lists and
arbitrary ``--decisions`` (random text and bytes, files that are missing, directories or
not UTF-8, nesting 60,000 deep, huge numbers, NaN and infinities, lone surrogates, NUL).
Every run must end in exit code 0, 1 or 2 (argparse's own ``SystemExit`` included) and
never in an uncaught exception or a ``Traceback``; an error is exactly one ``error:``
line; and bad input (exit 2) is refused before anyone signs in.

Most examples fail while parsing, with the sign-in replaced by a recorder and nothing
reachable. A smaller set runs ``resume`` against a real thread with a pending proposal
on a migrated PostgreSQL and the sandbox CRM, with decisions that are always invalid
somewhere (at parsing, a duplicate, an unknown proposal, an edit the tool refuses, a rep
who does not own the thread, an unknown rep or thread): each must exit 2 and leave the
database and the sandbox exactly as they were. A few subprocess runs check the exact
cases of the issue end to end (the other malformed decisions run as processes in
``tests/integration/test_cli_conversation.py``).

``COPILOT_SOAK=1`` (``make soak``) runs the full counts.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import patch

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from copilot import cli
from copilot.auth import tokens as auth_tokens
from copilot.errors import AuthError
from copilot.persistence import threads
from copilot.settings import Settings
from tests.adversarial.counts import Tally, count
from tests.support.sandbox_process import PROJECT_ROOT, SandboxProcess

THREAD = "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
UNREACHABLE = {
    # Port 9 (discard): refused at once. Nothing a parse-level example does can reach a service.
    "DATABASE_URL": "postgresql://nobody:nothing@127.0.0.1:9/none",
    "ENTRA_AUTHORITY": "https://127.0.0.1:9",
    "CRM_MCP_URL": "http://127.0.0.1:9/mcp",
    "GRAPH_BASE_URL": "http://127.0.0.1:9/v1.0",
}
FUZZ = settings(
    deadline=None,
    database=None,  # no .hypothesis/ directory in the repository
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


# --- running main in-process ------------------------------------------------------------------


@dataclass
class Outcome:
    code: int | str | None
    exited: bool  # SystemExit (argparse) rather than a returned code
    stdout: str
    stderr: str
    crashed: str | None = None


def _main(argv: list[str]) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err), patch.object(sys, "stdin", io.StringIO("")):
            code = cli.main(argv)
    except SystemExit as exc:
        return Outcome(exc.code, True, out.getvalue(), err.getvalue())
    except Exception as exc:  # an uncaught exception is exactly what this suite looks for
        return Outcome(None, False, out.getvalue(), err.getvalue(), crashed=f"{type(exc).__name__}: {exc}")
    return Outcome(code, False, out.getvalue(), err.getvalue())


def _problem(outcome: Outcome) -> str | None:
    """What is wrong with how ``main`` ended, if anything (None: clean)."""
    if outcome.crashed:
        return f"uncaught {outcome.crashed[:300]}"
    if "Traceback" in outcome.stderr or "Traceback" in outcome.stdout:
        return f"a traceback: {outcome.stderr[-300:]!r}"
    if outcome.exited:
        # argparse: 2 for a usage error (usage + message), 0 for --help.
        return None if outcome.code in (0, 2) else f"SystemExit({outcome.code!r})"
    if outcome.code not in (0, 1, 2):
        return f"exit code {outcome.code!r}"
    if outcome.code != 0:
        lines = outcome.stderr.splitlines()
        errors = [line for line in lines if line.startswith("error: ")]
        if len(errors) != 1 or lines[-1] != errors[0]:
            return f"not one error line: {outcome.stderr[-300:]!r}"
        if "unexpected internal error" in errors[0]:
            return errors[0][:300]
    return None


@contextmanager
def _nothing_reachable() -> Iterator[list[str]]:
    """Sign-in replaced by a recorder that fails like an unreachable identity provider."""
    reached: list[str] = []

    async def sign_in(settings: Any, rep: str) -> str:
        reached.append(rep)
        raise AuthError("the identity provider at https://127.0.0.1:9 is unreachable: refused")

    with pytest.MonkeyPatch.context() as mp:
        for name, value in UNREACHABLE.items():
            mp.setenv(name, value)
        mp.setattr(auth_tokens, "dev_sign_in", sign_in)
        yield reached


# --- what --decisions can be --------------------------------------------------------------------

SURROGATES = st.characters(categories=["Cs"])
ANY_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(st.one_of(st.characters(), SURROGATES, st.just("\x00")), max_size=20),
    st.binary(max_size=40).map(lambda b: b.decode("utf-8", "surrogateescape")),  # non-UTF-8 argv
)
NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=2**63 - 2, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
)
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), NUMBERS, ANY_TEXT),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=16,
)
FIELDS = ("stage", "close_date", "amount", "subject", "notes", "type", "account_id", "opportunity_id")
DECISION_LIKE = st.fixed_dictionaries(
    {
        "tool_call_id": st.one_of(st.text(max_size=12), st.just("call_1"), JSON_VALUES),
        "type": st.one_of(
            st.sampled_from(["approve", "edit", "reject", "maybe", "", "APPROVE"]), JSON_VALUES
        ),
    },
    optional={
        "reason": st.one_of(
            st.text(max_size=20), st.just(""), st.text(min_size=1001, max_size=1001), JSON_VALUES
        ),
        "args": st.one_of(st.dictionaries(st.sampled_from(FIELDS), JSON_VALUES, max_size=3), JSON_VALUES),
        "tool": st.one_of(st.none(), st.text(max_size=12)),
        "extra": JSON_VALUES,
    },
)


def _dumps(value: Any) -> str | None:
    try:
        return json.dumps(value, allow_nan=True)
    except (UnicodeEncodeError, ValueError):
        return None


@dataclass(frozen=True)
class Spec:
    """One ``--decisions`` to try: inline text, a file's bytes, or a special path."""

    kind: str  # "inline" | "file" | "missing" | "directory" | "path"
    payload: str | bytes = ""
    must_fail: bool = False  # known to be bad input: exit 2 before signing in


def _deep(depth: int, shape: str) -> str:
    if shape == "list":
        return "[" * depth + "]" * depth
    if shape == "object":
        return '{"a":' * depth + "1" + "}" * depth
    return '[{"tool_call_id": "c", "type": "edit", "args": {"notes": ' + "[" * depth + "]" * depth + "}}]"


DEEP = st.builds(
    lambda depth, shape, as_file: Spec(
        "file" if as_file else "inline",
        _deep(depth, shape).encode() if as_file else _deep(depth, shape),
        True,
    ),
    st.one_of(st.integers(40, 200), st.integers(200, 60_000)),
    st.sampled_from(["list", "object", "args"]),
    st.booleans(),
)
HUGE_NUMBERS = st.builds(
    lambda digits, template: Spec("inline", template.replace("N", "1" + "0" * digits), True),
    st.integers(19, 6000),
    st.sampled_from(
        [
            '[{"tool_call_id": "c", "type": "edit", "args": {"amount": N}}]',
            '[{"tool_call_id": "c", "type": "edit", "args": {"amount": -N}}]',
            '[{"tool_call_id": "c", "type": "edit", "args": {"amount": 1e9N}}]',
        ]
    ),
)
NOT_NUMBERS = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e400"]).map(
    lambda n: Spec("inline", f'[{{"tool_call_id": "c", "type": "edit", "args": {{"amount": {n}}}}}]', True)
)
NOT_UTF8 = st.builds(
    lambda text, codec: Spec("file", text.encode(codec), True),
    st.just('[{"tool_call_id": "c", "type": "reject", "reason": "caf\xe9"}]'),
    st.sampled_from(["latin-1", "utf-16", "utf-32", "cp1252"]),
).filter(lambda spec: _not_utf8(spec.payload))
SPECIAL = st.one_of(
    st.just(Spec("missing", must_fail=True)),
    st.just(Spec("directory", must_fail=True)),
    st.just(Spec("inline", "@", must_fail=True)),
    st.just(Spec("inline", "@a\x00b", must_fail=True)),
    st.just(Spec("inline", "@" + "x" * 300, must_fail=True)),
    st.text(max_size=30).map(lambda t: Spec("path", t)),
)
DECISIONS = st.one_of(
    ANY_TEXT.map(lambda t: Spec("inline", t)),
    st.binary(max_size=200).map(lambda b: Spec("file", b, _not_utf8(b))),
    JSON_VALUES.map(_dumps).filter(bool).map(lambda t: Spec("inline", str(t))),
    st.one_of(st.lists(DECISION_LIKE, max_size=4), DECISION_LIKE)
    .map(_dumps)
    .filter(bool)
    .flatmap(lambda t: st.sampled_from([Spec("inline", str(t)), Spec("file", str(t).encode())])),
    DEEP,
    HUGE_NUMBERS,
    NOT_NUMBERS,
    NOT_UTF8,
    SPECIAL,
)


PARSE_FAILURES = st.one_of(DEEP.filter(lambda spec: spec.kind == "inline"), HUGE_NUMBERS, NOT_NUMBERS).map(
    lambda spec: str(spec.payload)
)


def _not_utf8(data: str | bytes) -> bool:
    assert isinstance(data, bytes)
    try:
        data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return True
    return False


class _Files:
    """Materialises a :class:`Spec` into the ``--decisions`` argument."""

    def __init__(self, root: Path):
        self.root = root
        self.n = 0
        (root / "a-directory").mkdir(exist_ok=True)

    def argument(self, spec: Spec) -> str:
        if spec.kind == "inline":
            assert isinstance(spec.payload, str)
            return spec.payload
        if spec.kind == "missing":
            return f"@{self.root}/missing-{self.n}.json"
        if spec.kind == "directory":
            return f"@{self.root}/a-directory"
        if spec.kind == "path":
            # One name in the fuzz directory (no "/"), so it never reaches a file elsewhere:
            # missing, or a directory for "", "." and "..".
            assert isinstance(spec.payload, str)
            return f"@{self.root}/{spec.payload.replace('/', '_')}"
        self.n += 1
        path = self.root / f"decisions-{self.n}.json"
        assert isinstance(spec.payload, bytes)
        path.write_bytes(spec.payload)
        return f"@{path}"


# --- the parse-level suites ----------------------------------------------------------------------


def test_fuzz_resume_decisions_never_crash_and_bad_ones_fail_before_signing_in(tmp_path_factory):
    files = _Files(tmp_path_factory.mktemp("cli-fuzz-decisions"))
    tally = Tally("cli fuzz: --decisions (in-process)")

    @settings(FUZZ, max_examples=count(200, 2000))
    @given(spec=DECISIONS, as_json=st.booleans())
    def one(spec: Spec, as_json: bool) -> None:
        # --decisions=VALUE: a value starting with "-" would be an option otherwise.
        argv = ["resume", "--rep", "alex", "--thread", THREAD, f"--decisions={files.argument(spec)}"]
        with _nothing_reachable() as reached:
            outcome = _main([*argv, *(["--json"] if as_json else [])])
        problem = _problem(outcome)
        if problem is None and outcome.exited:
            problem = "argparse refused a well-formed command line"
        if problem is None and outcome.code == 2 and reached:
            problem = "exit 2 after signing in"
        if problem is None and outcome.code == 1 and not reached:
            problem = f"exit 1 without signing in: {outcome.stderr!r}"
        if problem is None and spec.must_fail and outcome.code != 2:
            problem = f"known-bad decisions got exit {outcome.code}: {outcome.stderr!r}"
        tally.record(problem is None, f"{spec!r:.200}: {problem}")
        assert problem is None, problem

    try:
        one()
    finally:
        tally.report()
    assert tally.failures == 0


WORDS = st.sampled_from(
    [
        "ask", "resume", "chat", "db", "migrate", "audit", "verify", "--rep", "--thread",
        "--decisions", "--json", "alex", "megan", "nobody", THREAD, "-" + THREAD[1:],
        f"--thread={THREAD}", f"--thread=-{THREAD[1:]}", "--thread=", "--rep=", "[]", "{}",
        '[{"tool_call_id": "c", "type": "approve"}]', "@", "@/nonexistent/x.json", "", " ",
        "what's going on with Acme?", "-", "--", "-h", "--help",
    ]
)  # fmt: skip
ARGV = st.one_of(
    st.lists(st.one_of(WORDS, ANY_TEXT), max_size=8),
    st.tuples(
        st.sampled_from(["ask", "resume", "chat"]), st.lists(st.one_of(WORDS, ANY_TEXT), max_size=7)
    ).map(lambda t: [t[0], *t[1]]),
    st.tuples(st.sampled_from(["--rep", "--thread"]), ANY_TEXT, ANY_TEXT).map(
        lambda t: (
            ["ask", "--rep", "alex", t[0], t[1], t[2]] if t[0] == "--thread" else ["ask", t[0], t[1], t[2]]
        )
    ),
)


def _acceptable_text(text: str) -> bool:
    surrogates = any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    return bool(text.strip()) and "\x00" not in text and not surrogates


def _may_sign_in(args: argparse.Namespace) -> str | None:
    """Why these arguments are bad input that must never get as far as signing in (None: fine).

    The contract, written independently of the CLI's own checks: a non-blank rep, a
    thread id of the generator's alphabet and length, a non-blank question, all UTF-8
    text without NUL. (Decisions are fuzzed by the suite above.)
    """
    if not _acceptable_text(args.rep):
        return f"rep {args.rep!r}"
    thread = getattr(args, "thread", None)
    if thread is not None and not (
        22 <= len(thread) <= 200 and all(c.isascii() and (c.isalnum() or c in "-_") for c in thread)
    ):
        return f"thread {thread!r}"
    if args.command == "ask" and not _acceptable_text(args.question):
        return f"question {args.question!r}"
    return None


def test_fuzz_any_argv_never_crashes(tmp_path_factory):
    tally = Tally("cli fuzz: any argv (in-process)")

    @settings(FUZZ, max_examples=count(200, 2000))
    @given(argv=ARGV)
    def one(argv: list[str]) -> None:
        with _nothing_reachable() as reached:
            outcome = _main(argv)
        problem = _problem(outcome)
        if problem is None and not outcome.exited:
            args = cli._parser().parse_args(argv)  # argparse accepted it in main too
            if args.command in ("ask", "resume", "chat"):
                bad = _may_sign_in(args)
                if bad and reached:
                    problem = f"signed in despite bad input ({bad})"
                elif not bad and args.command != "resume" and not reached:
                    problem = f"good input refused: {outcome.stderr!r}"
                elif outcome.code != (1 if reached else 2):
                    problem = f"exit {outcome.code} ({'after' if reached else 'before'} signing in)"
            elif outcome.code != 1:  # db / audit: the database is unreachable
                problem = f"exit {outcome.code} for {args.command}"
        tally.record(problem is None, f"{argv!r:.200}: {problem}")
        assert problem is None, problem

    try:
        one()
    finally:
        tally.report()
    assert tally.failures == 0


# --- against a real thread: bad decisions change nothing ----------------------------------------


def _env_of(settings: Settings) -> dict[str, str]:
    """The environment that ``Settings()`` in ``main`` reads back as ``settings``."""
    assert settings.database_url is not None
    return {
        "DATABASE_URL": settings.database_url.get_secret_value(),
        "CRM_MCP_URL": settings.crm_mcp_url,
        "GRAPH_BASE_URL": settings.graph_base_url,
        "ENTRA_AUTHORITY": settings.entra_authority,
        "ENTRA_CA_BUNDLE": str(settings.entra_ca_bundle),
        "COPILOT_TOOL_RETRY_INITIAL_DELAY": "0.01",
        "COPILOT_TOOL_RETRY_MAX_DELAY": "0.05",
    }


def _snapshot(database_url: str, sandbox: SandboxProcess) -> dict[str, Any]:
    """Every row of every table, and the sandbox's state: what bad input must not change.

    Left out: ``threads.last_active_at`` (opening a thread marks it active) and the
    sandbox's ``request_log`` (it logs reads).
    """
    state: dict[str, Any] = {}
    with psycopg.connect(database_url, autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name"
            )
        ]
        for table in tables:
            rows = conn.execute(
                sql.SQL("SELECT to_jsonb(t) - 'last_active_at' FROM {} t").format(sql.Identifier(table))
            ).fetchall()
            state[f"db.{table}"] = sorted(json.dumps(row[0], sort_keys=True) for row in rows)
    exported = sandbox.admin("GET", "/admin/export")
    exported.pop("request_log", None)
    state["sandbox"] = exported
    return state


@dataclass(frozen=True)
class RealThread:
    thread_id: str
    tool_call_id: str


def _poison(real: RealThread) -> st.SearchStrategy[tuple[str, list[Any] | str]]:
    """A reason the whole request is refused, and where it is found.

    Mostly past parsing (the suites above cover parsing at length): a thread is opened,
    the pending proposals are read, and only then is the request refused.
    """
    call = real.tool_call_id
    unknown = {"tool_call_id": "call_not_pending", "type": "approve"}
    at_parsing = st.one_of(
        PARSE_FAILURES,
        st.sampled_from(
            [
                [{"tool_call_id": call, "type": "maybe"}],
                [{"tool_call_id": call, "type": "reject", "reason": ""}],
                [{"tool_call_id": call, "type": "approve", "x": 1}],
                [{"tool_call_id": call, "type": "approve"}] * 2,
            ]
        ),
    )
    edits_refused = st.sampled_from(
        [
            {"type": "Daydream"},
            {"account_id": None, "opportunity_id": None},
            {"subject": ""},
            {"subject": "x" * 100_000},
            {"unknown_field": "x"},
            {"type": ["call"]},
        ]
    ).map(lambda args: [{"tool_call_id": call, "type": "edit", "args": args}])
    return st.one_of(
        st.tuples(st.just("parsing"), at_parsing),
        st.tuples(st.just("not pending"), st.just([unknown])),
        st.tuples(st.just("not pending"), st.just([{"tool_call_id": call, "type": "approve"}, unknown])),
        st.tuples(
            st.just("not pending"),
            st.just([{"tool_call_id": call, "type": "reject", "reason": "no"}, unknown]),
        ),
        st.tuples(st.just("edit refused"), edits_refused),
        st.tuples(
            st.just("tool changed"),
            st.just([{"tool_call_id": call, "type": "edit", "args": {}, "tool": "update_opportunity"}]),
        ),
    )


@pytest.mark.integration
def test_fuzz_bad_decisions_against_a_real_thread_change_nothing(copilot_settings, sandbox):
    env = _env_of(copilot_settings)
    assert copilot_settings.database_url is not None
    url = copilot_settings.database_url.get_secret_value()
    with patch.dict(os.environ, env):
        asked = _main(
            [
                "ask",
                "--rep",
                "alex",
                "--json",
                "log a call with Acme — discussed pricing, next step send proposal",
            ]
        )
    assert asked.code == 0, asked.stderr
    proposal = json.loads(asked.stdout)["proposals"][0]
    real = RealThread(json.loads(asked.stdout)["thread_id"], proposal["tool_call_id"])
    before = _snapshot(url, sandbox)
    tally = Tally("cli fuzz: bad decisions against a real thread")

    @settings(FUZZ, max_examples=count(20, 200))
    @given(
        poison=_poison(real),
        rep=st.sampled_from(["alex", "alex", "alex", "megan", "nobody-at-all"]),
        thread=st.sampled_from(
            [real.thread_id, real.thread_id, real.thread_id, threads.new_thread_id(), "-x"]
        ),
        as_json=st.booleans(),
    )
    def one(poison: tuple[str, list[Any] | str], rep: str, thread: str, as_json: bool) -> None:
        where, decisions = poison
        text = decisions if isinstance(decisions, str) else json.dumps(decisions)
        argv = [
            "resume",
            "--rep",
            rep,
            f"--thread={thread}",
            f"--decisions={text}",
            *(["--json"] if as_json else []),
        ]
        with patch.dict(os.environ, env):
            outcome = _main(argv)
        problem = _problem(outcome)
        if problem is None and outcome.code != 2:
            problem = f"exit {outcome.code} for decisions refused at {where}: {outcome.stderr!r}"
        if problem is None and _snapshot(url, sandbox) != before:
            problem = f"state changed (decisions refused at {where})"
        tally.record(problem is None, f"{rep} {thread[:8]} {where} {text[:120]!r}: {problem}")
        assert problem is None, problem

    try:
        one()
    finally:
        tally.report()
    assert tally.failures == 0
    # The proposal is still pending and still approvable: nothing was decided.
    with patch.dict(os.environ, env):
        approved = _main(
            [
                "resume", "--rep", "alex", "--thread", real.thread_id, "--json", "--decisions",
                json.dumps([{"tool_call_id": real.tool_call_id, "type": "approve"}]),
            ]
        )  # fmt: skip
    assert approved.code == 0, approved.stderr
    assert json.loads(approved.stdout)["outcomes"][0]["result"]["status"] == "done"


# --- the exact cases, as processes ---------------------------------------------------------


@pytest.mark.integration
def test_the_exact_cases_as_processes(copilot_settings, sandbox, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | _env_of(copilot_settings)
    assert copilot_settings.database_url is not None
    url = copilot_settings.database_url.get_secret_value()
    with patch.dict(os.environ, _env_of(copilot_settings)):
        asked = _main(["ask", "--rep", "alex", "--json", "log a task for Acme: send contract"])
    assert asked.code == 0, asked.stderr
    thread_id = json.loads(asked.stdout)["thread_id"]
    call = json.loads(asked.stdout)["proposals"][0]["tool_call_id"]
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(
        f'[{{"tool_call_id": "{call}", "type": "reject", "reason": "caf\xe9"}}]'.encode("latin-1")
    )
    deep = "[" * 50_000 + "]" * 50_000
    deep_file = tmp_path / "deep.json"
    deep_file.write_text(deep, encoding="utf-8")
    resume = ["resume", "--rep", "alex", "--thread", thread_id, "--decisions"]
    unknown = "-" + threads.new_thread_id()[1:]  # the shape of an old id: only --thread= reaches it
    cases: dict[str, tuple[list[str], str]] = {
        "missing file": ([*resume, "@/missing.json"], "no such file"),
        "directory": ([*resume, f"@{tmp_path}"], "is a directory"),
        "not UTF-8": ([*resume, f"@{latin1}"], "not UTF-8"),
        "50,000 deep inline": ([*resume, deep], "nested too deeply"),
        "50,000 deep file": ([*resume, f"@{deep_file}"], "nested too deeply"),
        "unknown thread": (["ask", "--rep", "alex", f"--thread={unknown}", "hi"], "does not exist"),
        "unknown rep": (["ask", "--rep", "nobody-at-all", "hi"], "unknown rep"),
        "empty question": (["ask", "--rep", "alex", "   "], "the question is empty"),
    }
    before = _snapshot(url, sandbox)
    tally = Tally("cli fuzz: the issue's cases as processes")

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "copilot", *argv],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )

    def check(name: str, done: subprocess.CompletedProcess[str], expected: str) -> str | None:
        one_line = len(done.stderr.splitlines()) == 1 and done.stderr.startswith("error: ")
        if done.returncode == 2 and one_line and "Traceback" not in done.stderr and expected in done.stderr:
            return None
        return f"{name}: exit {done.returncode}, stderr {done.stderr[-300:]!r}"

    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        results = dict(zip(cases, pool.map(run, [argv for argv, _ in cases.values()]), strict=True))
    for name, done in results.items():
        problem = check(name, done, cases[name][1])
        tally.record(problem is None, problem or "")
    tally.record(_snapshot(url, sandbox) == before, "the database or the sandbox changed")
    tally.assert_clean()
