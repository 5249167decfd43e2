"""The copilot's threads for one process: who may use one, one run at a time on each, and their
rotation (``copilot/rotation.py``).

Every thread is authorised before the checkpointer restores anything of it (invariant 7), a
question's or a decision's run holds the thread's run lock, and a long Teams conversation moves
to a successor thread when due, its earlier threads compacted to what is still needed.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.types import StateSnapshot
from psycopg import AsyncConnection
from psycopg.errors import DeadlockDetected, LockNotAvailable, SerializationFailure
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from copilot.clock import Clock
from copilot.errors import ThreadBusy
from copilot.identity import RepIdentity
from copilot.persistence import threads
from copilot.rotation import handoff, rotation_due
from copilot.settings import Settings
from copilot.turn_state import proposals_of
from copilot.writes import REGISTRY

logger = logging.getLogger(__name__)

_ONE_RUN_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 20261203))"
THREAD_BUSY_SECONDS = 60.0
"""How long a run waits for the thread's previous run before it is told the thread is busy."""

Pool = AsyncConnectionPool[AsyncConnection[DictRow]]
StateOf = Callable[[str], Awaitable[StateSnapshot]]
"""A thread's latest state, read without running anything."""


def thread_config(thread_id: str) -> dict[str, Any]:
    """The checkpointer's config of a thread."""
    return {"configurable": {"thread_id": thread_id}}


