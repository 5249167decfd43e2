"""Two reps' worth of stored data in every table group, for the data and retention tests.

Checkpoints are made by running a real LangGraph graph on the Postgres saver, and the
preferences go through the store's API, exactly as the product writes them; the other
tables are seeded with plain SQL as their owners write them.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg import AsyncConnection, sql

from copilot.persistence import threads
from copilot.persistence.data_map import load_data_maps

TENANT = "tenant-datalife"


@dataclass
class SeededRep:
    rep: str
    threads: list[str] = field(default_factory=list)


def _graph(saver: AsyncPostgresSaver) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("answer", lambda s: {"messages": [AIMessage(content=f"answer {len(s['messages'])}")]})
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


async def run_turns(saver: AsyncPostgresSaver, thread_id: str, turns: int) -> None:
    """``turns`` runs of a real graph on ``thread_id``: several checkpoints per run."""
    graph = _graph(saver)
    for n in range(turns):
        await graph.ainvoke(
            {"messages": [HumanMessage(content=f"question {n} about acc-acme")]},
            {"configurable": {"thread_id": thread_id}},
        )


async def seed_rep(
    conn: AsyncConnection[Any], rep: str, *, turns: int = 2, tenant: str = TENANT, token_expired: bool = False
) -> SeededRep:
    """Two threads (one with a leftover side thread), preferences, and a row in every table
    of every layer's data map, plus one audit row (which must survive a deletion)."""
    saver = AsyncPostgresSaver(conn=conn)
    store = AsyncPostgresStore(conn=conn)
    seeded = SeededRep(rep)
    for _ in range(2):
        thread_id = await threads.create_thread(conn, tenant_id=tenant, owner_aad_id=rep)
        seeded.threads.append(thread_id)
        await run_turns(saver, thread_id, turns)
    first = seeded.threads[0]
    await run_turns(saver, threads.side_thread_id(first), 1)
    await store.aput((tenant, rep, "preferences"), "preferences", {"tone": "brief", "signature": f"— {rep}"})
    expires_at = dt.datetime.now(dt.UTC) + dt.timedelta(hours=-1 if token_expired else 1)
    statements: list[tuple[str, tuple[Any, ...]]] = [
        (
            "INSERT INTO thread_delegations (thread_id, tenant_id, delegate_aad_id, granted_by) VALUES (%s, %s, %s, %s)",
            (first, tenant, f"{rep}-assistant", rep),
        ),
        (
            "INSERT INTO approval_delegations (tenant_id, owner_aad_id, delegate_aad_id, ends_at)"
            " VALUES (%s, %s, %s, now() + interval '7 days')",
            (tenant, rep, f"{rep}-assistant"),
        ),
        ("INSERT INTO answered_messages (thread_id, message_id) VALUES (%s, %s)", (first, f"msg-{rep}")),
        (
            """INSERT INTO idempotency_keys (key, tenant_id, rep_aad_id, thread_id, tool_call_id, tool, args_hash, status, result)
               VALUES (%s, %s, %s, %s, 'call-1', 'log_activity', 'h', 'done', '{}')""",
            (f"{first}:call-1", tenant, rep, first),
        ),
        (
            """INSERT INTO rejections (tenant_id, rep_aad_id, thread_id, tool_call_id, tool, args, reason)
               VALUES (%s, %s, %s, 'call-2', 'log_activity', '{}', 'duplicate')""",
            (tenant, rep, first),
        ),
        (
            """INSERT INTO suggestion_ledger (tenant_id, rep_aad_id, kind, record_id, record_version, state)
               VALUES (%s, %s, 'close_date_passed', 'opp-1', 3, 'declined')""",
            (tenant, rep),
        ),
        (
            "INSERT INTO catchup_marks (tenant_id, rep_aad_id, caught_up_at) VALUES (%s, %s, now())",
            (tenant, rep),
        ),
        (
            """INSERT INTO audit_log (tenant_id, rep_aad_id, thread_id, tool_call_id, tool, original_args, decision,
                   crm_response, decided_at, executed_at, prev_hash, row_hash, key_id)
               VALUES (%s, %s, %s, 'call-1', 'log_activity', '{}', 'approve', '{}', now(), now(), 'p', %s, 'k1')""",
            (tenant, rep, first, uuid.uuid4().hex),
        ),
        (
            """INSERT INTO conversations (conversation_id, tenant_id, aad_object_id, thread_id, reference)
               VALUES (%s, %s, %s, %s, %s)""",
            (f"conv-{rep}", tenant, rep, first, json.dumps({"conversation": {"id": f"conv-{rep}"}})),
        ),
        (
            "INSERT INTO approval_cards (thread_id, tool_call_id, conversation_id, activity_id) VALUES (%s, 'call-1', %s, 'act-1')",
            (first, f"conv-{rep}"),
        ),
        (
            # Expiry on the copilot's clock (the product compares it with its own "now").
            """INSERT INTO user_tokens (tenant_id, aad_object_id, ciphertext, expires_at)
                VALUES (%s, %s, %s, %s)""",
            (tenant, rep, b"secret-ciphertext", expires_at),
        ),
        (
            "INSERT INTO pending_messages (tenant_id, aad_object_id, conversation_id, text) VALUES (%s, %s, %s, %s)",
            (tenant, rep, f"conv-{rep}", f"a question from {rep}"),
        ),
        (
            """INSERT INTO answers (conversation_id, activity_id, message_id, thread_id, tenant_id, aad_object_id)
               VALUES (%s, 'act-2', 'msg-2', %s, %s, %s)""",
            (f"conv-{rep}", first, tenant, rep),
        ),
        (
            """INSERT INTO answer_feedback (conversation_id, activity_id, thread_id, tenant_id, aad_object_id, rating, comment)
               VALUES (%s, 'act-2', %s, %s, %s, 'dislike', 'too long')""",
            (f"conv-{rep}", first, tenant, rep),
        ),
        (
            "INSERT INTO brief_settings (tenant_id, aad_object_id, enabled, reference) VALUES (%s, %s, true, %s)",
            (tenant, rep, json.dumps({"conversation": {"id": f"conv-{rep}"}})),
        ),
        (
            "INSERT INTO brief_claims (tenant_id, aad_object_id, meeting_id) VALUES (%s, %s, 'evt-1')",
            (tenant, rep),
        ),
        (
            "INSERT INTO digest_claims (tenant_id, aad_object_id, day) VALUES (%s, %s, current_date)",
            (tenant, rep),
        ),
        (
            "INSERT INTO digest_feedback (tenant_id, aad_object_id, day, kind) VALUES (%s, %s, current_date, 'not_useful')",
            (tenant, rep),
        ),
        (
            # The day's sign-in card: expired with the token when that is (retention removes it).
            """INSERT INTO sign_in_prompts (tenant_id, aad_object_id, day, expires_at)
                VALUES (%s, %s, current_date, %s)""",
            (tenant, rep, expires_at),
        ),
    ]
    for statement, params in statements:
        await conn.execute(statement, params)
    return seeded


