"""The compact schema a model gets when the CRM's reads are a generic SQL query tool (Dataverse).

On the Dataverse profile the model reads through ``read_query`` (a Dataverse SQL subset) and
needs to know the tables and columns to write SQL. Sending the whole org's metadata would cost
thousands of tokens on every model call, so the copilot asks the CRM's own *describe* tool
(found by what it does, never by name) about the few tables a sales rep's questions touch, keeps
their key columns, and caches the few lines that result per deployment (process-wide, keyed by
the CRM URL): one describe round per table per process, not per session or per call.

Everything here is pure except :func:`load_schema_note`, which calls the CRM through the
``call`` it is given. The text's format is owned here, and so is its parser
(:func:`parse_schema_note`), which the offline model uses to name tables and columns.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import SystemMessage
from langchain_core.messages.utils import count_tokens_approximately

SCHEMA_TABLES: tuple[str, ...] = ("account", "contact", "opportunity", "activitypointer", "systemuser")
"""Dataverse's standard logical names for accounts, contacts, deals, all activities and users:
the same in every org (custom tables are not part of a rep's questions)."""

KEY_COLUMNS: frozenset[str] = frozenset(
    {
        # Names, titles, the account's place and trade.
        "name",
        "fullname",
        "jobtitle",
        "address1_city",
        "industrycode",
        # Deals: stage, value, close date, probability, next step, state.
        "stepname",
        "salesstage",
        "estimatedvalue",
        "estimatedclosedate",
        "closeprobability",
        "description",
        "statecode",
        # Activities: what, which kind, when.
        "subject",
        "activitytypecode",
        "actualend",
        "scheduledstart",
        "scheduledend",
        "createdon",
        # How the tables join.
        "parentcustomerid",
        "parentaccountid",
        "regardingobjectid",
        "ownerid",
    }
)
"""Standard Dataverse columns that answer a sales rep's questions (a real org's tables have
hundreds of columns; these are the ones worth their tokens on every call)."""

MAX_CUSTOM_COLUMNS = 3
"""Custom columns (``<prefix>_<name>``) kept per table, in the order describe lists them."""

HEADER = (
    "CRM schema for {tool} (Dataverse SQL: SELECT, JOIN, WHERE, ORDER BY, TOP, GROUP BY with "
    "COUNT/SUM/AVG/MIN/MAX; no DISTINCT, HAVING, subqueries or date functions). "
    "Ids are GUIDs; a lookup column holds the target's id; statecode 0 = open/active. Tables:"
)

_SQL_WORDS = frozenset({"sql", "select"})
_DESCRIBE_WORDS = frozenset({"describe", "describes", "schema", "columns"})
_SEARCH_WORDS = frozenset({"search", "searches", "keyword", "keywords", "find"})
_WORD_RE = re.compile(r"[a-z]+")
_COLUMN_RE = re.compile(r"^\s*([A-Za-z_][\w]*)\s+([A-Z]+(?:\([^)]*\))?)\s*(.*?),?\s*$")
_REFERENCES_RE = re.compile(r"REFERENCES\s+(.+?)(?:\s+--|$)")
_LINE_RE = re.compile(r"^- (\w+): (.+)$", re.M)


@dataclass(frozen=True)
class ToolShape:
    """What the capability checks look at in one tool: its name, description, argument schema
    and whether the CRM declared it read-only."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    read_only: bool


def _words(text: str) -> set[str]:
    return set(_WORD_RE.findall(text.lower()))


def _single_string_argument(parameters: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(name, description)`` of the one required string argument, if that is all it requires."""
    required = parameters.get("required")
    props = parameters.get("properties")
    if not isinstance(required, list) or len(required) != 1 or not isinstance(props, Mapping):
        return None
    prop = props.get(required[0])
    if not isinstance(prop, Mapping) or prop.get("type") != "string":
        return None
    return str(required[0]), str(prop.get("description") or "")


def sql_query_argument(tool: ToolShape) -> str | None:
    """The argument a read-only SQL query tool takes its query in; ``None`` for any other tool.

    Bound by shape, never by name (Microsoft renames these tools): read-only, exactly one
    required string argument, and a description that speaks of SQL or SELECT.
    """
    found = _single_string_argument(tool.parameters) if tool.read_only else None
    if found is None:
        return None
    name, described = found
    words = _words(f"{tool.description} {described}")
    return name if words & _SQL_WORDS and "query" in words | _words(name) else None


def describe_argument(tool: ToolShape) -> str | None:
    """The argument a read-only "describe a table" tool takes the table name in; ``None`` otherwise.

    A search over the schemas (keywords in, hits out) speaks of tables and columns too, but it
    takes words, not a table's name: a tool that searches is not the describer.
    """
    found = _single_string_argument(tool.parameters) if tool.read_only else None
    if found is None:
        return None
    name, described = found
    words = _words(f"{tool.name} {tool.description} {described}")
    if words & _SEARCH_WORDS or not words & _DESCRIBE_WORDS or "table" not in words:
        return None
    return name


@dataclass(frozen=True)
class Column:
    """One column as describe gave it."""

    name: str
    sql_type: str
    primary: bool = False
    targets: tuple[str, ...] = ()
    secured: bool = False
    note: str = ""


def parse_describe(text: str) -> list[Column]:
    """The columns of a T-SQL-style ``CREATE TABLE`` (describe's answer), in order."""
    body = text.split("(", 1)[1] if "CREATE TABLE" in text and "(" in text else text
    columns: list[Column] = []
    for line in body.splitlines():
        found = _COLUMN_RE.match(line)
        if found is None or found.group(1).upper() in ("CREATE", "TABLE"):
            continue
        name, sql_type, rest = found.groups()
        refs = _REFERENCES_RE.search(rest)
        targets = tuple(t.split("(")[0].strip() for t in refs.group(1).split("|")) if refs else ()
        note = rest.split("--", 1)[1].strip() if "--" in rest else ""
        columns.append(
            Column(
                name=name,
                sql_type=sql_type,
                primary="PRIMARY KEY" in rest,
                targets=targets,
                secured="secured" in note.lower(),
                note=note,
            )
        )
    return columns


def _is_custom(column: Column) -> bool:
    # Custom columns carry their publisher's prefix (new_industry, cr8f2_territory).
    return "_" in column.name and not column.name.startswith(("address", "_")) and not column.targets


def key_columns(columns: Sequence[Column], hidden: frozenset[str] = frozenset()) -> list[Column]:
    """The columns worth sending: the key, the standard ones a rep asks about, and a few custom
    ones. Secured columns (null unless the rep holds the field permission), the ``hidden`` ones
    (the copilot's own write-key column) and alternate-key bookkeeping are left out."""
    kept: list[Column] = []
    custom = 0
    for column in columns:
        note = column.note.lower()
        if column.secured or column.name in hidden or "alternate key" in note or "idempotency" in note:
            continue
        if column.primary or column.name in KEY_COLUMNS:
            kept.append(column)
        elif _is_custom(column) and custom < MAX_CUSTOM_COLUMNS:
            custom += 1
            kept.append(column)
    return kept


_SHOWN_TYPES = ("MONEY", "DATE", "DATETIME")


def _column_text(column: Column) -> str:
    text = column.name
    if column.primary:
        text += " key"
    elif column.targets:
        text += "→" + "|".join(column.targets)
    elif column.sql_type in _SHOWN_TYPES:
        text += f" {column.sql_type.lower()}"
    # A description only where the name does not say it: custom columns, and the standard
    # ones whose meaning is the org's ("description" holds a deal's next step).
    if column.note and (column.name in _EXPLAINED or _is_custom(column)):
        text += f" ({_short(column.note)})"
    return text


_EXPLAINED = frozenset({"description", "stepname", "activitytypecode"})


def _short(note: str, limit: int = 60) -> str:
    """``note`` without commas (the line's separator), cut at a word within ``limit``."""
    text = note.replace(",", ";")
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + "…"


def table_line(table: str, describe_text: str, hidden: frozenset[str] = frozenset()) -> str:
    """One table's line of the schema note: ``- opportunity: opportunityid key, name, …``."""
    columns = key_columns(parse_describe(describe_text), hidden)
    return f"- {table}: " + ", ".join(_column_text(c) for c in columns)


def schema_note(tool: str, lines: Iterable[str]) -> str:
    """The whole note, for the query tool called ``tool``."""
    return "\n".join([HEADER.format(tool=tool), *lines])


def parse_schema_note(text: str) -> dict[str, list[str]]:
    """Table → its column names, from a schema note anywhere in ``text`` (empty if none)."""
    if "CRM schema for" not in text:
        return {}
    return {
        table: [part.strip().split(" ")[0].split("→")[0] for part in columns.split(", ")]
        for table, columns in _LINE_RE.findall(text)
    }


def describe_text(result: object) -> str:
    """The schema text inside describe's answer (its JSON ``schema``, or the whole text)."""
    if isinstance(result, str):
        try:
            parsed: object = json.loads(result)
        except ValueError:
            return result
        result = parsed if isinstance(parsed, Mapping) else result
    if isinstance(result, Mapping):
        for value in result.values():
            if isinstance(value, str) and "CREATE TABLE" in value:
                return value
        return ""
    return str(result or "")


DescribeCall = Callable[[str, dict[str, Any]], Awaitable[str | None]]
"""Calls a CRM tool by name with arguments; the result's text, or ``None`` when it failed."""


class SchemaCache:
    """The schema note per deployment (CRM URL), built once per process.

    Concurrent first turns share one build (a lock per key); a build that found no table is
    not kept, so a CRM that was down at the first turn is asked again at the next.
    """

    def __init__(self) -> None:
        self._notes: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def clear(self) -> None:
        """Forget every note (tests; a redeployed CRM)."""
        self._notes.clear()
        self._locks.clear()

    def cached(self, key: str) -> str | None:
        """The note already built for ``key``, if any."""
        return self._notes.get(key)

    async def get(
        self, key: str, tools: Sequence[ToolShape], call: DescribeCall, hidden: frozenset[str] = frozenset()
    ) -> str:
        """The note for ``key``: cached, or built by describing :data:`SCHEMA_TABLES` with the
        CRM's describe tool ("" when the tools offer no SQL query or no describe); ``hidden``
        columns are left out."""
        note = self._notes.get(key)
        if note is not None:
            return note
        query = next((t for t in tools if sql_query_argument(t)), None)
        describer = next(((t, arg) for t in tools if (arg := describe_argument(t))), None)
        if query is None or describer is None:
            return ""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            note = self._notes.get(key)
            if note is not None:
                return note
            tool, argument = describer
            lines: list[str] = []
            for table in SCHEMA_TABLES:
                text = await call(tool.name, {argument: table})
                schema = describe_text(text) if text else ""
                # A table whose answer has no columns we can read is left out, not sent empty.
                if schema and key_columns(parse_describe(schema), hidden):
                    lines.append(table_line(table, schema, hidden))
            if not lines:
                return ""
            note = schema_note(query.name, lines)
            self._notes[key] = note
            return note


SCHEMAS = SchemaCache()
"""The process's schema notes."""


def prompt_tokens(note: str) -> int:
    """What the note costs in prompt tokens on every model call (LangChain's approximate count,
    the same the summarisation trigger uses)."""
    return count_tokens_approximately([SystemMessage(content=note)])
