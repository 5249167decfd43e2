"""Reads through a generic SQL query tool (Dataverse's ``read_query``): the planner's reads as SQL.

On a CRM whose reads are one read-only SQL tool instead of typed tools, the planner plans
exactly as it does elsewhere: "find the account", "its open deals closing this quarter", "its
contacts". This module is the one place that turns such a read (a role and its arguments,
:data:`QUERY_ROLES`) into a SELECT of the Dataverse SQL subset (SELECT, JOIN, WHERE, ORDER
BY, TOP, GROUP BY with COUNT/SUM; no DISTINCT, HAVING, subqueries, date functions), and the
rows back into the records the composer reads (``id``, ``name``, ``stage``, …), so every
question family the planner knows works on this surface too, citing the GUIDs the rows hold.

How it fits the model:

* the SQL tool is found by its shape (:func:`copilot.crm.sql_schema.sql_query_argument`), never
  its name, and serves each read role no typed tool serves, through a stand-in tool per role
  (``<tool>:<role>``) the planner calls like any other;
* on the way out (:meth:`SqlSurface.realize`) a stand-in call becomes the real call with the
  SQL, and the model's message notes which read each query was (``response_metadata``, never
  sent to the CRM or to another model);
* on the way in (:meth:`SqlSurface.virtualize`) each such call and its result are read back
  as the stand-in call and a composer-shaped result.

Table and column names come from the compact schema in the system prompt
(:mod:`copilot.crm.sql_schema`) when it is there, with Dataverse's standard names otherwise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolCall, ToolMessage

from copilot.citations import message_text
from copilot.crm.sql_schema import ToolShape, parse_schema_note, sql_query_argument
from offline_model.catalog import BoundTool, ToolCatalog
from offline_model.roles import ReadRole, Role
from offline_model.state import parse_tool_result
from offline_model.steps import PlannedCall

QUERY_ROLES: dict[ReadRole, tuple[str, ...]] = {
    "account_search": ("query",),
    "account_detail": ("account_id",),
    "opportunity_list": ("account_id", "owner", "stage", "closing_after", "closing_before", "open_only"),
    "opportunity_detail": ("opportunity_id",),
    "activity_list": ("account_id", "since", "limit"),
    "contact_list": ("account_id",),
    "pipeline": ("scope", "period_start", "period_end"),
}
"""The reads a SQL query can make, with the arguments the planner gives each."""

METADATA_KEY = "sql_reads"
"""Where a model message notes, per query text, the read it made: ``{sql: [role, args]}``."""

LIST_TOP = 50
"""Rows a list read asks for (the CRM caps rows anyway; there is no paging)."""

_ASSISTING_RE = re.compile(r"\bYou are assisting (.+?)\. Today is\b")
_STAGE_PREFIX_RE = re.compile(r"^\d+-")
_ACTIVITY_TYPES = {"phonecall": "call", "appointment": "meeting"}
"""Dataverse activity tables → the activity types the copilot's vocabulary speaks of."""
_ACTIVITY_MOMENTS = ("actualend", "scheduledstart", "createdon")
"""An activity's moments, in the order that says when it happened (completed, else planned, else logged)."""
_STATE_OF_CLOSED = {"closed won": 1, "won": 1, "closed lost": 2, "lost": 2}


@dataclass(frozen=True)
class Names:
    """Table and column names: those the schema note lists, else Dataverse's standard ones."""

    tables: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def column(self, table: str, *candidates: str, suffix: str | None = None) -> str | None:
        """The first of ``candidates`` the table has (or one ending in ``suffix``); without a
        schema for the table, the first candidate (Dataverse's standard name), except for a
        column only some orgs have (one found by ``suffix``): that one is not guessed."""
        listed = self.tables.get(table)
        if not listed:
            return candidates[0] if candidates and suffix is None else None
        for name in candidates:
            if name in listed:
                return name
        if suffix is not None:
            return next((c for c in listed if c.endswith(suffix)), None)
        return None

    def activity_table(self) -> str:
        """All activities: ``activitypointer`` (the one table every activity type is in)."""
        if not self.tables or "activitypointer" in self.tables:
            return "activitypointer"
        return next((t for t in ("phonecall", "task", "appointment") if t in self.tables), "activitypointer")


