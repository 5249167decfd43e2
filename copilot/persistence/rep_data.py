"""A rep's data on request: export it, or delete it (``python -m copilot data export|delete``).

What a rep's data is comes from the layers' data maps (:mod:`copilot.persistence.data_map`):
the copilot's threads and their side tables, the bot's conversations, approval cards, SSO
tokens, pending messages, answers and feedback. Two kinds of state are LangGraph's and are
only reached through its public API, never with SQL on its tables:

* checkpoints of the rep's threads (and of their side threads):
  :meth:`AsyncPostgresSaver.alist` to export and count, :meth:`AsyncPostgresSaver.adelete_thread`
  to delete;
* the rep's store items (preferences, namespaced ``(tenant, rep, ...)``):
  :meth:`AsyncPostgresStore.alist_namespaces` / ``asearch`` to find them, ``adelete`` to delete.

Each table group runs in one transaction: the upper layers' groups first (their rows would
otherwise go by ``ON DELETE CASCADE`` from the copilot's threads and not be counted), then
the copilot's group, whose transaction also holds the checkpoint and store deletions (both
run on the same connection). The audit log is kept: it is the compliance record of the
writes the rep approved, append-only, and the application role cannot delete from it.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from langchain_core.load import dumpd
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg import AsyncConnection, sql
from psycopg.rows import dict_row

from copilot.persistence import threads
from copilot.persistence.data_map import LayerDataMap, MappedTable, load_data_maps, rep_params, rep_predicate

Progress = Callable[[int, int, str], None]
"""``(done, total, what)`` after each step, for a progress bar."""

Action = Literal["export", "delete", "dry_run"]

CHECKPOINTS = "checkpoints"
"""The count key of the rep's LangGraph checkpoints (in the copilot's group)."""
STORE_ITEMS = "store_items"
"""The count key of the rep's LangGraph store items (in the copilot's group)."""
COPILOT_GROUP = "copilot"

AUDIT_KEPT_NOTE = (
    "audit_log rows are kept: they are the compliance record of executed writes "
    "(append-only, hash-chained; the application role cannot delete them)"
)

_NAMESPACE_PAGE = 100
_ITEM_PAGE = 100


@dataclass
class RepDataReport:
    """What an export, deletion or dry run touched: row counts per table group."""

    action: Action
    rep: str
    tenant: str | None
    groups: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per table group, rows (or checkpoints, store items) per table."""
    audit_rows_kept: int = 0
    data: dict[str, Any] | None = None
    """The exported data (export only): per group, per table, JSON-ready rows."""

    @property
    def total(self) -> int:
        return sum(sum(counts.values()) for counts in self.groups.values())

    def summary(self) -> dict[str, Any]:
        """The report without the data, for ``--json`` and logs."""
        return {
            "action": self.action,
            "rep": self.rep,
            "tenant": self.tenant,
            "groups": self.groups,
            "total": self.total,
            "audit_rows_kept": self.audit_rows_kept,
            "note": AUDIT_KEPT_NOTE,
        }

    def document(self) -> dict[str, Any]:
        """The export file: the summary plus the data."""
        return {**self.summary(), "exported_at": dt.datetime.now(dt.UTC).isoformat(), "data": self.data}


async def export_rep_data(
    conn: AsyncConnection[Any],
    *,
    rep: str,
    tenant: str | None = None,
    serde: Any = None,
    progress: Progress | None = None,
    maps: Sequence[LayerDataMap] | None = None,
) -> RepDataReport:
    """Everything stored about ``rep`` (an AAD object id; in ``tenant`` only, if given).

    ``conn`` is an autocommit connection; each table group is read in one transaction.
    ``serde`` is the checkpointer's serializer (LangGraph's default when None).
    """
    report = RepDataReport("export", rep, tenant, data={})
    assert report.data is not None
    steps = _Steps(list(maps or load_data_maps()), progress)
    for layer in steps.maps:
        async with conn.transaction():
            group: dict[str, Any] = {}
            counts: dict[str, int] = {}
            for table in layer.tables:
                rows = await _select(conn, table, rep, tenant)
                group[table.table] = rows
                counts[table.table] = len(rows)
                steps.done(f"{layer.group}.{table.table}")
            if layer.group == COPILOT_GROUP:
                saver, store = _saver_and_store(conn, serde)
                thread_ids = await _thread_ids(conn, rep, tenant)
                group[CHECKPOINTS] = {
                    t: await _export_checkpoints(saver, t) for t in _graph_threads(thread_ids)
                }
                counts[CHECKPOINTS] = sum(len(c) for c in group[CHECKPOINTS].values())
                steps.done(f"{layer.group}.{CHECKPOINTS}")
                items = await _store_items(store, rep, tenant)
                group[STORE_ITEMS] = [
                    {
                        "namespace": list(item.namespace),
                        "key": item.key,
                        "value": item.value,
                        "created_at": item.created_at,
                        "updated_at": item.updated_at,
                    }
                    for item in items
                ]
                counts[STORE_ITEMS] = len(items)
                steps.done(f"{layer.group}.{STORE_ITEMS}")
        report.data[layer.group] = _jsonable(group)
        report.groups[layer.group] = counts
    report.audit_rows_kept = await _audit_rows(conn, rep, tenant)
    return report


