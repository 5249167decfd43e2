"""OData query options as the Dataverse Web API takes them: parse, filter, sort, select, page.

``$filter`` supports ``eq ne gt ge lt le and or not``, parentheses and ``contains`` /
``startswith`` / ``endswith``; string comparisons ignore case, as Dataverse's default
collation does. Unknown columns are a 400 naming the type, like the real service.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sandbox.dataverse.errors import bad_request
from sandbox.dataverse.ids import parse_guid
from sandbox.dataverse.schema import Entity

Row = dict[str, Any]
Predicate = Callable[[Row], bool]
MAX_PAGE_SIZE = 5000
SUPPORTED_OPTIONS = {"$select", "$filter", "$orderby", "$top", "$expand", "$count", "$skiptoken"}

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>'(?:[^']|'')*')
      | (?P<guid>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})
      | (?P<datetime>\d{4}-\d{2}-\d{2}(?:T[0-9:.]+(?:Z|[+-]\d{2}:\d{2})?)?)
      | (?P<number>-?\d+(?:\.\d+)?)
      | (?P<name>[A-Za-z_][A-Za-z0-9_@.]*)
      | (?P<punct>[(),])
    )""",
    re.VERBOSE,
)
_COMPARISONS = {"eq", "ne", "gt", "ge", "lt", "le"}
_FUNCTIONS = {"contains", "startswith", "endswith"}


@dataclass(frozen=True)
class Expand:
    """One ``$expand`` item: a navigation property and the columns to select from its target."""

    navigation: str
    select: tuple[str, ...] = ()


@dataclass
class QueryOptions:
    """Parsed query options for one entity set."""

    select: tuple[str, ...] = ()
    predicate: Predicate | None = None
    orderby: tuple[tuple[str, bool], ...] = ()
    top: int | None = None
    expand: tuple[Expand, ...] = ()
    count: bool = False
    offset: int = 0
    raw: dict[str, str] = field(default_factory=dict)


def _unknown(entity: Entity, name: str) -> Exception:
    return bad_request(
        f"Could not find a property named '{name}' on type 'Microsoft.Dynamics.CRM.{entity.logical_name}'."
    )


def column_key(entity: Entity, name: str) -> str:
    """The row key of column ``name`` (``parentaccountid`` and ``_parentaccountid_value`` alike)."""
    column = entity.column(name.strip())
    if column is None:
        raise _unknown(entity, name.strip())
    return column.row_key


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside parentheses and quotes."""
    parts: list[str] = []
    depth, quoted, start = 0, False, 0
    for i, ch in enumerate(text):
        if ch == "'":
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
        elif not quoted and depth == 0 and ch == sep:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_query(params: Mapping[str, str], entity: Entity) -> QueryOptions:
    """Parse the query options of a collection request (400 on anything unsupported)."""
    options = QueryOptions(raw=dict(params))
    for name in params:
        if name.startswith("$") and name not in SUPPORTED_OPTIONS:
            raise bad_request(f"The query parameter {name} is not supported")
    if params.get("$select"):
        options.select = tuple(column_key(entity, c) for c in split_top_level(params["$select"]))
    if params.get("$filter"):
        options.predicate = parse_filter(params["$filter"], entity)
    if params.get("$orderby"):
        order: list[tuple[str, bool]] = []
        for item in split_top_level(params["$orderby"]):
            name, _, direction = item.partition(" ")
            direction = direction.strip().lower() or "asc"
            if direction not in ("asc", "desc"):
                raise bad_request(f"Invalid $orderby direction '{direction}'.")
            order.append((column_key(entity, name), direction == "desc"))
        options.orderby = tuple(order)
    if params.get("$top"):
        if not params["$top"].isdigit():
            raise bad_request("Invalid value for $top: it must be a non-negative integer.")
        options.top = int(params["$top"])
    if params.get("$expand"):
        options.expand = tuple(_parse_expand(item, entity) for item in split_top_level(params["$expand"]))
    if params.get("$count"):
        options.count = params["$count"].lower() == "true"
    if params.get("$skiptoken"):
        options.offset = decode_skiptoken(params["$skiptoken"])
    return options


def _parse_expand(item: str, entity: Entity) -> Expand:
    name, paren, rest = item.partition("(")
    nav = entity.nav(name.strip())
    if nav is None and entity.activity and name.strip() == entity.parties_property:
        return Expand(entity.parties_property, _expand_select(item, rest, paren))
    if nav is None:
        raise bad_request(
            f"Could not find a property named '{name.strip()}' on type"
            f" 'Microsoft.Dynamics.CRM.{entity.logical_name}'."
        )
    return Expand(nav.name, _expand_select(item, rest, paren))


def _expand_select(item: str, rest: str, paren: str) -> tuple[str, ...]:
    """The columns an ``$expand`` item's nested ``$select`` names (none: all)."""
    select: tuple[str, ...] = ()
    if paren:
        inner = rest.rstrip()
        if not inner.endswith(")"):
            raise bad_request(f"Invalid $expand item '{item}'.")
        for option in split_top_level(inner[:-1], ";"):
            key, _, value = option.partition("=")
            if key.strip() != "$select":
                raise bad_request(f"Only $select is supported inside $expand, not {key.strip()}.")
            select = tuple(s.strip() for s in value.split(",") if s.strip())
    return select


