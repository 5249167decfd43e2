"""Exactly-once writes that survive a crash at any point (invariant 3).

A write's key is ``f"{thread_id}:{tool_call_id}"``. Its row in ``idempotency_keys``
moves through three durable states:

``pending``
    claimed, nothing sent yet (a crash here leaves nothing to finish);
``in_flight``
    committed *before* the backend (CRM, mailbox, store) is called, with the plan the
    write was approved under (e.g. the record version it checked). A crash, a kill or a
    lost connection after this point leaves the row here, as evidence that the backend
    may have applied the write;
``done``
    the result (and, for an applied write, its audit row) committed together.

:func:`claim` serialises every claimer of one key on a transaction-scoped advisory
lock held on a connection of its own (so the lock dies with a crashed process, and it
works behind PgBouncer in transaction mode). Inside the block the holder sees either
the stored result (return it; never execute again), an in-flight plan from an earlier
attempt (recover: ask the backend by key *before* any version check, then complete),
or neither (execute: :meth:`Claim.begin`, call the backend, :meth:`Claim.complete`).

The same key with different arguments raises :class:`IdempotencyMismatch`: it is never
a second write. The backend receives the key as its external id / idempotency key, so
recovering a write it already applied returns that write instead of repeating it.

Usage::

    async with claim(pool, key=..., ..., args_hash=args_hash(args)) as c:
        if c.stored_result is not None:
            return c.stored_result
        plan = c.in_flight_plan or await make_plan()   # recovery skips the version check
        if c.in_flight_plan is None:
            await c.begin(plan)                        # durable before the backend call
        result = await backend_write(..., key=c.key)
        return await c.complete(result, audit_entry)   # audit row + 'done', one transaction
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from copilot.errors import IdempotencyMismatch
from copilot.persistence import audit

_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 20261201))"
_INSERT_SQL = """
INSERT INTO idempotency_keys
    (key, tenant_id, rep_aad_id, thread_id, tool_call_id, tool, args_hash, status)
VALUES (%s, %s, %s, %s, %s, %s, %s, 'pending')
ON CONFLICT (key) DO NOTHING
"""
_SELECT_SQL = "SELECT tool, args_hash, status, result, plan FROM idempotency_keys WHERE key = %s"
_BEGIN_SQL = """
UPDATE idempotency_keys
   SET status = 'in_flight', plan = %s, attempts = attempts + 1, updated_at = now()
 WHERE key = %s AND status = 'pending'
"""
_RETRY_SQL = "UPDATE idempotency_keys SET attempts = attempts + 1, updated_at = now() WHERE key = %s"
_FORGET_SQL = "DELETE FROM idempotency_keys WHERE key = %s AND status = 'pending'"
_DONE_SQL = """
UPDATE idempotency_keys SET status = 'done', result = %s, updated_at = now()
 WHERE key = %s AND status <> 'done'
"""


def idempotency_key(thread_id: str, tool_call_id: str) -> str:
    """The key of one proposed write: its thread and the model's tool-call id."""
    return f"{thread_id}:{tool_call_id}"


