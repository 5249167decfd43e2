"""``read_query``: Dataverse's SQL subset, parsed with sqlglot and run over the caller's rows.

Accepted: SELECT, JOIN, WHERE, ORDER BY, TOP and GROUP BY with COUNT/SUM/AVG/MIN/MAX.
Refused with "Unsupported SQL": DISTINCT, HAVING, subqueries, OFFSET, UNION, CASE/IF,
CAST/CONVERT, CTEs, date functions, and anything else not on the list (reference §1.4).
The check walks sqlglot's T-SQL syntax tree against an allow-list of node types, so a
construct nobody thought of is refused rather than run.

A query runs in a fresh in-memory SQLite database holding only the rows the caller may
read (secured columns already null), so row-level security cannot be joined or filtered
around; text columns compare without case, like SQL Server's default collation.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from sandbox.dataverse.records import Snapshot
from sandbox.dataverse.schema import Entity

QUERYABLE = (
    "account",
    "contact",
    "opportunity",
    "systemuser",
    "phonecall",
    "task",
    "appointment",
    "activitypointer",
)
_ALLOWED_NODES: tuple[type[exp.Expression], ...] = (
    exp.Select,
    exp.From,
    exp.Join,
    exp.Where,
    exp.Group,
    exp.Order,
    exp.Ordered,
    exp.Limit,
    exp.Table,
    exp.TableAlias,
    exp.Alias,
    exp.Column,
    exp.Identifier,
    exp.Star,
    exp.Literal,
    exp.Null,
    exp.Boolean,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.And,
    exp.Or,
    exp.Not,
    exp.Paren,
    exp.Like,
    exp.In,
    exp.Is,
    exp.Between,
    exp.Neg,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Count,
    exp.Sum,
    exp.Avg,
    exp.Min,
    exp.Max,
)
_NAMED_REFUSALS: tuple[tuple[tuple[type[exp.Expression], ...], str], ...] = (
    ((exp.Distinct,), "DISTINCT"),
    ((exp.Having,), "HAVING"),
    ((exp.Subquery,), "subqueries"),
    ((exp.Offset, exp.Fetch), "OFFSET"),
    ((exp.Union, exp.Intersect, exp.Except), "UNION/INTERSECT/EXCEPT"),
    ((exp.Case, exp.If), "CASE/IIF"),
    ((exp.Cast, exp.TryCast, exp.Convert), "CAST/CONVERT"),
    ((exp.With, exp.CTE), "common table expressions (WITH)"),
)
_DATE_WORDS = ("date", "time", "year", "month", "day", "week", "quarter", "hour", "minute", "second")


class UnsupportedSql(Exception):
    """A query outside the Dataverse SQL subset; ``str()`` starts with "Unsupported SQL"."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"Unsupported SQL: {detail}")


def _refusal(node: exp.Expr) -> str:
    for classes, label in _NAMED_REFUSALS:
        if isinstance(node, classes):
            return f"{label} is outside the supported subset"
    if isinstance(node, exp.Select):
        return "subqueries are outside the supported subset"
    name = node.sql_name() if isinstance(node, exp.Func) else type(node).__name__
    if isinstance(node, exp.Anonymous):
        name = str(node.this)
    if isinstance(node, exp.Func) and any(word in name.lower() for word in _DATE_WORDS):
        return f"date functions ({name}) are not supported"
    if isinstance(node, exp.Func):
        return f"the function {name} is not supported (only COUNT, SUM, AVG, MIN, MAX)"
    return f"{name} is not supported"


def validate(query: str) -> exp.Select:
    """The parsed SELECT of ``query``, or ``UnsupportedSql`` saying what is outside the subset."""
    if not isinstance(query, str) or not query.strip():
        raise UnsupportedSql("the query is empty")
    try:
        statements = [s for s in sqlglot.parse(query, read="tsql") if s is not None]
    except ParseError as exc:
        raise UnsupportedSql(
            f"the query does not parse ({exc.errors[0]['description'] if exc.errors else exc})"
        ) from exc
    if len(statements) != 1:
        raise UnsupportedSql("send exactly one statement")
    root = statements[0]
    if not isinstance(root, exp.Select):
        # UNION and friends are the root when present; anything else is not a query at all.
        named = any(isinstance(root, classes) for classes, _ in _NAMED_REFUSALS)
        raise UnsupportedSql(_refusal(root) if named else "only SELECT queries are supported")
    for node in root.walk():
        if isinstance(node, exp.Select) and node is not root:
            raise UnsupportedSql("subqueries are outside the supported subset")
        if not isinstance(node, _ALLOWED_NODES):
            raise UnsupportedSql(_refusal(node))
    limit = root.args.get("limit")
    if limit is not None and not (isinstance(limit.expression, exp.Literal) and limit.expression.is_int):
        raise UnsupportedSql("TOP takes a whole number")
    for table in root.find_all(exp.Table):
        if table.name.lower() not in QUERYABLE or table.args.get("db") is not None:
            raise UnsupportedSql(
                f"unknown table '{table.sql(dialect='tsql')}' (tables: {', '.join(QUERYABLE)})"
            )
    return root


_SQLITE_TYPES = {"money": "REAL", "integer": "INTEGER", "bigint": "INTEGER", "picklist": "INTEGER"}
_SQLITE_TYPES |= {"state": "INTEGER", "status": "INTEGER"}


def _materialise(conn: sqlite3.Connection, entity: Entity, snapshot: Snapshot) -> None:
    definitions = ", ".join(
        f'"{c.name}" ' + _SQLITE_TYPES.get(c.type, "TEXT COLLATE NOCASE") for c in entity.columns
    )
    conn.execute(f'CREATE TABLE "{entity.logical_name}" ({definitions})')
    rows = snapshot.rows(entity.logical_name)
    marks = ", ".join("?" * len(entity.columns))
    conn.executemany(
        f'INSERT INTO "{entity.logical_name}" VALUES ({marks})',
        [tuple(row.get(c.row_key) for c in entity.columns) for row in rows],
    )


def run(query: str, snapshot: Snapshot, tables: dict[str, Entity], row_cap: int) -> dict[str, Any]:
    """Run a validated query over the caller's visible rows; at most ``row_cap`` rows come back."""
    tree = validate(query)
    wanted = {t.name.lower() for t in tree.find_all(exp.Table)}
    conn = sqlite3.connect(":memory:")
    try:
        for name in sorted(wanted):
            _materialise(conn, tables[name], snapshot)
        try:
            cursor = conn.execute(tree.sql(dialect="sqlite"))
        except sqlite3.Error as exc:
            raise UnsupportedSql(f"the query failed: {exc}") from exc
        names: list[str] = []
        for column in cursor.description:
            name = column[0]
            while name in names:
                name = f"{name}_{len(names)}"
            names.append(name)
        fetched = cursor.fetchmany(row_cap + 1)
    finally:
        conn.close()
    return {
        "columns": names,
        "rows": [dict(zip(names, values, strict=True)) for values in fetched[:row_cap]],
        "row_count": min(len(fetched), row_cap),
        "truncated": len(fetched) > row_cap,
    }