async def snapshot(conn: AsyncConnection[Any], seeded: SeededRep, tenant: str = TENANT) -> dict[str, Any]:
    """Everything stored about one seeded rep: rows per mapped table (matched by any of the
    rep's own columns), checkpoints per thread through the saver's API, store items, audit rows."""
    saver = AsyncPostgresSaver(conn=conn)
    store = AsyncPostgresStore(conn=conn)
    counts: dict[str, Any] = {}
    quoted = ", ".join(f"'{t}'" for t in seeded.threads)
    for layer in load_data_maps():
        for table in layer.tables:
            clauses = []
            for match in table.match:
                if match.kind == "rep":
                    clauses.append(f"{match.rep} = %(rep)s")
                else:
                    clauses.append(f"{match.thread} IN ({quoted})")
            cur = await conn.execute(
                sql.SQL("SELECT count(*) AS n FROM {} WHERE " + " OR ".join(clauses)).format(
                    sql.Identifier(table.table)
                ),
                {"rep": seeded.rep},
            )
            row = await cur.fetchone()
            counts[table.table] = row["n"] if isinstance(row, dict) else row[0]  # type: ignore[index]
    for thread_id in seeded.threads:
        for graph_thread in (thread_id, threads.side_thread_id(thread_id)):
            listed = [c async for c in saver.alist({"configurable": {"thread_id": graph_thread}})]
            counts[f"checkpoints:{graph_thread}"] = len(listed)
    counts["store"] = [
        (tuple(i.namespace), i.key, i.value) for i in await store.asearch((tenant, seeded.rep), limit=100)
    ]
    cur = await conn.execute("SELECT count(*) AS n FROM audit_log WHERE rep_aad_id = %s", (seeded.rep,))
    row = await cur.fetchone()
    counts["audit_log"] = row["n"] if isinstance(row, dict) else row[0]  # type: ignore[index]
    return counts