# --- $filter ---------------------------------------------------------------------------


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise bad_request(f"Syntax error at position {pos} in '{text}'.")
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        pos = match.end()
    return tokens


class _FilterParser:
    def __init__(self, text: str, entity: Entity) -> None:
        self.text = text
        self.entity = entity
        self.tokens = _tokens(text)
        self.pos = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise bad_request(f"Unexpected end of $filter '{self.text}'.")
        self.pos += 1
        return token

    def expect(self, value: str) -> None:
        token = self.take()
        if token[1] != value:
            raise bad_request(f"Expected '{value}' in $filter '{self.text}', found '{token[1]}'.")

    def keyword(self, word: str) -> bool:
        token = self.peek()
        if token is not None and token[0] == "name" and token[1].lower() == word:
            self.pos += 1
            return True
        return False

    def parse(self) -> Predicate:
        predicate = self.or_()
        if self.peek() is not None:
            raise bad_request(f"Syntax error in $filter '{self.text}' near '{self.peek()[1]}'.")  # type: ignore[index]
        return predicate

    def or_(self) -> Predicate:
        left = self.and_()
        while self.keyword("or"):
            right = self.and_()
            left = (lambda a, b: lambda row: a(row) or b(row))(left, right)
        return left

    def and_(self) -> Predicate:
        left = self.not_()
        while self.keyword("and"):
            right = self.not_()
            left = (lambda a, b: lambda row: a(row) and b(row))(left, right)
        return left

    def not_(self) -> Predicate:
        if self.keyword("not"):
            inner = self.not_()
            return lambda row: not inner(row)
        return self.primary()

    def primary(self) -> Predicate:
        token = self.peek()
        if token == ("punct", "("):
            self.take()
            inner = self.or_()
            self.expect(")")
            return inner
        if token is not None and token[0] == "name" and token[1].lower() in _FUNCTIONS:
            return self.function()
        left = self.operand()
        op = self.take()
        if op[0] != "name" or op[1].lower() not in _COMPARISONS:
            raise bad_request(f"Unsupported operator '{op[1]}' in $filter (use eq, ne, gt, ge, lt, le).")
        right = self.operand()
        return _comparison(op[1].lower(), left, right)

    def function(self) -> Predicate:
        name = self.take()[1].lower()
        self.expect("(")
        column = self.operand()
        self.expect(",")
        needle = self.operand()
        self.expect(")")

        def test(row: Row) -> bool:
            haystack, value = column(row), needle(row)
            if not isinstance(haystack, str) or not isinstance(value, str):
                return False
            haystack, value = haystack.lower(), value.lower()
            if name == "contains":
                return value in haystack
            if name == "startswith":
                return haystack.startswith(value)
            return haystack.endswith(value)

        return test

    def operand(self) -> Callable[[Row], Any]:
        kind, value = self.take()
        if kind == "string":
            literal: Any = value[1:-1].replace("''", "'")
        elif kind == "guid":
            literal = parse_guid(value)
        elif kind == "datetime":
            literal = value
        elif kind == "number":
            literal = float(value) if "." in value else int(value)
        elif kind == "name" and value.lower() in ("null", "true", "false"):
            literal = {"null": None, "true": True, "false": False}[value.lower()]
        elif kind == "name":
            key = column_key(self.entity, value)
            return lambda row: row.get(key)
        else:
            raise bad_request(f"Unexpected '{value}' in $filter '{self.text}'.")
        return lambda _row: literal


