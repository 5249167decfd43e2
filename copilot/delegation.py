"""Approval delegation: a rep lets a named colleague decide their proposals for a while.

A delegation is one row of ``approval_delegations`` (migration ``delegation``): owner,
delegate, tenant, window, revoked or not. It grants exactly one thing: deciding (approve
or reject) the owner's pending CRM proposals, checked where every decision is checked
(:func:`copilot.persistence.threads.authorize` with ``purpose="decide"``). It never opens
the owner's conversation for questions, and it never lends the owner's token: the write
runs under the delegate's own delegated token, so the CRM records the delegate as the one
who changed the record and refuses what the delegate may not change (see
``docs/ARCHITECTURE.md``, "Approval delegation").

Both people are in the same tenant, always: a grant across tenants is refused here, and the
decision check compares tenants again. Pure SQL on a connection; no CRM, no tokens.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from copilot.errors import InvalidInput
from copilot.identity import RepIdentity

MAX_DELEGATION_DAYS = 90
"""The longest window one grant may cover (a vacation, a leave); longer needs a new grant."""

_LIVE = "revoked_at IS NULL AND starts_at <= %(now)s AND ends_at > %(now)s"
"""A grant live at the moment ``%(now)s`` (the service's clock, never the database's)."""

_ONE_GRANT_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 20261204))"
"""Serialises the grants of one owner to one delegate until the transaction ends: two grants
approved at the same moment (two conversations, two instances) would otherwise each find no
live grant to replace, and both stay live."""


@dataclass(frozen=True)
class Delegation:
    """One live or past grant: ``delegate_aad_id`` may decide ``owner_aad_id``'s proposals."""

    id: int
    tenant_id: str
    owner_aad_id: str
    owner_name: str
    delegate_aad_id: str
    delegate_name: str
    starts_at: dt.datetime
    ends_at: dt.datetime


@dataclass(frozen=True)
class Colleague:
    """The person a rep names as their delegate, as the directory answered for them."""

    tenant_id: str
    aad_object_id: str
    name: str


def end_of_day(day: dt.date) -> dt.datetime:
    """A window that runs "until" ``day`` ends at the end of that day (UTC)."""
    return dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), dt.UTC)


async def grant(
    conn: AsyncConnection[Any],
    owner: RepIdentity,
    delegate: Colleague,
    *,
    until: dt.datetime,
    now: dt.datetime,
) -> Delegation:
    """Let ``delegate`` decide ``owner``'s proposals from ``now`` (the service's clock) until ``until``.

    Refused (:class:`InvalidInput`, nothing stored) for a delegate in another tenant, the
    owner themself, a window already over, or one longer than ``MAX_DELEGATION_DAYS``. A
    new grant to the same delegate replaces the live one (the newest window counts), also
    when two are granted at once: exactly one stays live.
    """
    if delegate.tenant_id != owner.tenant_id:
        raise InvalidInput("approvals can be delegated only to a colleague in your own organisation")
    if delegate.aad_object_id == owner.aad_object_id:
        raise InvalidInput("you can't delegate your approvals to yourself")
    if until.tzinfo is None:
        raise InvalidInput("the delegation's end needs a time zone")
    if until <= now:
        raise InvalidInput("that date has already passed: name a day from today on")
    if until - now > dt.timedelta(days=MAX_DELEGATION_DAYS + 1):
        raise InvalidInput(f"a delegation can last at most {MAX_DELEGATION_DAYS} days")
    async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            _ONE_GRANT_LOCK_SQL, (f"{owner.tenant_id}:{owner.aad_object_id}:{delegate.aad_object_id}",)
        )
        await cur.execute(
            f"UPDATE approval_delegations SET revoked_at = %(now)s"
            f" WHERE tenant_id = %(tenant)s AND owner_aad_id = %(owner)s AND delegate_aad_id = %(delegate)s"
            f" AND {_LIVE}",
            {
                "now": now,
                "tenant": owner.tenant_id,
                "owner": owner.aad_object_id,
                "delegate": delegate.aad_object_id,
            },
        )
        await cur.execute(
            """
            INSERT INTO approval_delegations
                (tenant_id, owner_aad_id, owner_name, delegate_aad_id, delegate_name, starts_at, ends_at)
            VALUES (%s, %s, %s, %s, %s, %s, %s)
            RETURNING id, tenant_id, owner_aad_id, owner_name, delegate_aad_id, delegate_name, starts_at, ends_at
            """,
            (
                owner.tenant_id,
                owner.aad_object_id,
                owner.name,
                delegate.aad_object_id,
                delegate.name,
                now,
                until,
            ),
        )
        row = await cur.fetchone()
    assert row is not None
    return Delegation(**row)


async def revoke(
    conn: AsyncConnection[Any], owner: RepIdentity, delegation_id: int | None = None, *, now: dt.datetime
) -> int:
    """End the owner's delegations live at ``now`` (one, by id, or all); returns how many ended.

    Only the owner's own grants are touched: an id of someone else's ends nothing.
    """
    cur = await conn.execute(
        f"UPDATE approval_delegations SET revoked_at = %(now)s"
        f" WHERE tenant_id = %(tenant)s AND owner_aad_id = %(owner)s AND {_LIVE}"
        " AND (%(id)s::bigint IS NULL OR id = %(id)s)",
        {"now": now, "tenant": owner.tenant_id, "owner": owner.aad_object_id, "id": delegation_id},
    )
    return cur.rowcount


async def granted_by(conn: AsyncConnection[Any], owner: RepIdentity, *, now: dt.datetime) -> list[Delegation]:
    """The owner's delegations live at ``now``, ending soonest first."""
    return await _select(conn, "owner_aad_id", owner, now)


async def held_by(conn: AsyncConnection[Any], delegate: RepIdentity, *, now: dt.datetime) -> list[Delegation]:
    """The delegations live at ``now`` that a rep holds for others (whose proposals they may decide)."""
    return await _select(conn, "delegate_aad_id", delegate, now)


async def _select(
    conn: AsyncConnection[Any], column: str, who: RepIdentity, now: dt.datetime
) -> list[Delegation]:
    assert column in ("owner_aad_id", "delegate_aad_id")
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT id, tenant_id, owner_aad_id, owner_name, delegate_aad_id, delegate_name, starts_at, ends_at"
            f" FROM approval_delegations WHERE tenant_id = %(tenant)s AND {column} = %(who)s AND {_LIVE}"
            " ORDER BY ends_at, id",
            {"now": now, "tenant": who.tenant_id, "who": who.aad_object_id},
        )
        return [Delegation(**row) for row in await cur.fetchall()]
