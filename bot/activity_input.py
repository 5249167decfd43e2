"""The edge check for inbound Bot Framework activities: raw bytes → a validated shape.

Pure (no I/O, no botbuilder), shared by both HTTP hosts (the aiohttp dev server and the
Azure Functions trigger) and by the queue consumer, so a body is judged the same way
wherever it enters. The checks run in two steps because the token must be validated
before the activity is trusted, yet botbuilder's token check needs two values from the
activity (``channelId`` for the signing key's endorsement, ``serviceUrl`` for the
token's ``serviceurl`` claim):

1. :func:`read_json` — size, UTF-8, strict JSON (no duplicate keys, no NaN/Infinity),
   bounded nesting, strings PostgreSQL and the queue can store (no NUL, no lone
   surrogates). :func:`routing_hints` then takes only those two values, and only when
   they are strings; nothing else of the body is interpreted before authentication.
2. :func:`validate_activity` — after authentication, the fields the bot and botbuilder
   dereference without checking, with the types they assume. Everything else Teams
   sends (``channelData`` details, ``attachments``, ``locale``, ...) is kept as is.

Failures are :class:`InvalidActivity` (HTTP 400) or :class:`ActivityTooLarge` (413),
each with a short reason that is safe to show the caller.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

MAX_ACTIVITY_BYTES = 256 * 1024
"""Teams' own activities are a few KiB; a quarter MiB leaves room for card payloads."""
MAX_JSON_DEPTH = 64
"""Far deeper than any Teams activity (channelData, card values) and far below the
recursion limits of the parsers (json, msrest, pydantic) that walk it afterwards."""
MAX_SERVICE_URL_LENGTH = 2048

ACTIVITY_TYPES = frozenset(
    {
        "message",
        "contactRelationUpdate",
        "conversationUpdate",
        "typing",
        "endOfConversation",
        "event",
        "invoke",
        "invokeResponse",
        "deleteUserData",
        "messageUpdate",
        "messageDelete",
        "installationUpdate",
        "messageReaction",
        "suggestion",
        "trace",
        "handoff",
        "command",
        "commandResult",
    }
)
"""The Bot Framework activity types (botbuilder's ``ActivityTypes``); anything else is not an activity."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")


class InvalidActivity(ValueError):
    """The body is not an activity this bot accepts (HTTP 400); ``reason`` is safe to show."""

    status = 400

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ActivityTooLarge(InvalidActivity):
    """The body is larger than any activity this bot accepts (HTTP 413)."""

    status = 413


# --- step 1: bytes → JSON, before authentication --------------------------------------------------


def read_json(raw: bytes) -> Any:
    """The body as JSON, if it is safe to hand to any later parser; else :class:`InvalidActivity`."""
    if len(raw) > MAX_ACTIVITY_BYTES:
        raise ActivityTooLarge(f"the body is larger than {MAX_ACTIVITY_BYTES // 1024} KiB")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidActivity("the body must be UTF-8 JSON (a Bot Framework activity)") from exc
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError as exc:
        raise InvalidActivity(f"the JSON is nested more than {MAX_JSON_DEPTH} levels deep") from exc
    except ValueError as exc:  # JSONDecodeError, duplicate keys, NaN, ints over the digit limit
        detail = exc.args[0] if isinstance(exc, _JsonRefused) else "it does not parse"
        raise InvalidActivity(f"the body must be JSON (a Bot Framework activity): {detail}") from exc
    _check_tree(value)
    return value


class _JsonRefused(ValueError):
    """JSON that parses in Python but means different things to different parsers."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Two "serviceUrl" keys could be read differently here and by a proxy or botbuilder.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _JsonRefused(f"duplicate key {key[:40]!r}")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise _JsonRefused(f"{name} is not JSON")