def args_hash(args: dict[str, Any]) -> str:
    """SHA-256 of the arguments' canonical JSON (sorted keys, no whitespace)."""
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass
class Claim:
    """The caller's hold on one idempotency key, valid inside the ``claim`` block."""

    key: str
    conn: AsyncConnection[Any]
    """An autocommit connection of the claim's own (not the lock's)."""
    stored_result: dict[str, Any] | None
    """The result of an earlier execution: when set, return it and do not execute."""
    in_flight_plan: dict[str, Any] | None
    """The plan of an earlier attempt that may have reached the backend: recover with it."""
    _begun: bool = field(default=False, repr=False)
    _completed: bool = field(default=False, repr=False)

    @property
    def completed(self) -> bool:
        """Whether :meth:`complete` ran in this block."""
        return self._completed

    @property
    def recovering(self) -> bool:
        """Whether an earlier attempt got as far as the backend call (crash, kill, outage)."""
        return self.in_flight_plan is not None

    async def begin(self, plan: dict[str, Any]) -> None:
        """Commit the ``in_flight`` state and the plan, before the backend is called."""
        if self.stored_result is not None or self._completed:
            raise RuntimeError(f"idempotency key {self.key} is already done")
        if self.in_flight_plan is not None:
            await self.conn.execute(_RETRY_SQL, (self.key,))
        else:
            cur = await self.conn.execute(_BEGIN_SQL, (Jsonb(plan), self.key))
            if cur.rowcount != 1:
                raise RuntimeError(f"idempotency key {self.key} changed state while claimed")
            self.in_flight_plan = plan
        self._begun = True

    async def complete(
        self, result: dict[str, Any], audit_entry: audit.AuditEntry | None = None
    ) -> dict[str, Any]:
        """Store the write's final result, with its audit row when the write was applied.

        Both commit in one transaction, so an applied write is never ``done`` without its
        audit row. Returns the stored result (with ``audit_id`` when audited).
        """
        if self.stored_result is not None:
            raise RuntimeError(f"idempotency key {self.key} was already completed; return stored_result")
        if self._completed:
            raise RuntimeError(f"idempotency key {self.key} completed twice")
        stored = dict(result)
        async with self.conn.transaction():
            if audit_entry is not None:
                stored["audit_id"] = await audit.append(self.conn, audit_entry)
            cur = await self.conn.execute(_DONE_SQL, (Jsonb(stored), self.key))
            if cur.rowcount != 1:
                raise RuntimeError(f"idempotency key {self.key} was completed by someone else")
        self._completed = True
        if audit_entry is not None:
            # Anchored once committed, so removing the newest row is detected (audit.py).
            await audit.anchor_committed(self.conn)
        return stored


@asynccontextmanager
async def claim(
    pool: AsyncConnectionPool[Any],
    *,
    key: str,
    tenant_id: str,
    rep_aad_id: str,
    thread_id: str,
    tool_call_id: str,
    tool: str,
    args_hash: str,
) -> AsyncIterator[Claim]:
    """Hold ``key`` exclusively for the block; see the module docstring.

    Uses two connections of ``pool``: one holds the key's lock in an open transaction
    for the whole block, the other (autocommit) records the key's states, so each state
    is durable the moment it is reached. Concurrent claimers of the same key wait until
    the holder's block ends (or its process dies). Raises :class:`IdempotencyMismatch`
    when the key was claimed for a different tool or different arguments.
    """
    if key != idempotency_key(thread_id, tool_call_id):
        raise ValueError(f"idempotency key {key!r} is not thread_id:tool_call_id")
    async with pool.connection() as lock_conn, lock_conn.transaction():
        await lock_conn.execute(_LOCK_SQL, (key,))
        async with pool.connection() as conn:
            await conn.execute(
                _INSERT_SQL, (key, tenant_id, rep_aad_id, thread_id, tool_call_id, tool, args_hash)
            )
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(_SELECT_SQL, (key,))
                row = await cur.fetchone()
            if row is None:  # only if someone deleted the row between our two statements
                raise RuntimeError(f"idempotency key {key} vanished while being claimed")
            if row["tool"] != tool or row["args_hash"] != args_hash:
                raise IdempotencyMismatch(
                    "this approval was already used for a write with different arguments; "
                    "nothing was changed — ask for a fresh proposal instead",
                    key=key,
                    tool=tool,
                )
            stored = row["result"] if row["status"] == "done" else None
            in_flight = dict(row["plan"] or {}) if row["status"] == "in_flight" else None
            handle = Claim(key=key, conn=conn, stored_result=stored, in_flight_plan=in_flight)
            try:
                yield handle
            finally:
                if stored is None and in_flight is None and not handle._begun and not handle.completed:
                    # Nothing was sent (refused early, or failed before the backend call):
                    # leave no 'pending' row behind, so the next claimer starts afresh.
                    await conn.execute(_FORGET_SQL, (key,))


async def unfinished(conn: AsyncConnection[Any], thread_id: str) -> list[dict[str, Any]]:
    """The thread's writes left ``in_flight`` (a crash or outage after the backend call)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT key, tool_call_id, tool, attempts, updated_at FROM idempotency_keys"
            " WHERE thread_id = %s AND status = 'in_flight' ORDER BY created_at",
            (thread_id,),
        )
        return list(await cur.fetchall())


async def stored_result(conn: AsyncConnection[Any], key: str) -> dict[str, Any] | None:
    """The stored result of a completed write, or None if it is not done."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute("SELECT result FROM idempotency_keys WHERE key = %s AND status = 'done'", (key,))
        row = await cur.fetchone()
    return None if row is None else dict(row["result"])
