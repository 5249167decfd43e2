"""Threads belong to someone: only the owner (same tenant) or an explicit delegate gets in."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from copilot.errors import ThreadAccessDenied, ThreadNotFound
from copilot.persistence import threads
from copilot.persistence.checkpoint import setup_langgraph
from copilot.persistence.migrations import migrate
from copilot.persistence.pool import open_pool
from copilot.settings import Settings
from tests.support.moments import WEDNESDAY_AFTERNOON as NOW

pytestmark = pytest.mark.integration

TENANT = "tenant-contoso"
OTHER_TENANT = "tenant-fabrikam"
ALEX = "aad-alex"
BLAKE = "aad-blake"


@pytest.fixture
async def app_conn(
    database_url: str, db_conn: psycopg.AsyncConnection[Any]
) -> AsyncIterator[psycopg.AsyncConnection[DictRow]]:
    """A connection as the app role (so the tests also prove its grants suffice)."""
    await migrate(db_conn)
    pool: AsyncConnectionPool[psycopg.AsyncConnection[DictRow]] = await open_pool(
        database_url, Settings(COPILOT_DB_POOL_MIN=1, COPILOT_DB_POOL_MAX=2)
    )
    try:
        async with pool.connection() as conn:
            yield conn
    finally:
        await pool.close()


async def test_the_owner_is_authorised(app_conn):
    thread_id = await threads.create_thread(app_conn, tenant_id=TENANT, owner_aad_id=ALEX)
    await threads.authorize(app_conn, thread_id=thread_id, tenant_id=TENANT, aad_id=ALEX, now=NOW)


async def test_another_rep_is_denied_without_learning_who_owns_the_thread(app_conn):
    thread_id = await threads.create_thread(app_conn, tenant_id=TENANT, owner_aad_id=ALEX)

    with pytest.raises(ThreadAccessDenied) as denied:
        await threads.authorize(app_conn, thread_id=thread_id, tenant_id=TENANT, aad_id=BLAKE, now=NOW)

    assert "do not have access" in str(denied.value)
    assert ALEX not in str(denied.value)
    assert TENANT not in str(denied.value)


async def test_the_same_aad_id_in_another_tenant_is_denied(app_conn):
    thread_id = await threads.create_thread(app_conn, tenant_id=TENANT, owner_aad_id=ALEX)
    with pytest.raises(ThreadAccessDenied):
        await threads.authorize(app_conn, thread_id=thread_id, tenant_id=OTHER_TENANT, aad_id=ALEX, now=NOW)


async def test_an_unknown_thread_is_not_found(app_conn):
    with pytest.raises(ThreadNotFound, match="does not exist"):
        await threads.authorize(
            app_conn, thread_id=threads.new_thread_id(), tenant_id=TENANT, aad_id=ALEX, now=NOW
        )


async def test_a_delegation_from_the_owner_grants_access_in_the_owners_tenant_only(app_conn):
    thread_id = await threads.create_thread(app_conn, tenant_id=TENANT, owner_aad_id=ALEX)

    await threads.grant_delegation(
        app_conn, thread_id=thread_id, owner_tenant_id=TENANT, owner_aad_id=ALEX, delegate_aad_id=BLAKE
    )
    await threads.grant_delegation(  # granting twice is harmless
        app_conn, thread_id=thread_id, owner_tenant_id=TENANT, owner_aad_id=ALEX, delegate_aad_id=BLAKE
    )

    await threads.authorize(app_conn, thread_id=thread_id, tenant_id=TENANT, aad_id=BLAKE, now=NOW)
    with pytest.raises(ThreadAccessDenied):
        await threads.authorize(app_conn, thread_id=thread_id, tenant_id=OTHER_TENANT, aad_id=BLAKE, now=NOW)


async def test_only_the_owner_can_delegate(app_conn):
    thread_id = await threads.create_thread(app_conn, tenant_id=TENANT, owner_aad_id=ALEX)
    await threads.grant_delegation(
        app_conn, thread_id=thread_id, owner_tenant_id=TENANT, owner_aad_id=ALEX, delegate_aad_id=BLAKE
    )

    with pytest.raises(ThreadAccessDenied, match="only the person who started"):
        await threads.grant_delegation(
            app_conn,
            thread_id=thread_id,
            owner_tenant_id=TENANT,
            owner_aad_id=BLAKE,
            delegate_aad_id="aad-casey",
        )
    with pytest.raises(ThreadAccessDenied):
        await threads.grant_delegation(
            app_conn,
            thread_id=thread_id,
            owner_tenant_id=OTHER_TENANT,
            owner_aad_id=ALEX,
            delegate_aad_id=BLAKE,
        )
    with pytest.raises(ThreadNotFound):
        await threads.grant_delegation(
            app_conn,
            thread_id=threads.new_thread_id(),
            owner_tenant_id=TENANT,
            owner_aad_id=ALEX,
            delegate_aad_id=BLAKE,
        )
    with pytest.raises(ThreadAccessDenied):
        await threads.authorize(app_conn, thread_id=thread_id, tenant_id=TENANT, aad_id="aad-casey", now=NOW)


def test_thread_ids_are_random_and_long():
    ids = {threads.new_thread_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) >= 32 and i.replace("-", "").replace("_", "").isalnum() for i in ids)


async def test_a_short_guessable_thread_id_is_refused(app_conn):
    with pytest.raises(psycopg.errors.CheckViolation):
        await threads.create_thread(app_conn, tenant_id=TENANT, owner_aad_id=ALEX, thread_id="thread-1")


async def test_creating_a_thread_with_an_existing_id_does_not_take_it_over(app_conn):
    thread_id = await threads.create_thread(app_conn, tenant_id=TENANT, owner_aad_id=ALEX)
    with pytest.raises(ThreadAccessDenied):
        await threads.create_thread(app_conn, tenant_id=TENANT, owner_aad_id=BLAKE, thread_id=thread_id)
    await threads.authorize(app_conn, thread_id=thread_id, tenant_id=TENANT, aad_id=ALEX, now=NOW)


async def test_list_threads_shows_owned_and_delegated_threads_most_recent_first(app_conn):
    own_old = await threads.create_thread(app_conn, tenant_id=TENANT, owner_aad_id=BLAKE)
    shared = await threads.create_thread(app_conn, tenant_id=TENANT, owner_aad_id=ALEX)
    await threads.create_thread(app_conn, tenant_id=TENANT, owner_aad_id=ALEX)  # not shared
    await threads.create_thread(app_conn, tenant_id=OTHER_TENANT, owner_aad_id=BLAKE)  # other tenant
    await threads.grant_delegation(
        app_conn, thread_id=shared, owner_tenant_id=TENANT, owner_aad_id=ALEX, delegate_aad_id=BLAKE
    )
    await app_conn.execute(
        "UPDATE threads SET last_active_at = now() - interval '1 hour' WHERE thread_id = %s", (own_old,)
    )

    listed = await threads.list_threads(app_conn, tenant_id=TENANT, aad_id=BLAKE)

    assert [(t.thread_id, t.delegated) for t in listed] == [(shared, True), (own_old, False)]
    assert len(await threads.list_threads(app_conn, tenant_id=TENANT, aad_id=BLAKE, limit=1)) == 1


async def test_touch_moves_last_activity_forward(app_conn):
    thread_id = await threads.create_thread(app_conn, tenant_id=TENANT, owner_aad_id=ALEX)
    await app_conn.execute(
        "UPDATE threads SET last_active_at = now() - interval '2 days' WHERE thread_id = %s", (thread_id,)
    )

    await threads.touch(app_conn, thread_id)

    [info] = await threads.list_threads(app_conn, tenant_id=TENANT, aad_id=ALEX)
    assert info.last_active_at > info.created_at - timedelta(seconds=1)
    with pytest.raises(ThreadNotFound):
        await threads.touch(app_conn, threads.new_thread_id())


async def test_expiry_removes_idle_threads_with_their_delegations_and_checkpoints(database_url, db_conn):
    await migrate(db_conn)
    await setup_langgraph(database_url)
    old = await threads.create_thread(db_conn, tenant_id=TENANT, owner_aad_id=ALEX)
    fresh = await threads.create_thread(db_conn, tenant_id=TENANT, owner_aad_id=ALEX)
    await threads.grant_delegation(
        db_conn, thread_id=old, owner_tenant_id=TENANT, owner_aad_id=ALEX, delegate_aad_id=BLAKE
    )
    await db_conn.execute(
        "UPDATE threads SET last_active_at = now() - interval '40 days' WHERE thread_id = %s", (old,)
    )
    for thread_id in (old, fresh):
        await db_conn.execute(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata)"
            " VALUES (%s, '', 'c1', '{}', '{}')",
            (thread_id,),
        )

    expired = await threads.expire_threads(db_conn, older_than=timedelta(days=30))

    assert expired == [old]
    with pytest.raises(ThreadNotFound):
        await threads.authorize(db_conn, thread_id=old, tenant_id=TENANT, aad_id=ALEX, now=NOW)
    await threads.authorize(db_conn, thread_id=fresh, tenant_id=TENANT, aad_id=ALEX, now=NOW)
    cur = await db_conn.execute("SELECT thread_id FROM checkpoints")
    assert [r["thread_id"] for r in await cur.fetchall()] == [fresh]
    cur = await db_conn.execute("SELECT count(*) AS n FROM thread_delegations")
    row = await cur.fetchone()
    assert row is not None
    assert row["n"] == 0
    assert await threads.expire_threads(db_conn, older_than=timedelta(days=30)) == []