async def delete_rep_data(
    conn: AsyncConnection[Any],
    *,
    rep: str,
    tenant: str | None = None,
    dry_run: bool = False,
    serde: Any = None,
    progress: Progress | None = None,
    maps: Sequence[LayerDataMap] | None = None,
) -> RepDataReport:
    """Delete everything stored about ``rep`` except the audit log; ``dry_run`` only counts.

    One transaction per table group, the upper layers' first (see the module docstring);
    a dry run counts inside the same transactions and rolls nothing forward. A failure
    rolls back its group and leaves the groups already done deleted (run it again: it
    finds the rest).
    """
    report = RepDataReport("dry_run" if dry_run else "delete", rep, tenant)
    steps = _Steps(list(reversed(list(maps or load_data_maps()))), progress)
    for layer in steps.maps:
        counts: dict[str, int] = {}
        async with conn.transaction():
            if layer.group == COPILOT_GROUP:
                # LangGraph's state first, while the thread rows still name the threads.
                saver, store = _saver_and_store(conn, serde)
                thread_ids = await _thread_ids(conn, rep, tenant)
                checkpoints = 0
                for thread_id in _graph_threads(thread_ids):
                    checkpoints += await _count_checkpoints(saver, thread_id)
                    if not dry_run:
                        await saver.adelete_thread(thread_id)
                counts[CHECKPOINTS] = checkpoints
                steps.done(f"{layer.group}.{CHECKPOINTS}")
                items = await _store_items(store, rep, tenant)
                if not dry_run:
                    for item in items:
                        await store.adelete(item.namespace, item.key)
                counts[STORE_ITEMS] = len(items)
                steps.done(f"{layer.group}.{STORE_ITEMS}")
            # Children before parents, so each row is counted in its own table.
            for table in reversed(layer.tables):
                counts[table.table] = await (
                    _count(conn, table, rep, tenant) if dry_run else _delete(conn, table, rep, tenant)
                )
                steps.done(f"{layer.group}.{table.table}")
        report.groups[layer.group] = counts
    report.audit_rows_kept = await _audit_rows(conn, rep, tenant)
    return report


class _Steps:
    def __init__(self, maps: list[LayerDataMap], progress: Progress | None):
        self.maps = maps
        self._progress = progress
        self._done = 0
        self._total = sum(len(m.tables) + (2 if m.group == COPILOT_GROUP else 0) for m in maps)

    def done(self, what: str) -> None:
        self._done += 1
        if self._progress is not None:
            self._progress(self._done, self._total, what)


def _saver_and_store(conn: AsyncConnection[Any], serde: Any) -> tuple[AsyncPostgresSaver, AsyncPostgresStore]:
    # On this connection, so their statements are part of the group's transaction.
    return AsyncPostgresSaver(conn=conn, serde=serde), AsyncPostgresStore(conn=conn)


def _graph_threads(thread_ids: Sequence[str]) -> list[str]:
    # A side run cut short by a crash may have left its side thread's checkpoints.
    return [t for thread_id in thread_ids for t in (thread_id, threads.side_thread_id(thread_id))]


async def _thread_ids(conn: AsyncConnection[Any], rep: str, tenant: str | None) -> list[str]:
    query = sql.SQL("SELECT thread_id FROM threads WHERE owner_aad_id = %(rep)s") + (
        sql.SQL(" AND tenant_id = %(tenant)s") if tenant is not None else sql.SQL("")
    )
    rows = await _fetch(conn, query + sql.SQL(" ORDER BY thread_id"), rep_params(rep, tenant))
    return [str(r["thread_id"]) for r in rows]


async def _select(
    conn: AsyncConnection[Any], table: MappedTable, rep: str, tenant: str | None
) -> list[dict[str, Any]]:
    query = sql.SQL("SELECT * FROM {} WHERE ").format(sql.Identifier(table.table)) + rep_predicate(
        table, tenant=tenant
    )
    rows = await _fetch(conn, query, rep_params(rep, tenant))
    omitted = set(table.omit_on_export)
    return [{k: v for k, v in row.items() if k not in omitted} for row in rows]