def quote(value: object) -> str:
    """A SQL string literal (quotes doubled: a rep's words never end the literal)."""
    return "'" + str(value).replace("'", "''") + "'"


@dataclass
class Select:
    """One SELECT of the subset, assembled clause by clause."""

    table: str
    alias: str
    columns: list[str] = field(default_factory=list)
    joins: list[str] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    group: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    top: int | None = None

    def pick(self, column: str | None, alias: str, table_alias: str | None = None) -> None:
        """Select ``column`` (if the table has it) under the composer's name ``alias``."""
        if column is not None:
            self.columns.append(f"{table_alias or self.alias}.{column} AS {alias}")

    def sql(self) -> str:
        """The query text."""
        parts = ["SELECT" + (f" TOP {self.top}" if self.top else ""), ", ".join(self.columns)]
        parts.append(f"FROM {self.table} AS {self.alias}")
        parts += self.joins
        if self.where:
            parts.append("WHERE " + " AND ".join(self.where))
        if self.group:
            parts.append("GROUP BY " + ", ".join(self.group))
        if self.order:
            parts.append("ORDER BY " + ", ".join(self.order))
        return " ".join(parts)


@dataclass(frozen=True)
class SqlComposer:
    """Composes the SQL of one read from its role and arguments."""

    names: Names
    rep_name: str | None = None
    """The rep's full name (the prompt's "You are assisting …"): "my deals" are theirs."""

    def sql(self, role: ReadRole, args: Mapping[str, Any]) -> str:
        """The query for ``role`` with ``args`` (the arguments of :data:`QUERY_ROLES`)."""
        match role:
            case "account_search" | "account_detail":
                return self._accounts(args).sql()
            case "opportunity_list" | "opportunity_detail":
                return self._opportunities(args).sql()
            case "activity_list":
                return self._activities(args).sql()
            case "contact_list":
                return self._contacts(args).sql()
            case "pipeline":
                return self._pipeline(args).sql()
            case _:
                raise ValueError(f"no SQL for the read {role}")

    def _accounts(self, args: Mapping[str, Any]) -> Select:
        n = self.names
        q = Select("account", "a")
        q.pick(n.column("account", "accountid"), "id")
        q.pick(n.column("account", "name"), "name")
        q.pick(n.column("account", "industrycode", suffix="industry"), "industry")
        q.pick(n.column("account", "address1_city", suffix="city"), "city")
        owner = n.column("account", "ownerid")
        if owner is not None:
            q.joins.append(f"LEFT JOIN systemuser AS u ON u.systemuserid = a.{owner}")
            q.pick(n.column("systemuser", "fullname"), "owner_name", "u")
        if "account_id" in args:
            q.where.append(f"a.accountid = {quote(args['account_id'])}")
            return q
        words = re.findall(r"[\w&.'-]+", str(args.get("query") or ""))
        q.where += [f"a.name LIKE {quote(f'%{w}%')}" for w in words]
        q.order.append("a.name")
        q.top = LIST_TOP
        return q

    def _opportunities(self, args: Mapping[str, Any]) -> Select:
        n = self.names
        q = Select("opportunity", "o")
        q.pick(n.column("opportunity", "opportunityid"), "id")
        q.pick(n.column("opportunity", "name"), "name")
        stage = n.column("opportunity", "stepname", "salesstage")
        q.pick(stage, "stage")
        q.pick(n.column("opportunity", "estimatedvalue"), "amount")
        close = n.column("opportunity", "estimatedclosedate")
        q.pick(close, "close_date")
        q.pick(n.column("opportunity", "closeprobability"), "probability")
        q.pick(n.column("opportunity", "description"), "next_step")
        parent = n.column("opportunity", "parentaccountid", "customerid")
        if parent is not None:
            q.joins.append(f"LEFT JOIN account AS a ON a.accountid = o.{parent}")
            q.pick("accountid", "account_id", "a")
            q.pick("name", "account_name", "a")
        if "opportunity_id" in args:
            q.where.append(f"o.opportunityid = {quote(args['opportunity_id'])}")
            return q
        if args.get("account_id") and parent is not None:
            q.where.append(f"o.{parent} = {quote(args['account_id'])}")
        asked = str(args.get("stage") or "")
        state = _STATE_OF_CLOSED.get(asked.lower())
        if state is not None:
            q.where.append(f"o.statecode = {state}")
        elif args.get("open_only", True) is not False:
            q.where.append("o.statecode = 0")
        if asked and state is None and stage is not None:
            # stepname reads "3-Proposal" in Sales' default process: match the stage's name at the end.
            q.where.append(f"o.{stage} LIKE {quote(f'%{asked}')}")
        if close is not None and args.get("closing_after"):
            q.where.append(f"o.{close} >= {quote(args['closing_after'])}")
        if close is not None and args.get("closing_before"):
            q.where.append(f"o.{close} <= {quote(args['closing_before'])}")
        self._owned(q, "opportunity", "o", args.get("owner"))
        q.order.append(f"o.{close or 'name'}")
        q.top = LIST_TOP
        return q

    def _owned(self, q: Select, table: str, alias: str, owner: object) -> None:
        """Only the rep's own rows for "my …" (a team's or anyone's: what the rep may see)."""
        column = self.names.column(table, "ownerid")
        if owner != "me" or not self.rep_name or column is None:
            return
        q.joins.append(f"JOIN systemuser AS own ON own.systemuserid = {alias}.{column}")
        q.where.append(f"own.fullname = {quote(self.rep_name)}")

    def _activities(self, args: Mapping[str, Any]) -> Select:
        n = self.names
        table = n.activity_table()
        q = Select(table, "t")
        q.pick(n.column(table, "activityid"), "id")
        q.pick(n.column(table, "activitytypecode"), "type")
        q.pick(n.column(table, "subject"), "subject")
        q.pick(n.column(table, "description"), "notes")
        # When it happened: the actual end of a completed one, else its start, else its creation
        # (no COALESCE in the subset: all three come back and the first set one is used).
        for column in _ACTIVITY_MOMENTS:
            q.pick(n.column(table, column), column)
        regarding = n.column(table, "regardingobjectid")
        if args.get("account_id") and regarding is not None:
            # An account's activities are those regarding it or one of its deals.
            q.joins.append(f"LEFT JOIN opportunity AS o ON o.opportunityid = t.{regarding}")
            acc = quote(args["account_id"])
            q.where.append(f"(t.{regarding} = {acc} OR o.parentaccountid = {acc})")
        else:
            self._owned(q, table, "t", "me")
        if args.get("since"):
            since = quote(args["since"])
            q.where.append(f"(t.actualend >= {since} OR t.scheduledstart >= {since})")
        q.order += ["t.actualend DESC", "t.createdon DESC"]
        limit = args.get("limit")
        q.top = int(limit) if isinstance(limit, int) and limit > 0 else LIST_TOP
        return q

    def _contacts(self, args: Mapping[str, Any]) -> Select:
        n = self.names
        q = Select("contact", "c")
        q.pick(n.column("contact", "contactid"), "id")
        q.pick(n.column("contact", "fullname"), "name")
        q.pick(n.column("contact", "jobtitle"), "title")
        parent = n.column("contact", "parentcustomerid")
        if parent is not None and args.get("account_id"):
            q.where.append(f"c.{parent} = {quote(args['account_id'])}")
        q.order.append("c.fullname")
        q.top = LIST_TOP
        return q

    def _pipeline(self, args: Mapping[str, Any]) -> Select:
        n = self.names
        q = Select("opportunity", "o")
        stage = n.column("opportunity", "stepname", "salesstage") or "stepname"
        value = n.column("opportunity", "estimatedvalue") or "estimatedvalue"
        close = n.column("opportunity", "estimatedclosedate") or "estimatedclosedate"
        probability = n.column("opportunity", "closeprobability")
        q.columns += [
            f"o.{stage} AS stage",
            "COUNT(o.opportunityid) AS count",
            f"SUM(o.{value}) AS amount",
        ]
        if probability is not None:
            q.columns.append(f"SUM(o.{value} * o.{probability} / 100) AS weighted")
        q.where.append("o.statecode = 0")
        if args.get("period_start"):
            q.where.append(f"o.{close} >= {quote(args['period_start'])}")
        if args.get("period_end"):
            q.where.append(f"o.{close} <= {quote(args['period_end'])}")
        self._owned(q, "opportunity", "o", "any" if args.get("scope") == "team" else "me")
        q.group.append(f"o.{stage}")
        q.order.append(f"o.{stage}")
        return q