def _normalise(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _comparison(op: str, left: Callable[[Row], Any], right: Callable[[Row], Any]) -> Predicate:
    def test(row: Row) -> bool:
        a, b = _normalise(left(row)), _normalise(right(row))
        if op == "eq":
            return bool(a == b)
        if op == "ne":
            return bool(a != b)
        if a is None or b is None:
            return False
        if isinstance(a, str) != isinstance(b, str):
            return False
        try:
            return bool({"gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b}[op])
        except TypeError:
            return False

    return test


def parse_filter(text: str, entity: Entity) -> Predicate:
    """Compile a ``$filter`` expression to a row predicate."""
    return _FilterParser(text, entity).parse()


# --- applying ------------------------------------------------------------------------------


def _sort_key(value: Any) -> tuple[int, Any]:
    # Nulls sort first ascending, as in SQL Server; strings compare without case.
    if value is None:
        return (0, "")
    if isinstance(value, str):
        return (2, value.lower())
    return (1, value)


def filter_and_sort(rows: list[Row], options: QueryOptions) -> list[Row]:
    """Rows that pass ``$filter``, ordered by ``$orderby`` (stable: ties keep id order)."""
    chosen = [r for r in rows if options.predicate is None or options.predicate(r)]
    for key, descending in reversed(options.orderby):
        numbers = [r for r in chosen if not isinstance(r.get(key), str) and r.get(key) is not None]
        if numbers and len(numbers) != len([r for r in chosen if r.get(key) is not None]):
            raise bad_request(f"Cannot order by '{key}': mixed types.")
        chosen.sort(key=lambda r, k=key: _sort_key(r.get(k)), reverse=descending)  # type: ignore[misc]
    return chosen


def project(row: Row, select: tuple[str, ...], primary_id: str) -> Row:
    """``row`` cut down to ``$select`` (plus the ETag, the primary id and lookup annotations)."""
    if not select:
        return dict(row)
    keep = {"@odata.etag", primary_id, *select}
    return {k: v for k, v in row.items() if k in keep or any(k.startswith(f"{s}@") for s in select)}


def encode_skiptoken(offset: int) -> str:
    """An opaque paging cookie for the row after ``offset``."""
    raw = json.dumps({"pagingcookie": offset}).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_skiptoken(token: str) -> int:
    """The offset an ``encode_skiptoken`` cookie names (400 for anything else)."""
    try:
        padded = token + "=" * (-len(token) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))["pagingcookie"]
    except (ValueError, KeyError, TypeError) as exc:
        raise bad_request("The $skiptoken is not one this server issued.") from exc
    if not isinstance(value, int) or value < 0:
        raise bad_request("The $skiptoken is not one this server issued.")
    return value


def page_size(prefer: str | None) -> int | None:
    """``odata.maxpagesize`` from a ``Prefer`` header, capped at 5,000."""
    if not prefer:
        return None
    for part in prefer.split(","):
        name, _, value = part.strip().partition("=")
        if name.strip().lower() == "odata.maxpagesize" and value.strip().isdigit():
            return max(1, min(int(value.strip()), MAX_PAGE_SIZE))
    return None


def prefers(prefer: str | None, token: str) -> bool:
    """Whether a ``Prefer`` header asks for ``token`` (e.g. ``return=representation``)."""
    return bool(prefer) and any(p.strip().lower() == token for p in (prefer or "").split(","))
