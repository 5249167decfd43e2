"""Hypothesis fuzzing of both HTTP hosts: arbitrary JSON and bytes, with a valid token and without.

Hosts: the dev server deployed (app credentials), the Function App's HTTP trigger, and
the dev server in local development mode (no credentials: every body is judged without
a token). Bodies: arbitrary JSON values; a valid Teams activity with fields replaced by
arbitrary JSON or removed; raw bytes (random, or JSON cut and flipped). Every example
must be answered with one of the statuses the edge means (200/202 accepted, 400, 401,
413; an accepted invoke whose turn is only recorded is botbuilder's 501), never a 500;
nothing logged at ERROR or with a traceback; quickly; and a refused request changes
nothing — no turn started, no queue message, nothing sent to the connector, nothing
looked up or contacted beyond this machine. Turns of accepted activities are recorded,
not run: this suite is about the edge.

CI runs ``count(150, 2000)`` examples per host (``make soak``: 2,000).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.activity_input import ACTIVITY_TYPES
from bot.runtime import BotRuntime
from copilot.settings import Settings
from tests.adversarial.counts import Tally, count
from tests.integration.test_bot_dev_server import (
    DevServerHost,
    OutboundWatch,
    deployed_bot_settings,
    dev_server,
)
from tests.integration.test_function_app import FunctionAppHost, Teams, deployed_function_app
from tests.support.azurite import Azurite, run_azurite
from tests.support.channel_tokens import ChannelTokens
from tests.support.fake_connector import FakeConnector
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

HttpHost = DevServerHost | FunctionAppHost
SERVICE_URL = "<the host's connector>"
"""Placeholder in generated bodies for the fake connector's URL (known only at run time)."""

# --- strategies ----------------------------------------------------------------------------------------------

INTERESTING_STRINGS = st.sampled_from(
    [
        "",
        " ",
        "msteams",
        "webchat",
        "emulator",
        "28:bot",
        "mention",
        "adaptiveCard/action",
        "signin/tokenExchange",
        "signin/verifyState",
        "composeExtension/query",
        "task/fetch",
        "Action.Execute",
        SERVICE_URL,
        "not a url",
        "http://",
        "https://smba.evil.example/",
        "ftp://127.0.0.1/",
        " http://127.0.0.1/",
        "http://[::1",
        "2026-01-05T10:00:00.000Z",
        "9999-99-99T99:99:99Z",
        "\x00",
        "\ud800",
        "<at>CRM Copilot</at>",
        *sorted(ACTIVITY_TYPES),
    ]
)
TEXT = st.text(st.characters(exclude_categories=()), max_size=24) | INTERESTING_STRINGS
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | TEXT
)
JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(TEXT, children, max_size=5),
    max_leaves=24,
)

FIELDS = [
    "type",
    "id",
    "channelId",
    "serviceUrl",
    "conversation",
    "conversation.id",
    "conversation.isGroup",
    "conversation.tenantId",
    "from",
    "from.id",
    "from.aadObjectId",
    "recipient",
    "recipient.id",
    "text",
    "name",
    "value",
    "value.action",
    "replyToId",
    "membersAdded",
    "membersRemoved",
    "entities",
    "attachments",
    "channelData",
    "channelData.tenant",
    "channelData.team",
    "timestamp",
    "localTimestamp",
    "locale",
    "textFormat",
    "suggestedActions",
]
MUTATION = st.tuples(
    st.sampled_from(FIELDS),
    st.one_of(
        st.just(("delete", None)),
        st.tuples(st.just("set"), JSON),
        st.tuples(st.just("set"), st.sampled_from(sorted(ACTIVITY_TYPES))),
    ),
)


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, Any]:
    """(kind, what): arbitrary JSON, a mutated activity (applied at run time), or raw bytes."""
    kind = draw(st.sampled_from(["json", "activity", "activity", "bytes", "cut-json", "deep"]))
    if kind == "json":
        return kind, draw(JSON)
    if kind == "deep":
        return kind, (
            draw(st.sampled_from(FIELDS)),
            draw(st.integers(1, 20_000)),
            draw(st.sampled_from("[{")),
        )
    if kind == "activity":
        return kind, draw(st.lists(MUTATION, min_size=1, max_size=3))
    if kind == "bytes":
        return kind, draw(st.binary(max_size=300))
    return kind, (
        draw(st.lists(MUTATION, max_size=2)),
        draw(st.integers(0, 10_000)),
        draw(st.binary(max_size=3)),
    )