def _record(row: Mapping[str, Any]) -> dict[str, Any]:
    """One row in the composer's shape: the account and owner nested, the stage's name, dates."""
    item: dict[str, Any] = {}
    for key, value in row.items():
        if value is None or key in ("account_id", "account_name", "owner_name"):
            continue
        item[key] = value
    if row.get("account_id"):
        item["account"] = {"id": row["account_id"], "name": row.get("account_name") or ""}
    if row.get("owner_name"):
        item["owner"] = {"name": row["owner_name"]}
    if isinstance(item.get("stage"), str):
        item["stage"] = _STAGE_PREFIX_RE.sub("", item["stage"])
    if isinstance(item.get("close_date"), str):
        item["close_date"] = item["close_date"][:10]
    if "type" in item:
        item["type"] = _ACTIVITY_TYPES.get(str(item["type"]), str(item["type"]))
        # When it happened: the first of these the row has (see SqlComposer._activities).
        moments = [item.pop(k, None) for k in _ACTIVITY_MOMENTS]
        when = next((m for m in moments if m), None)
        if when is not None:
            item["occurred_at"] = when
    return item


def shaped_result(role: ReadRole, args: Mapping[str, Any], data: Any) -> dict[str, Any]:
    """A query's result (``rows``) as the composer reads the role's result."""
    rows = [r for r in data.get("rows", []) if isinstance(r, dict)] if isinstance(data, dict) else []
    if role in ("account_detail", "opportunity_detail"):
        if not rows:
            key = "account_id" if role == "account_detail" else "opportunity_id"
            return {"error": {"code": "not_found", "message": f"No record with id {args.get(key)}."}}
        return _record(rows[0])
    if role == "pipeline":
        by_stage = [
            {
                "stage": _STAGE_PREFIX_RE.sub("", str(r.get("stage") or "")),
                "count": r.get("count"),
                "amount": r.get("amount"),
            }
            for r in rows
        ]
        return {
            "period": {"start": args.get("period_start"), "end": args.get("period_end")},
            "count": sum(int(r.get("count") or 0) for r in rows),
            "total_amount": sum(float(r.get("amount") or 0) for r in rows),
            "weighted_amount": sum(float(r.get("weighted") or 0) for r in rows),
            "by_stage": by_stage,
            "opportunity_ids": [],
        }
    items = [_record(r) for r in rows]
    result: dict[str, Any] = {"items": items}
    if not (isinstance(data, dict) and data.get("truncated")):
        result["total"] = len(items)
    return result


