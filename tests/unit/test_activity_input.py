"""The edge check both HTTP hosts run on inbound activities (``bot.activity_input``), pure.

``MALFORMED`` is the catalogue of bodies adversarial testing found answered 500 (or worse,
accepted) by one host or the other; the integration tests post each of them to both
hosts under a valid channel token.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.activity_input import (
    ACTIVITY_TYPES,
    MAX_ACTIVITY_BYTES,
    MAX_JSON_DEPTH,
    ActivityTooLarge,
    InvalidActivity,
    check_service_url,
    read_json,
    routing_hints,
    validate_activity,
)

TENANT = "00000000-0000-0000-0000-000000000001"
AAD = "00000000-0000-0000-0000-0000000000020"


def teams_activity(
    service_url: str = "https://smba.trafficmanager.net/amer/", **fields: Any
) -> dict[str, Any]:
    """A message as Teams (and the Agents Playground) sends it to the bot."""
    return {
        "type": "message",
        "id": "1767607200000",
        "timestamp": "2026-01-05T10:00:00.000Z",
        "localTimestamp": "2026-01-05T11:00:00.000+01:00",
        "channelId": "msteams",
        "serviceUrl": service_url,
        "from": {"id": f"29:{AAD}", "name": "Alex Wilber", "aadObjectId": AAD},
        "conversation": {"id": "a:conv-1", "conversationType": "personal", "tenantId": TENANT},
        "recipient": {"id": "28:bot", "name": "CRM Copilot"},
        "textFormat": "plain",
        "locale": "en-US",
        "text": "summarise Acme",
        "entities": [{"type": "clientInfo", "locale": "en-US", "country": "US", "platform": "Web"}],
        "channelData": {"tenant": {"id": TENANT}},
        **fields,
    }


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _without(name: str) -> Callable[[dict[str, Any]], bytes]:
    return lambda base: _json({k: v for k, v in base.items() if k != name})


def _with(**fields: Any) -> Callable[[dict[str, Any]], bytes]:
    return lambda base: _json({**base, **fields})


def _deeply_nested(base: dict[str, Any]) -> bytes:
    depth = 50_000  # far past json's recursion limit, yet 100 KB: under the size limit
    return _json(base)[:-1] + b', "value": ' + b"[" * depth + b"]" * depth + b"}"


def _bare_invoke(base: dict[str, Any]) -> bytes:
    invoke = {k: v for k, v in base.items() if k not in ("text", "textFormat")}
    return _json({**invoke, "type": "invoke", "name": "adaptiveCard/action"})


MALFORMED: list[tuple[str, Callable[[dict[str, Any]], bytes], str]] = [
    # (id, the body made from a valid activity, a word the 400's reason must contain)
    ("json-array", lambda base: _json([base]), "object"),
    ("json-string", lambda base: _json("summarise Acme"), "object"),
    ("json-number", lambda base: b"42", "object"),
    ("json-null", lambda base: b"null", "object"),
    ("not-json", lambda base: _json(base)[:-7], "JSON"),
    ("deep-nesting", _deeply_nested, "nested"),
    ("no-serviceUrl", _without("serviceUrl"), "serviceUrl"),
    ("invalid-serviceUrl", _with(serviceUrl="not a url"), "serviceUrl"),
    ("serviceUrl-not-http", _with(serviceUrl="file:///etc/passwd"), "serviceUrl"),
    ("serviceUrl-number", _with(serviceUrl=8080), "serviceUrl"),
    ("no-conversation", _without("conversation"), "conversation"),
    (
        "conversation-list",
        lambda base: _json({**base, "conversation": [base["conversation"]]}),
        "conversation",
    ),
    ("conversation-id-number", _with(conversation={"id": 42, "tenantId": TENANT}), "conversation.id"),
    ("from-string", _with(**{"from": "29:alex"}), "from"),
    ("no-recipient", _without("recipient"), "recipient"),
    (
        "membersAdded-string",
        lambda base: _json({**base, "type": "conversationUpdate", "membersAdded": "28:bot"}),
        "membersAdded",
    ),
    ("bare-adaptiveCard-action-invoke", _bare_invoke, "value"),
    ("no-type", _without("type"), "type"),
    ("type-unknown", _with(type="delete-everything"), "type"),
    ("entities-string", _with(entities="mention"), "entities"),
    ("timestamp-number", _with(timestamp=1767607200), "timestamp"),
    ("teams-channelData-malformed", _with(channelData={"tenant": "x", "team": [1]}), "malformed"),
    (
        "duplicate-serviceUrl",
        lambda base: _json(base)[:-1] + b', "serviceUrl": "https://evil.example/"}',
        "duplicate",
    ),
]
"""Every body here is answered 400 by both hosts, with a valid token, and nothing is contacted."""


def malformed_params() -> list[Any]:
    return [pytest.param(make, reason, id=name) for name, make, reason in MALFORMED]


def _edge(raw: bytes) -> None:
    """The hosts' checks of a body after authentication (JSON, shape, botbuilder's model)."""
    from bot.runtime import activity_from_json

    body = read_json(raw)
    activity_from_json(body, validate_activity(body))


def _refusal(raw: bytes) -> InvalidActivity:
    with pytest.raises(InvalidActivity) as caught:
        _edge(raw)
    return caught.value


def _verdict(raw: bytes) -> str | None:
    """None if accepted, else the refusal's reason (anything else escapes: the test fails)."""
    try:
        _edge(raw)
    except InvalidActivity as exc:
        return exc.reason
    return None