def _mutate(activity: dict[str, Any], mutations: list[tuple[str, tuple[str, Any]]]) -> dict[str, Any]:
    for path, (op, value) in mutations:
        target: Any = activity
        *parents, leaf = path.split(".")
        for name in parents:
            if not isinstance(target, dict):
                break
            target = target.setdefault(name, {})
        if not isinstance(target, dict):
            continue
        if op == "delete":
            target.pop(leaf, None)
        else:
            target[leaf] = value
    return activity


def _placeholders(value: Any, service_url: str) -> Any:
    if value == SERVICE_URL:
        return service_url
    if isinstance(value, list):
        return [_placeholders(item, service_url) for item in value]
    if isinstance(value, dict):
        return {key: _placeholders(item, service_url) for key, item in value.items()}
    return value


def raw_body(host: HttpHost, kind: str, what: Any) -> bytes:
    """The bytes to post for a drawn body."""
    url = host.teams.connector.url
    if kind == "json":
        return json.dumps(_placeholders(what, url)).encode()
    if kind == "bytes":
        return bytes(what)
    if kind == "activity":
        return json.dumps(_placeholders(_mutate(host.teams.activity(text="help"), what), url)).encode()
    if kind == "deep":
        field, depth, bracket = what
        nested = "[" * depth + "]" * depth if bracket == "[" else '{"a":' * depth + "1" + "}" * depth
        placeholder = "<nested>"
        text = json.dumps(_mutate(host.teams.activity(text="help"), [(field, ("set", placeholder))]))
        return text.replace(json.dumps(placeholder), nested).encode()
    mutations, cut, junk = what
    whole = json.dumps(_placeholders(_mutate(host.teams.activity(text="help"), mutations), url)).encode()
    return whole[: cut % (len(whole) + 1)] + bytes(junk)


# --- the hosts ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def azurite() -> Iterator[Azurite]:
    with run_azurite() as running:
        yield running


@pytest.fixture
async def connector() -> AsyncIterator[FakeConnector]:
    fake = FakeConnector()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture(params=["dev-server", "function-app", "dev-server-local"])
async def host(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    copilot_settings: Settings,
    sandbox: SandboxProcess,
    azurite: Azurite,
    channel: ChannelTokens,
    connector: FakeConnector,
) -> AsyncIterator[HttpHost]:
    if request.param == "dev-server-local":
        async with dev_server(copilot_settings, None, channel) as local:
            local.name = "dev-server, local development mode"
            local.record_turns(run=False)
            yield local
    elif request.param == "dev-server":
        async with dev_server(copilot_settings, deployed_bot_settings(sandbox, channel), channel) as dev:
            dev.record_turns(run=False)
            yield dev
    else:
        async with deployed_function_app(monkeypatch, copilot_settings, sandbox, azurite, channel) as queue:
            functions = FunctionAppHost(Teams(connector, channel), queue)
            await functions.record_turns(run=False)
            yield functions


STATUSES: dict[str, Counter[int]] = {}


@pytest.fixture
def tally(host: HttpHost) -> Iterator[Tally]:
    """One summary line per host; the examples' own assertions fail the test first."""
    examples = count(150, 2000)
    results = Tally(f"http-fuzz ({host.name}, {examples} examples)")
    statuses = STATUSES.setdefault(host.name, Counter())
    statuses.clear()
    yield results
    print(f"http-fuzz ({host.name}) statuses: {dict(sorted(statuses.items()))}")
    results.assert_clean()


