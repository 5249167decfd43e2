"""Exactly-once CRM writes (invariant 3).

A write's key is ``f"{thread_id}:{tool_call_id}"``. :func:`claim` takes the key's row
lock in a transaction of its own, so every claimer of one key runs one after the
other: the first executes the write and stores its result, every later one (resume
twice, retry, double click) gets that stored result and must not execute again.

The same key with different arguments raises :class:`IdempotencyMismatch`: it is
never a second write. If the write fails (the body raises) the transaction rolls back
and nothing is stored, so a retry may execute again; the CRM receives the same key as
its external id, so a crash between the CRM's commit and ours cannot duplicate it.

Usage::

    async with claim(pool, key=..., ..., args_hash=args_hash(args)) as c:
        if c.stored_result is not None:
            return c.stored_result
        result = await crm_write(..., external_id=c.key)
        await audit.append(c.conn, entry)   # optional: same transaction as the key
        await c.complete(result)
    return result
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncConnection, Rollback
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from copilot.errors import IdempotencyMismatch


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
    """The claim's connection, inside its transaction: writes made on it (the audit row)
    commit or roll back together with the key."""
    stored_result: dict[str, Any] | None
    """The result of an earlier execution: when set, return it and do not execute."""
    _completed: bool = field(default=False, repr=False)

    @property
    def completed(self) -> bool:
        """Whether :meth:`complete` ran in this block."""
        return self._completed

    async def complete(self, result: dict[str, Any]) -> None:
        """Store the write's result; committed when the ``claim`` block exits without error."""
        if self.stored_result is not None:
            raise RuntimeError(f"idempotency key {self.key} was already completed; return stored_result")
        if self._completed:
            raise RuntimeError(f"idempotency key {self.key} completed twice")
        await self.conn.execute(
            "UPDATE idempotency_keys SET status = 'done', result = %s, updated_at = now() WHERE key = %s",
            (Jsonb(result), self.key),
        )
        self._completed = True


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

    Uses a connection of its own from ``pool`` (autocommit connections are fine: the
    block runs in an explicit transaction). Concurrent claimers of the same key wait
    until the holder's transaction ends. Raises :class:`IdempotencyMismatch` when the
    key was claimed for a different tool or different arguments.
    """
    if key != idempotency_key(thread_id, tool_call_id):
        raise ValueError(f"idempotency key {key!r} is not thread_id:tool_call_id")
    async with pool.connection() as conn, conn.transaction() as tx:
        # Inserting first (not SELECT-then-INSERT) makes the row exist for the lock below
        # even on the first claim; a concurrent inserter of the same key waits on ours.
        await conn.execute(
            """
            INSERT INTO idempotency_keys
                (key, tenant_id, rep_aad_id, thread_id, tool_call_id, tool, args_hash, status)
            VALUES (%s, %s, %s, %s, %s, %s, %s, 'pending')
            ON CONFLICT (key) DO NOTHING
            """,
            (key, tenant_id, rep_aad_id, thread_id, tool_call_id, tool, args_hash),
        )
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT tool, args_hash, status, result FROM idempotency_keys WHERE key = %s FOR UPDATE",
                (key,),
            )
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
        handle = Claim(key=key, conn=conn, stored_result=stored)
        yield handle
        if stored is None and not handle.completed:
            # The body neither executed nor failed loudly: leave no 'pending' row behind,
            # so the next claimer executes.
            raise Rollback(tx)