# --- accepted ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "activity",
    [
        pytest.param(teams_activity(), id="message"),
        pytest.param(teams_activity("http://localhost:56150/_connector"), id="playground"),
        pytest.param(
            teams_activity(text=None, value={"copilot": "decision", "v": 1}, replyToId="act-1"),
            id="card-submit",
        ),
        pytest.param(
            teams_activity(
                type="conversationUpdate",
                text=None,
                membersAdded=[{"id": "28:bot"}, {"id": f"29:{AAD}", "aadObjectId": AAD}],
            ),
            id="install",
        ),
        pytest.param(
            teams_activity(
                type="invoke",
                name="signin/tokenExchange",
                value={"id": "x", "connectionName": "c", "token": "t"},
            ),
            id="token-exchange",
        ),
        pytest.param(
            teams_activity(
                text="<at>CRM Copilot</at> my pipeline",
                entities=[
                    {
                        "type": "mention",
                        "text": "<at>CRM Copilot</at>",
                        "mentioned": {"id": "28:bot", "name": "CRM Copilot"},
                    }
                ],
            ),
            id="mention",
        ),
        pytest.param(teams_activity("https://[2001:db8::1]:8443/teams/"), id="ipv6-host"),
    ],
)
def test_teams_activities_pass_unchanged(activity: dict[str, Any]):
    raw = _json(activity)
    body = read_json(raw)
    shape = validate_activity(body)
    assert body == activity, "the body is passed on exactly as posted"
    assert shape.service_url == activity["serviceUrl"]
    assert shape.conversation.id == activity["conversation"]["id"]


def test_the_activity_types_are_botbuilders():
    from botbuilder.schema import ActivityTypes

    assert {str(t.value) for t in ActivityTypes} == ACTIVITY_TYPES


# --- refused -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "reason"), malformed_params())
def test_each_malformed_body_is_refused_with_a_short_reason(
    make: Callable[[dict[str, Any]], bytes], reason: str
):
    problem = _refusal(make(teams_activity()))
    assert problem.status == 400
    assert reason in problem.reason
    assert len(problem.reason) < 400
    assert "Traceback" not in problem.reason


def test_a_body_over_the_limit_is_413_before_it_is_parsed():
    with pytest.raises(ActivityTooLarge) as caught:
        read_json(b"[" * (MAX_ACTIVITY_BYTES + 1))
    assert caught.value.status == 413
    read_json(_json(teams_activity(text="x" * (MAX_ACTIVITY_BYTES - 2000))))  # just under: fine


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"a": NaN}', "NaN"),
        (b'{"a": Infinity}', "Infinity"),
        (b'{"a": 1e999}', "out of range"),
        (b'{"a": "\\u0000"}', "NUL"),
        (b'{"a\\u0000": 1}', "NUL"),
        (b'{"a": "\\ud800"}', "surrogate"),
        (b"\xff\xfe{}", "UTF-8"),
        (b'{"a": ' + b"9" * 5000 + b"}", "JSON"),
        (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), "nested"),
        (b'{"a": 1, "a": 2}', "duplicate"),
    ],
)
def test_json_that_parsers_disagree_on_or_databases_cannot_store_is_refused(raw: bytes, reason: str):
    with pytest.raises(InvalidActivity) as caught:
        read_json(raw)
    assert reason in caught.value.reason