def looks_like_an_activity(raw: bytes) -> bool:
    """An oracle independent of the code under test: the least an accepted body must be."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    if not isinstance(body, dict):
        return False
    service_url = body.get("serviceUrl")
    accounts = [body.get(name) for name in ("conversation", "from", "recipient")]
    return (
        isinstance(body.get("type"), str)
        and isinstance(service_url, str)
        and service_url.lower().startswith(("http://", "https://"))
        and not any(ch.isspace() for ch in service_url)
        and all(isinstance(a, dict) and isinstance(a.get("id"), str) and a["id"] for a in accounts)
    )


def _alarming(record: logging.LogRecord) -> bool:
    """A log record that means something failed: an error, or any traceback."""
    if record.name == "asyncio" and record.getMessage().startswith("Task was destroyed but it is pending"):
        # An earlier host's background task being garbage-collected (a teardown matter
        # of the copilot service, not of this request).
        return False
    return record.levelno >= logging.ERROR or bool(record.exc_info) or "Traceback" in record.getMessage()


def _runtime(host: DevServerHost) -> BotRuntime:
    assert host.teams.runtime is not None
    return host.teams.runtime


def _reset(host: HttpHost) -> None:
    """Forget what an accepted example did, so the next one starts from nothing."""
    host.turns.clear()
    host.teams.connector.calls.clear()
    if isinstance(host, FunctionAppHost):
        for message in host.queue.receive_messages(max_messages=32):
            host.queue.delete_message(message)


# --- the suite -----------------------------------------------------------------------------------------------

ACCEPTED = {200, 202}
REFUSED = {400, 401, 413}


@settings(
    max_examples=count(150, 2000),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=bodies(), typical=st.sampled_from([True, True, True, False]))
async def test_no_body_makes_a_host_fail_or_act_on_what_it_refused(
    host: HttpHost, tally: Tally, caplog: pytest.LogCaptureFixture, body: tuple[str, Any], typical: bool
):
    kind, what = body
    raw = raw_body(host, kind, what)
    deployed = isinstance(host, FunctionAppHost) or not _runtime(host).bot_settings.dev_mode
    # Mostly the case that reaches the body: a token when deployed, none in local mode.
    authorization = [host.sign(raw)] if typical == deployed else []
    # Deployed, no token: refused. Local development mode, a token: refused too.
    must_refuse = deployed != bool(authorization)
    caplog.clear()
    with caplog.at_level(logging.WARNING), OutboundWatch() as watch:
        posted = await host.post(raw, authorization)
    effects, contacted = host.effects(), watch.beyond_loopback()
    logged = [r for r in caplog.records if _alarming(r)]
    invoke_answered_by_botbuilder = posted.status == 501 and [a.type for a in host.turns] == ["invoke"]
    accepted = posted.status in ACCEPTED or invoke_answered_by_botbuilder
    problems = [
        f"status {posted.status}" * (posted.status not in ACCEPTED | REFUSED and not accepted),
        # Authentication first: without the right token the body is never judged (no 400).
        "not refused 401, though unauthenticated" * (must_refuse and posted.status != 401),
        "accepted, though not an activity" * (accepted and not looks_like_an_activity(raw)),
        f"refused yet changed {effects}" * (posted.status in REFUSED and bool(effects)),
        f"contacted {contacted}" * bool(contacted),
        f"logged {[r.getMessage()[:200] for r in logged]}" * bool(logged),
        f"took {posted.seconds:.1f}s" * (posted.seconds > 5),
    ]
    problems = [p for p in problems if p]
    what_happened = (
        f"{kind} {raw[:160]!r} signed={bool(authorization)}: {problems} body={posted.body[:160]!r}"
    )
    tally.record(not problems, what_happened)
    STATUSES[host.name][posted.status] += 1
    _reset(host)
    assert not problems, what_happened