async def _count(conn: AsyncConnection[Any], table: MappedTable, rep: str, tenant: str | None) -> int:
    query = sql.SQL("SELECT count(*) AS n FROM {} WHERE ").format(
        sql.Identifier(table.table)
    ) + rep_predicate(table, tenant=tenant)
    return int((await _fetch(conn, query, rep_params(rep, tenant)))[0]["n"])


async def _delete(conn: AsyncConnection[Any], table: MappedTable, rep: str, tenant: str | None) -> int:
    query = sql.SQL("DELETE FROM {} WHERE ").format(sql.Identifier(table.table)) + rep_predicate(
        table, tenant=tenant
    )
    cur = await conn.execute(query, rep_params(rep, tenant))
    return max(cur.rowcount, 0)


async def _audit_rows(conn: AsyncConnection[Any], rep: str, tenant: str | None) -> int:
    query = sql.SQL("SELECT count(*) AS n FROM audit_log WHERE rep_aad_id = %(rep)s") + (
        sql.SQL(" AND tenant_id = %(tenant)s") if tenant is not None else sql.SQL("")
    )
    return int((await _fetch(conn, query, rep_params(rep, tenant)))[0]["n"])


async def newest_audit_write(
    conn: AsyncConnection[Any], *, rep: str, tenant: str | None
) -> dt.datetime | None:
    """When the rep's newest audit row was written (kept ``COPILOT_AUDIT_RETENTION_DAYS`` from then)."""
    query = sql.SQL("SELECT max(executed_at) AS newest FROM audit_log WHERE rep_aad_id = %(rep)s") + (
        sql.SQL(" AND tenant_id = %(tenant)s") if tenant is not None else sql.SQL("")
    )
    newest = (await _fetch(conn, query, rep_params(rep, tenant)))[0]["newest"]
    return newest if isinstance(newest, dt.datetime) else None


async def _fetch(conn: AsyncConnection[Any], query: sql.Composed, params: Any) -> list[dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()


def _config(thread_id: str) -> RunnableConfig:
    # No checkpoint_ns: every namespace of the thread.
    return {"configurable": {"thread_id": thread_id}}


async def _count_checkpoints(saver: AsyncPostgresSaver, thread_id: str) -> int:
    return len([c async for c in saver.alist(_config(thread_id))])


async def _export_checkpoints(saver: AsyncPostgresSaver, thread_id: str) -> list[dict[str, Any]]:
    exported = []
    async for c in saver.alist(_config(thread_id)):
        configurable = c.config["configurable"]
        exported.append(
            {
                "checkpoint_ns": configurable.get("checkpoint_ns", ""),
                "checkpoint_id": configurable.get("checkpoint_id"),
                "ts": c.checkpoint["ts"],
                "metadata": c.metadata,
                "channel_values": c.checkpoint["channel_values"],
                "pending_writes": [
                    {"task_id": task, "channel": channel, "value": value}
                    for task, channel, value in c.pending_writes or ()
                ],
            }
        )
    return exported


async def _store_items(store: AsyncPostgresStore, rep: str, tenant: str | None) -> list[Any]:
    """The rep's items: every namespace ``(tenant, rep, ...)`` (any tenant when None)."""
    prefix = (tenant if tenant is not None else "*", rep)
    namespaces: list[tuple[str, ...]] = []
    offset = 0
    while True:
        page = await store.alist_namespaces(prefix=prefix, limit=_NAMESPACE_PAGE, offset=offset)
        namespaces += [
            ns for ns in page if len(ns) >= 2 and ns[1] == rep and (tenant is None or ns[0] == tenant)
        ]
        if len(page) < _NAMESPACE_PAGE:
            break
        offset += _NAMESPACE_PAGE
    items: list[Any] = []
    for namespace in namespaces:
        offset = 0
        while True:
            found = await store.asearch(namespace, limit=_ITEM_PAGE, offset=offset)
            items += [item for item in found if tuple(item.namespace) == namespace]
            if len(found) < _ITEM_PAGE:
                break
            offset += _ITEM_PAGE
    return items


def _jsonable(value: Any) -> Any:
    """Rows and graph state as JSON: messages by LangChain's own serialisation."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    serialised = dumpd(value)
    if isinstance(serialised, dict) and serialised.get("type") == "not_implemented":
        return repr(value)
    return _jsonable(serialised)