def test_nesting_up_to_the_limit_is_fine():
    assert read_json(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH)


@pytest.mark.parametrize(
    "url",
    [
        "https://smba.trafficmanager.net/amer/",
        "https://smba.trafficmanager.net/emea/",
        "http://localhost:56150/_connector",
        "http://127.0.0.1:3978/",
        "https://[::1]:8443/",
        "HTTPS://Example.COM",
    ],
)
def test_service_urls_that_are_http_urls_pass(url: str):
    assert check_service_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "",
        "not a url",
        "smba.trafficmanager.net/amer/",
        "//smba.trafficmanager.net/amer/",
        "file:///etc/passwd",
        "ftp://smba.trafficmanager.net/",
        "javascript:alert(1)",
        "http://",
        "http:///path",
        " https://smba.trafficmanager.net/amer/",
        "https://smba.trafficmanager.net/amer/\n",
        "https://smba.traffic\tmanager.net/",
        "https://user:pass@smba.trafficmanager.net/",
        "https://smba.trafficmanager.net/amer/?x=1",
        "https://smba.trafficmanager.net/amer/#x",
        "https://smba.trafficmanager.net:99999/",
        "https://smba.trafficmanager.net:0/",
        "https://[::1/",
        "https://exa mple.com/",
        "https://exämple.com/",
        "https://-bad-.example/",
        "https://" + "a" * 2100 + ".example/",
    ],
)
def test_service_urls_that_are_not_http_urls_are_refused(url: str):
    with pytest.raises(ValueError):  # noqa: PT011 - every message is fine, the refusal is the point
        check_service_url(url)


def test_routing_hints_read_only_strings():
    assert routing_hints({"channelId": "msteams", "serviceUrl": "https://x/"}).service_url == "https://x/"
    assert routing_hints({"channelId": 5, "serviceUrl": ["https://x/"]}) == routing_hints({})
    assert routing_hints([{"serviceUrl": "https://x/"}]).service_url is None
    assert routing_hints(None).channel_id is None


def test_an_invoke_needs_a_name_and_a_value_object():
    base = teams_activity(type="invoke", text=None)
    for fields, reason in (
        ({"value": {"action": {}}}, "name"),
        ({"name": "signin/tokenExchange"}, "value"),
        ({"name": "signin/tokenExchange", "value": "token"}, "value"),
        ({"name": "signin/tokenExchange", "value": [1]}, "value"),
    ):
        assert reason in _refusal(_json({**base, **fields})).reason


def test_a_mention_of_the_bot_must_be_readable_by_botbuilder():
    mention = {"type": "mention", "mentioned": {"id": "28:bot"}}
    assert "mention" in _refusal(_json(teams_activity(entities=[mention]))).reason
    assert "mention" in _refusal(_json(teams_activity(entities=[{"type": "mention"}]))).reason
    assert "entities" in _refusal(_json(teams_activity(entities=[{"text": "x"}]))).reason
    # Someone else mentioned, or the mention has its text: fine.
    validate_activity(teams_activity(entities=[{"type": "mention", "mentioned": {"id": "29:megan"}}]))
    validate_activity(teams_activity(entities=[{**mention, "text": "<at>CRM Copilot</at>"}]))


def test_strings_are_not_numbers_here():
    assert "from.id" in _refusal(_json({**teams_activity(), "from": {"id": 29}})).reason
    assert "text" in _refusal(_json(teams_activity(text=5))).reason
    assert "isGroup" in _refusal(_json(teams_activity(conversation={"id": "c", "isGroup": "yes"}))).reason


# --- properties ------------------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None, database=None)
@given(body=JSON_VALUES)
def test_any_json_is_accepted_or_refused_with_a_reason_never_an_exception(body: Any):
    assert _verdict(_json(body)) != ""


@settings(max_examples=150, deadline=None, database=None)
@given(field=st.sampled_from(sorted(teams_activity())), value=JSON_VALUES)
def test_any_field_of_a_valid_activity_replaced_by_any_json_never_raises_anything_else(
    field: str, value: Any
):
    assert _verdict(_json({**teams_activity(), field: value})) != ""


@settings(max_examples=150, deadline=None, database=None)
@given(raw=st.binary(max_size=200))
def test_any_bytes_are_json_or_refused(raw: bytes):
    assert _verdict(raw) != ""