def _check_tree(value: Any) -> None:
    """Depth, finite numbers and storable strings, iteratively (no recursion on hostile input)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if depth > MAX_JSON_DEPTH:
                raise InvalidActivity(f"the JSON is nested more than {MAX_JSON_DEPTH} levels deep")
            for key, item in node.items():
                _check_string(key)
                stack.append((item, depth + 1))
        elif isinstance(node, list):
            if depth > MAX_JSON_DEPTH:
                raise InvalidActivity(f"the JSON is nested more than {MAX_JSON_DEPTH} levels deep")
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, str):
            _check_string(node)
        elif isinstance(node, float) and not math.isfinite(node):
            # json.loads reads 1e999 as inf, which json.dumps would write back as non-JSON.
            raise InvalidActivity("the JSON has a number out of range")


def _check_string(text: str) -> None:
    # PostgreSQL text/jsonb cannot hold NUL, and UTF-8 cannot encode a lone surrogate.
    if "\x00" in text:
        raise InvalidActivity("the JSON has a string with a NUL character")
    if not text.isascii() and _SURROGATE.search(text):
        raise InvalidActivity("the JSON has a string with an unpaired surrogate")


@dataclass(frozen=True)
class RoutingHints:
    """The two values botbuilder's token check compares with the token, if the body has them."""

    channel_id: str | None
    service_url: str | None


def routing_hints(body: Any) -> RoutingHints:
    """``channelId`` and ``serviceUrl`` when they are strings; nothing else is read."""
    if not isinstance(body, dict):
        return RoutingHints(None, None)
    channel_id, service_url = body.get("channelId"), body.get("serviceUrl")
    return RoutingHints(
        channel_id if isinstance(channel_id, str) and channel_id else None,
        service_url if isinstance(service_url, str) and service_url else None,
    )


# --- step 2: JSON → the shape the bot relies on, after authentication ---------------------------


def check_service_url(value: str) -> str:
    """An absolute http(s) URL with a host: where replies will be sent (the Bot Connector).

    Stricter than a browser: no whitespace or control characters (which URL parsers drop
    silently, so the string checked would not be the string used), ASCII only, no user
    info, query or fragment (the connector client appends ``/v3/...`` paths to it).
    """
    if len(value) > MAX_SERVICE_URL_LENGTH:
        raise ValueError("is too long")
    if not value.isascii() or any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise ValueError("must be a URL without spaces or control characters")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise ValueError("is not a valid URL") from exc
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError("must be an http(s) URL")
    host = parts.hostname or ""
    if not host or not (_HOST_NAME.fullmatch(host) or _is_ip_literal(host, parts.netloc)):
        raise ValueError("must name a valid host")
    if port == 0:
        raise ValueError("must not use port 0")
    if "@" in parts.netloc or "?" in value or "#" in value:
        raise ValueError("must not carry credentials, a query or a fragment")
    return value