def rep_name(messages: Sequence[BaseMessage]) -> str | None:
    """The rep's name as the system prompt gives it ("You are assisting Alex Wilber.")."""
    for message in messages:
        if isinstance(message, SystemMessage):
            found = _ASSISTING_RE.search(message_text(message))
            if found is not None and found.group(1) != "a sales rep":
                return found.group(1)
    return None


def schema_names(messages: Sequence[BaseMessage]) -> Names:
    """Table and column names from the schema note in the system prompt (standard ones without it)."""
    for message in messages:
        if isinstance(message, SystemMessage):
            tables = parse_schema_note(message_text(message))
            if tables:
                return Names(tables)
    return Names()


def query_tool(catalog: ToolCatalog) -> tuple[BoundTool, str] | None:
    """The bound read-only SQL query tool and its query argument, if one is bound."""
    for tool in catalog.tools.values():
        shape = ToolShape(tool.name, tool.description, tool.parameters, tool.read_only)
        argument = sql_query_argument(shape)
        if argument is not None:
            return tool, argument
    return None


@dataclass(frozen=True)
class SqlSurface:
    """The read roles a bound SQL tool serves for this model call, and the translation both ways."""

    tool: str
    argument: str
    composer: SqlComposer
    roles: Mapping[ReadRole, BoundTool]
    """Each served role's stand-in tool (``<tool>:<role>``)."""

    @classmethod
    def of(cls, catalog: ToolCatalog, messages: Sequence[BaseMessage]) -> SqlSurface | None:
        """The surface when a SQL tool is bound and some read role has no typed tool; else ``None``
        (a CRM with typed reads is planned exactly as before)."""
        found = query_tool(catalog)
        if found is None:
            return None
        tool, argument = found
        roles = {
            role: BoundTool(
                name=f"{tool.name}:{role}",
                description=f"{role.replace('_', ' ')} through {tool.name}",
                parameters={"type": "object", "properties": {a: {} for a in arguments}},
                read_only=True,
            )
            for role, arguments in QUERY_ROLES.items()
            if not catalog.has(role)
        }
        if not roles:
            return None
        return cls(tool.name, argument, SqlComposer(schema_names(messages), rep_name(messages)), roles)

    def catalog(self, base: ToolCatalog) -> ToolCatalog:
        """``base`` with the stand-in tools serving their roles."""
        served: dict[Role, BoundTool] = dict(self.roles.items())
        return base.with_roles(served)

    def _role_of(self, name: str) -> ReadRole | None:
        return next((role for role, tool in self.roles.items() if tool.name == name), None)

    def realize(self, calls: Sequence[PlannedCall]) -> tuple[list[PlannedCall], dict[str, Any]]:
        """The real calls for planned ones (stand-ins become queries) and the note of which read
        each query is, for the message's ``response_metadata``."""
        real: list[PlannedCall] = []
        reads: dict[str, Any] = {}
        for call in calls:
            role = self._role_of(call.name)
            if role is None:
                real.append(call)
                continue
            text = self.composer.sql(role, call.args)
            reads[text] = [role, call.args]
            real.append(PlannedCall(self.tool, {self.argument: text}))
        return real, ({METADATA_KEY: reads} if reads else {})

    def virtualize(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The conversation with each query this model made read back as the stand-in call it
        was, and its rows as that read's result (other calls and results unchanged)."""
        out: list[BaseMessage] = []
        by_call: dict[str, tuple[ReadRole, dict[str, Any]]] = {}
        for message in messages:
            if isinstance(message, AIMessage) and message.tool_calls:
                reads = message.response_metadata.get(METADATA_KEY)
                if isinstance(reads, dict) and reads:
                    message = self._virtual_calls(message, reads, by_call)
            elif isinstance(message, ToolMessage) and message.tool_call_id in by_call:
                role, args = by_call[message.tool_call_id]
                result = parse_tool_result(message)
                content = message.content
                if result.ok:
                    content = json.dumps(shaped_result(role, args, result.data), default=str)
                message = message.model_copy(update={"content": content, "name": self.roles[role].name})
            out.append(message)
        return out

    def _virtual_calls(
        self,
        message: AIMessage,
        reads: Mapping[str, Any],
        by_call: dict[str, tuple[ReadRole, dict[str, Any]]],
    ) -> AIMessage:
        calls: list[ToolCall] = []
        for tc in message.tool_calls:
            noted = reads.get(str(tc["args"].get(self.argument))) if tc["name"] == self.tool else None
            if isinstance(noted, list) and len(noted) == 2 and noted[0] in self.roles:
                role: ReadRole = noted[0]
                args = dict(noted[1]) if isinstance(noted[1], dict) else {}
                by_call[str(tc.get("id"))] = (role, args)
                calls.append(
                    ToolCall(name=self.roles[role].name, args=args, id=tc.get("id"), type="tool_call")
                )
            else:
                calls.append(tc)
        return message.model_copy(update={"tool_calls": calls})
