"""The Dataverse MCP tool surface (``/api/mcp``): the current tool shape, over the sandbox CRM.

Read tools (``search``, ``describe``, ``read_query``, ``search_data``) carry
``readOnlyHint: true``; write tools (``create_record``, ``update_record``,
``delete_record``) carry no hints and take no version: last writer wins, as on the real
server, so a product can only get version checks from the Web API. A knob renames or
removes tools at run time, because Microsoft says clients must discover them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Annotated, Any

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, ContentBlock, TextContent, ToolAnnotations
from mcp.types import Tool as MCPTool
from pydantic import Field

from sandbox.config import SandboxSettings
from sandbox.dataverse import sql
from sandbox.dataverse.errors import DataverseError, bad_request
from sandbox.dataverse.ids import parse_guid
from sandbox.dataverse.records import DataverseService
from sandbox.dataverse.schema import SQL_TYPES, Entity
from sandbox.directory import User
from sandbox.knobs import KnobState

CALLER_SCOPE_KEY = "sandbox.dataverse.caller"
READ_TOOLS = ("search", "describe", "read_query", "search_data")
WRITE_TOOLS = ("create_record", "update_record", "delete_record")
SEARCHABLE = ("account", "contact", "opportunity", "phonecall", "task", "appointment")

_READ = ToolAnnotations(readOnlyHint=True)

TableName = Annotated[str, Field(description="Table logical name, e.g. opportunity, account, phonecall.")]


def _caller(ctx: Context[Any, Any, Any]) -> User:
    request = ctx.request_context.request
    caller = None if request is None else request.scope.get(CALLER_SCOPE_KEY)
    if not isinstance(caller, User):
        # The gate authenticates every request first; reaching here means it was bypassed.
        raise RuntimeError("tool called without an authenticated caller")
    return caller


def describe_table(entity: Entity) -> str:
    """A compact T-SQL-style schema: columns with types, keys and relationships."""
    lines = []
    for column in entity.columns:
        sql_type = SQL_TYPES[column.type]
        if column.type == "string" and column.max_length:
            sql_type = f"NVARCHAR({column.max_length})"
        notes = []
        if column.name == entity.primary_id:
            notes.append("PRIMARY KEY")
        if column.type == "lookup":
            notes.append("REFERENCES " + " | ".join(f"{t}({t}id)" for t in column.targets))
        if column.secured:
            notes.append("-- secured column: null unless you hold its field permission")
        elif column.description:
            notes.append(f"-- {column.description}")
        lines.append(f"  {column.name} {sql_type} {' '.join(notes)}".rstrip())
    key = f"\n-- alternate key: {entity.alternate_key}" if entity.alternate_key else ""
    return f"CREATE TABLE {entity.logical_name} (\n" + ",\n".join(lines) + "\n);" + key


class DiscoverableFastMCP(FastMCP[Any]):
    """FastMCP whose tool names follow the ``dataverse_mcp_tool_names`` knob at run time."""

    def __init__(self, knobs: KnobState, **settings: Any) -> None:
        self._knobs = knobs
        super().__init__(**settings)

    def _renames(self) -> dict[str, str | None]:
        return dict(self._knobs.knobs.dataverse_mcp_tool_names)

    async def list_tools(self) -> list[MCPTool]:
        """The tools as currently named; removed ones are left out."""
        renames = self._renames()
        listed: list[MCPTool] = []
        for tool in await super().list_tools():
            if tool.name in renames:
                new_name = renames[tool.name]
                if new_name is None:
                    continue
                tool = tool.model_copy(update={"name": new_name})
            listed.append(tool)
        return listed

    async def call_tool(
        self, name: str, arguments: dict[str, Any]
    ) -> Sequence[ContentBlock] | dict[str, Any]:
        """Call a tool by its current name; an old or removed name is an unknown tool."""
        renames = self._renames()
        internal = next((old for old, new in renames.items() if new == name), None)
        if internal is None and name not in renames:
            internal = name
        if internal is None:
            raise ToolError(f"Unknown tool: {name}")
        return await super().call_tool(internal, arguments)


def build_dataverse_mcp(
    settings: SandboxSettings, knobs: KnobState, service: DataverseService
) -> DiscoverableFastMCP:
    """The FastMCP server with the Dataverse MCP tools."""
    mcp = DiscoverableFastMCP(
        knobs,
        name="Dataverse MCP Server",
        instructions=(
            "Dataverse data and schema under your own security roles. Use describe for a table's "
            "schema before read_query. read_query takes Dataverse SQL: SELECT, JOIN, WHERE, ORDER BY, "
            "TOP, GROUP BY with COUNT/SUM/AVG/MIN/MAX; no DISTINCT, HAVING, subqueries, OFFSET, UNION, "
            "CASE, CAST, CTEs or date functions. No paging: results are capped."
        ),
        stateless_http=True,
        json_response=True,
        streamable_http_path="/",
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=[
                "http://127.0.0.1:*",
                "http://localhost:*",
                "https://localhost:*",
                "https://127.0.0.1:*",
            ],
        ),
    )
    # As on the sandbox's own server: unset, the SDK scans installed packages per request.
    mcp._mcp_server.version = version("mcp")
    tables = service.tables
    row_cap = settings.dataverse_mcp_row_cap

    def table(name: str) -> Entity:
        entity = tables.get(name.strip().lower())
        if entity is None:
            raise bad_request(f"Unknown table '{name}'. Tables: {', '.join(tables)}.")
        return entity

    def guid(value: str) -> str:
        parsed = parse_guid(value)
        if parsed is None:
            raise bad_request(f"'{value}' is not a record id (GUID).")
        return parsed

    async def run(ctx: Context[Any, Any, Any], call: Callable[[User], Any]) -> CallToolResult:
        caller = _caller(ctx)
        try:
            result = await anyio.to_thread.run_sync(lambda: call(caller))
        except DataverseError as exc:
            return CallToolResult(
                content=[TextContent(type="text", text=json.dumps(exc.payload()))],
                structuredContent=exc.payload(),
                isError=True,
            )
        except sql.UnsupportedSql as exc:
            payload = {"error": {"code": "0x80040203", "message": str(exc)}}
            return CallToolResult(
                content=[TextContent(type="text", text=json.dumps(payload))],
                structuredContent=payload,
                isError=True,
            )
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(result, default=str))], structuredContent=result
        )

    @mcp.tool(annotations=_READ)
    async def search(
        ctx: Context[Any, Any, Any],
        query: Annotated[str, Field(description="Keywords about tables or columns, e.g. 'deal stage'.")],
    ) -> CallToolResult:
        """Keyword search over the environment's table schemas (names, descriptions, columns)."""

        def find(_: User) -> dict[str, Any]:
            words = [w for w in query.lower().split() if w]
            hits: list[dict[str, Any]] = []
            for entity in tables.values():
                text = " ".join(
                    [entity.logical_name, entity.set_name, entity.description]
                    + [f"{c.name} {c.description}" for c in entity.columns]
                ).lower()
                score = sum(text.count(w) for w in words)
                if score or not words:
                    hits.append(
                        {
                            "type": "table",
                            "name": entity.logical_name,
                            "description": entity.description,
                            "score": score,
                        }
                    )
            hits.sort(key=lambda h: (-int(h["score"]), str(h["name"])))
            return {"results": hits}

        return await run(ctx, find)

    @mcp.tool(annotations=_READ)
    async def describe(ctx: Context[Any, Any, Any], name: TableName) -> CallToolResult:
        """The T-SQL-style schema of a table: columns, types, keys and relationships."""

        def schema(_: User) -> dict[str, Any]:
            entity = table(name)
            return {"type": "table", "name": entity.logical_name, "schema": describe_table(entity)}

        return await run(ctx, schema)

    @mcp.tool(annotations=_READ)
    async def read_query(
        ctx: Context[Any, Any, Any],
        querytext: Annotated[
            str,
            Field(
                description=(
                    "One Dataverse SQL SELECT. Allowed: SELECT, JOIN, WHERE, ORDER BY, TOP, GROUP BY with "
                    "COUNT/SUM/AVG/MIN/MAX. Not allowed: DISTINCT, HAVING, subqueries, OFFSET, UNION, "
                    "CASE/IF, CAST/CONVERT, CTEs, date functions."
                )
            ),
        ],
    ) -> CallToolResult:
        """Run a read-only Dataverse SQL query over the rows you may see (capped, no paging)."""

        def query(caller: User) -> dict[str, Any]:
            sql.validate(querytext)  # refuse before touching any data
            return sql.run(querytext, service.snapshot(caller), tables, row_cap)

        return await run(ctx, query)

    @mcp.tool(annotations=_READ)
    async def search_data(
        ctx: Context[Any, Any, Any],
        query: Annotated[str, Field(description="Words to find in record names, subjects and emails.")],
        tables_to_search: Annotated[
            list[str] | None, Field(description=f"Tables to search (default: {', '.join(SEARCHABLE)}).")
        ] = None,
    ) -> CallToolResult:
        """Search records you may see by text; ranked hits with table, id and name."""

        def find(caller: User) -> dict[str, Any]:
            words = [w for w in query.lower().split() if w]
            if not words:
                raise bad_request("Give at least one word to search for.")
            names = (
                [table(t).logical_name for t in tables_to_search] if tables_to_search else list(SEARCHABLE)
            )
            snapshot = service.snapshot(caller)
            hits: list[dict[str, Any]] = []
            for name in names:
                entity = tables[name]
                for row in snapshot.rows(name):
                    text = " ".join(
                        str(row.get(c.name) or "") for c in entity.columns if c.type in ("string", "memo")
                    ).lower()
                    score = sum(text.count(w) for w in words)
                    if score and all(w in text for w in words):
                        hits.append(
                            {
                                "table": name,
                                "id": row[entity.primary_id],
                                "name": row.get(entity.primary_name),
                                "score": score,
                            }
                        )
            hits.sort(key=lambda h: (-int(h["score"]), str(h["table"]), str(h["id"])))
            return {"results": hits[:row_cap], "truncated": len(hits) > row_cap}

        return await run(ctx, find)

    @mcp.tool()
    async def create_record(
        ctx: Context[Any, Any, Any],
        tablename: TableName,
        item: Annotated[
            dict[str, Any],
            Field(
                description="Column values by logical name; lookups as '<navigation>@odata.bind': '/<set>(<id>)'."
            ),
        ],
    ) -> CallToolResult:
        """Insert a row and return its id."""

        def create(caller: User) -> dict[str, Any]:
            entity = table(tablename)
            row = service.create(caller, entity.logical_name, item)
            return {"id": row[entity.primary_id], "tablename": entity.logical_name}

        return await run(ctx, create)

    @mcp.tool()
    async def update_record(
        ctx: Context[Any, Any, Any],
        tablename: TableName,
        recordid: Annotated[str, Field(description="The row's id (GUID).")],
        item: Annotated[dict[str, Any], Field(description="Column values to change, by logical name.")],
    ) -> CallToolResult:
        """Update an existing row (the last write wins)."""

        def update(caller: User) -> dict[str, Any]:
            entity = table(tablename)
            row = service.update(caller, entity.logical_name, guid(recordid), item)
            return {"id": row[entity.primary_id], "tablename": entity.logical_name, "updated": True}

        return await run(ctx, update)

    @mcp.tool()
    async def delete_record(
        ctx: Context[Any, Any, Any],
        tablename: TableName,
        recordid: Annotated[str, Field(description="The row's id (GUID).")],
    ) -> CallToolResult:
        """Delete a row. Only after explicit user approval."""

        def delete(caller: User) -> dict[str, Any]:
            entity = table(tablename)
            service.delete(caller, entity.logical_name, guid(recordid))
            return {"id": guid(recordid), "tablename": entity.logical_name, "deleted": True}

        return await run(ctx, delete)

    return mcp