def _is_ip_literal(host: str, netloc: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.version == 4 or f"[{host}]" in netloc


Id = Annotated[str, StringConstraints(min_length=1, max_length=1024)]
ServiceUrl = Annotated[str, AfterValidator(check_service_url)]


def _known_type(value: str) -> str:
    if value not in ACTIVITY_TYPES:
        raise ValueError("is not a Bot Framework activity type")
    return value


class _Shape(BaseModel):
    # strict: a number is not a string here (msrest would quietly turn 5 into "5");
    # extra fields are Teams' business and are passed on untouched.
    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


class AccountInput(_Shape):
    """``from`` / ``recipient`` / a member added: a channel account."""

    id: Id
    name: str | None = None
    aad_object_id: str | None = Field(default=None, alias="aadObjectId")
    role: str | None = None


class ConversationInput(_Shape):
    """``conversation``: where the activity happened (the bot keys threads by its id)."""

    id: Id
    name: str | None = None
    tenant_id: str | None = Field(default=None, alias="tenantId")
    conversation_type: str | None = Field(default=None, alias="conversationType")
    is_group: bool | None = Field(default=None, alias="isGroup")


class EntityInput(_Shape):
    """An entity; mentions are read by botbuilder when it strips the bot's @mention."""

    type: Annotated[str, StringConstraints(min_length=1)]
    mentioned: AccountInput | None = None
    text: str | None = None

    @model_validator(mode="after")
    def _mention_names_someone(self) -> EntityInput:
        if self.type.lower() == "mention" and self.mentioned is None:
            raise ValueError("a mention must name the mentioned account")
        return self


class ActivityInput(_Shape):
    """The fields of an activity the bot (and botbuilder under it) use without checking."""

    type: Annotated[str, AfterValidator(_known_type)]
    id: str | None = None
    channel_id: Id = Field(alias="channelId")
    service_url: ServiceUrl = Field(alias="serviceUrl")
    conversation: ConversationInput
    from_: AccountInput = Field(alias="from")
    recipient: AccountInput
    members_added: list[AccountInput] | None = Field(default=None, alias="membersAdded")
    members_removed: list[AccountInput] | None = Field(default=None, alias="membersRemoved")
    name: str | None = None
    text: str | None = None
    reply_to_id: str | None = Field(default=None, alias="replyToId")
    timestamp: str | None = None
    local_timestamp: str | None = Field(default=None, alias="localTimestamp")
    locale: str | None = None
    entities: list[EntityInput] | None = None
    attachments: list[dict[str, Any]] | None = None
    channel_data: dict[str, Any] | None = Field(default=None, alias="channelData")
    value: Any = None

    @model_validator(mode="after")
    def _consistent(self) -> ActivityInput:
        if self.type in ("invoke", "event") and not self.name:
            raise ValueError(f"an {self.type} activity needs a 'name'")
        if self.type == "invoke" and not isinstance(self.value, dict):
            # botbuilder's own answer to e.g. a bare adaptiveCard/action cannot be serialised.
            raise ValueError("an invoke activity needs a 'value' object")
        action = self.value.get("action", {}) if self.type == "invoke" else {}
        if self.name == "adaptiveCard/action" and not isinstance(action, dict):
            # botbuilder calls .get() on it outside its own error handling.
            raise ValueError("an adaptiveCard/action invoke's 'value.action' must be an object")
        if self.type == "event" and self.value is not None and not isinstance(self.value, dict):
            raise ValueError("an event activity's 'value' must be an object")
        for entity in self.entities or []:
            mentioned = entity.mentioned
            if entity.type.lower() != "mention" or mentioned is None or mentioned.id != self.recipient.id:
                continue
            # botbuilder strips the bot's mention from ``text`` using the mention's text (or
            # the account's name): both must be strings.
            if self.text is None or (entity.text is None and mentioned.name is None):
                raise ValueError("a mention of the bot needs 'text' and the mention's text")
        return self


def validate_activity(body: Any) -> ActivityInput:
    """The activity's shape; :class:`InvalidActivity` naming the first few problems."""
    if not isinstance(body, dict):
        raise InvalidActivity("the body must be a JSON object (a Bot Framework activity)")
    try:
        return ActivityInput.model_validate(body)
    except ValidationError as exc:
        raise InvalidActivity(_reason(exc)) from exc


_PLAIN = {
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "dict_type": "must be an object",
    "list_type": "must be a list",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "string_too_short": "must not be empty",
    "string_too_long": "is too long",
}


def _reason(exc: ValidationError) -> str:
    problems: list[str] = []
    for error in exc.errors(include_url=False, include_input=False)[:4]:
        where = ".".join(str(part) for part in error["loc"])
        kind = error["type"]
        if kind == "missing":
            problems.append(f"the activity has no '{where}'")
            continue
        message = _PLAIN.get(kind) or str(error["msg"]).removeprefix("Value error, ")[:160]
        problems.append(f"'{where}' {message}" if where else message)
    return "; ".join(problems)