class ThreadKeeper:
    """Authorisation, run locks and rotation of the copilot's threads.

    ``clock`` is read at each use (a test moves the service's clock), ``state_of`` reads a
    thread's state (the service's compiled graph).
    """

    def __init__(
        self,
        settings: Settings,
        pool: Pool,
        lock_pool: Pool,
        saver: AsyncPostgresSaver,
        clock: Callable[[], Clock],
        state_of: StateOf,
    ):
        self.settings = settings
        self.pool = pool
        self.lock_pool = lock_pool
        self.saver = saver
        self._clock = clock
        self._state_of = state_of

    def now(self) -> datetime:
        """The service's "now"."""
        return self._clock()()

    @asynccontextmanager
    async def one_run(self, thread_id: str) -> AsyncIterator[None]:
        """One run (question or decision round) on a thread at a time, across processes.

        Two runs restoring the same checkpoint would fork it: an approve and a reject of
        one proposal could both take effect, and a question could get another's answer.
        A transaction-scoped advisory lock, on a connection of the lock pool (so waiting
        runs never starve the pool that the running one needs), makes the next run wait;
        it is released with the block, or with the process if that dies. A run that waits
        longer than ``THREAD_BUSY_SECONDS`` is told the thread is busy.
        """
        async with self.lock_pool.connection() as conn, conn.transaction():
            await conn.execute(f"SET LOCAL lock_timeout = '{int(THREAD_BUSY_SECONDS * 1000)}ms'")
            try:
                await conn.execute(_ONE_RUN_LOCK_SQL, (thread_id,))
            except LockNotAvailable as exc:
                raise ThreadBusy(
                    "I'm still working on your previous message in this conversation; "
                    "please try again in a moment."
                ) from exc
            yield

    async def own(self, identity: RepIdentity, thread_id: str | None) -> str:
        """The rep's thread for a question (a new one for None), authorised and touched."""
        async with self.pool.connection() as conn:
            if thread_id is None:
                return await self._new_thread(conn, identity, self.now())
            # Invariant 7: ownership is checked before the checkpointer restores anything.
            await self._authorize(conn, identity, thread_id)
            await threads.touch(conn, thread_id, self.now())
            return thread_id

    async def may_decide(
        self, identity: RepIdentity, thread_id: str, *, touch: bool = True
    ) -> RepIdentity | None:
        """Authorise deciding the thread's proposals (before any state is restored): the
        owner when the caller decides them through an approval delegation, else None.
        ``touch=False``: a read that is no activity (the digest must not keep idle threads alive)."""
        async with self.pool.connection() as conn:
            owner = await threads.authorize(
                conn,
                thread_id=thread_id,
                tenant_id=identity.tenant_id,
                now=self.now(),
                aad_id=identity.aad_object_id,
                purpose="decide",
            )
            if touch:
                await threads.touch(conn, thread_id, self.now())
        return None if owner is None else RepIdentity(tenant_id=identity.tenant_id, aad_object_id=owner)

    async def side_thread(self, identity: RepIdentity) -> str:
        """A new thread of the rep's for a question asked while another waits (a thread row
        first, so retention finds its checkpoints even if the run is cut short)."""
        async with self.pool.connection() as conn:
            return await self._new_thread(conn, identity, self.now())

    async def drop(self, thread_id: str) -> None:
        """A thread and its checkpoints, gone (a side question that proposed nothing)."""
        await self.saver.adelete_thread(thread_id)
        async with self.pool.connection() as conn:
            await threads.delete_thread(conn, thread_id)

    async def answered(self, thread_id: str, message_id: str) -> bool:
        """Whether the message was already taken on this thread (a queue redelivery)."""
        async with self.pool.connection() as conn:
            return await threads.was_answered(conn, thread_id, message_id)

    async def mark_answered(self, thread_id: str, message_id: str) -> None:
        """Remember the message as taken on this thread."""
        async with self.pool.connection() as conn:
            await threads.mark_answered(conn, thread_id, message_id)

    # --- rotation (copilot/rotation.py) -----------------------------------------------------

    async def rotated(self, identity: RepIdentity, thread_id: str | None) -> tuple[str, bool]:
        """The thread this conversation's question runs on, authorised and touched; True if
        it was opened just now as the successor of the conversation's previous thread.

        Only the thread's owner rotates it (a delegate's question runs where it was let in).
        """
        now = self.now()
        async with self.pool.connection() as conn:
            if thread_id is None:
                return await self._new_thread(conn, identity, now), False
            current = await self._newest_authorized(conn, identity, thread_id)
        async with self.one_run(current):
            async with self.pool.connection() as conn:
                # Again under the lock: a question just before this one may have rotated it.
                current = await self._newest_authorized(conn, identity, current)
                last_active = await threads.touch(conn, current, now)
            saved = await self.saver.aget_tuple(cast(RunnableConfig, thread_config(current)))
            values = saved.checkpoint["channel_values"] if saved is not None else {}
            due = rotation_due(
                model_calls=int(values.get("thread_model_call_count", 0)),
                last_active=last_active,
                now=now,
                thread_limit=self.settings.model_call_thread_limit,
                run_limit=self.settings.model_call_run_limit,
                idle=timedelta(hours=self.settings.thread_idle_rotate_hours),
            )
            if due is None or not values.get("messages"):
                return current, False
            async with self.pool.connection() as conn:
                successor = await threads.rotate(
                    conn, current, identity.tenant_id, identity.aad_object_id, now=now
                )
            if successor is None:
                return current, False
            logger.info("thread %s rotated to %s (%s)", current, successor, due)
            return successor, True

    async def handoff(self, thread_id: str) -> list[Any]:
        """What a thread opened by rotation starts with: its predecessor's last read-only
        exchange, verbatim (also after a crash before its first run was saved)."""
        async with self.pool.connection() as conn:
            previous = await threads.predecessor(conn, thread_id)
        if previous is None:
            return []
        values = (await self._state_of(previous)).values or {}
        return handoff(values.get("messages", []), set(REGISTRY))

    async def compact_rotated(self, thread_id: str) -> None:
        """After a rotation: the conversation's earlier threads keep only what is still needed.

        A thread with proposals pending keeps its latest checkpoint (the interrupt its cards
        resume; ``aprune(keep_latest)``), under its run lock so no decision races it; one with
        nothing pending has its checkpoints deleted (``adelete_thread``): its row stays for
        its cards, answers and audit links. So a conversation holds the current thread's
        checkpoints plus one per thread still waiting on a decision, however long it lasts.
        """
        async with self.pool.connection() as conn:
            earlier = await threads.rotated_with_checkpoints(conn, thread_id)
        for old in earlier:
            try:
                async with self.one_run(old):
                    if proposals_of(await self._state_of(old)):
                        await self.saver.aprune([old], strategy="keep_latest")
                        continue
                    await self.saver.adelete_thread(old)
                    async with self.pool.connection() as conn:
                        await threads.mark_checkpoints_cleared(conn, old)
            except (ThreadBusy, SerializationFailure, DeadlockDetected) as exc:
                # A decision running there, or retention's prune at the same moment: the
                # answer is already made, and the next rotation compacts this thread.
                logger.info("thread %s left for the next compaction: %s", old, type(exc).__name__)

    async def _newest_authorized(
        self, conn: AsyncConnection[Any], identity: RepIdentity, thread_id: str
    ) -> str:
        """The newest thread of ``thread_id``'s chain, each checked (invariant 7) before use."""
        await self._authorize(conn, identity, thread_id)
        current = await threads.current_of(conn, thread_id)
        if current != thread_id:
            await self._authorize(conn, identity, current)
        return current

    async def _authorize(self, conn: AsyncConnection[Any], identity: RepIdentity, thread_id: str) -> None:
        """Let ``identity`` converse in ``thread_id`` (its owner or a delegate of the thread,
        invariant 7) at the service's clock; :func:`threads.authorize` raises otherwise."""
        await threads.authorize(
            conn,
            thread_id=thread_id,
            tenant_id=identity.tenant_id,
            aad_id=identity.aad_object_id,
            now=self.now(),
        )

    @staticmethod
    async def _new_thread(conn: AsyncConnection[Any], identity: RepIdentity, now: datetime) -> str:
        return await threads.create_thread(
            conn, tenant_id=identity.tenant_id, owner_aad_id=identity.aad_object_id, now=now
        )
