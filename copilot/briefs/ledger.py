"""The suggestion ledger: which suggestions a rep was made, declined and accepted, per record version.

A brief or the digest offers its suggestions through :func:`offer`: those the rep declined at
the record's version as read now are held back, the rest are recorded as made. "The record
changes" means its CRM version differs from the declined one: then the suggestion may be made
again (a new row, at the new version).

A rep declines a suggestion with its card's "Not now" button (:func:`record_decision`), or by
rejecting the approval card of the proposal its other button led to; approving or editing that
proposal accepts it (:func:`settle_proposal`, called by the runner when a decision is applied).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from pydantic import BaseModel, ConfigDict

from copilot.briefs.types import (
    SUGGESTED_CHANGES,
    SUGGESTION_KINDS,
    Suggestion,
    SuggestionDecision,
    SuggestionKind,
    SuggestionState,
)
from copilot.identity import RepIdentity

Key = tuple[SuggestionKind, str, int]
"""A suggestion in the ledger: its kind, its record id, the record version it was made at."""


class LedgerEntry(BaseModel):
    """One row of the ledger."""

    model_config = ConfigDict(frozen=True)

    kind: SuggestionKind
    record_id: str
    record_version: int
    state: SuggestionState
    made_at: datetime
    decided_at: datetime | None


def key(suggestion: Suggestion) -> Key:
    """The ledger key of a suggestion."""
    return (suggestion.kind, suggestion.record_id, suggestion.record_version)


async def held_back(
    conn: AsyncConnection[Any], identity: RepIdentity, suggestions: Sequence[Suggestion]
) -> frozenset[Key]:
    """Of ``suggestions``, those the rep declined at the very record version they carry."""
    if not suggestions:
        return frozenset()
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            """
            SELECT kind, record_id, record_version FROM suggestion_ledger
             WHERE tenant_id = %s AND rep_aad_id = %s AND state = 'declined'
               AND record_id = ANY(%s)
            """,
            (identity.tenant_id, identity.aad_object_id, sorted({s.record_id for s in suggestions})),
        )
        declined = {(r["kind"], r["record_id"], r["record_version"]) for r in await cur.fetchall()}
    return frozenset(k for k in map(key, suggestions) if k in declined)


async def record_made(
    conn: AsyncConnection[Any], identity: RepIdentity, suggestions: Sequence[Suggestion]
) -> None:
    """Record suggestions as made to the rep (one already in the ledger at its version stays as it is)."""
    for suggestion in suggestions:
        await conn.execute(
            """
            INSERT INTO suggestion_ledger (tenant_id, rep_aad_id, kind, record_id, record_version)
            VALUES (%s, %s, %s, %s, %s)
            ON CONFLICT ON CONSTRAINT suggestion_once_per_version DO NOTHING
            """,
            (identity.tenant_id, identity.aad_object_id, *key(suggestion)),
        )


async def offer(
    conn: AsyncConnection[Any], identity: RepIdentity, suggestions: Sequence[Suggestion]
) -> tuple[Suggestion, ...]:
    """The suggestions to make now: ``suggestions`` less the held-back ones, recorded as made."""
    held = await held_back(conn, identity, suggestions)
    shown = tuple(s for s in suggestions if key(s) not in held)
    await record_made(conn, identity, shown)
    return shown


async def record_decision(
    conn: AsyncConnection[Any],
    identity: RepIdentity,
    *,
    kind: SuggestionKind,
    record_id: str,
    record_version: int,
    decision: SuggestionDecision,
) -> None:
    """The rep declined or accepted a suggestion made at ``record_version`` (the latest decision stands)."""
    await conn.execute(
        """
        INSERT INTO suggestion_ledger
               (tenant_id, rep_aad_id, kind, record_id, record_version, state, decided_at)
        VALUES (%s, %s, %s, %s, %s, %s, now())
        ON CONFLICT ON CONSTRAINT suggestion_once_per_version
        DO UPDATE SET state = EXCLUDED.state, decided_at = EXCLUDED.decided_at
        """,
        (identity.tenant_id, identity.aad_object_id, kind, record_id, record_version, decision),
    )


def kinds_changed_by(tool: str, args: Mapping[str, Any]) -> tuple[tuple[SuggestionKind, str], ...]:
    """(kind, record id) of each suggestion kind a proposal of ``tool`` with ``args`` acts on:
    its kind's tool, naming a record, and touching the kind's field (pure)."""
    found: list[tuple[SuggestionKind, str]] = []
    for kind in SUGGESTION_KINDS:
        change = SUGGESTED_CHANGES[kind]
        record_id = args.get(change.record_arg)
        if tool == change.tool and change.field in args and isinstance(record_id, str) and record_id:
            found.append((kind, record_id))
    return tuple(found)


async def settle_proposal(
    conn: AsyncConnection[Any],
    identity: RepIdentity,
    *,
    tool: str,
    args: Mapping[str, Any],
    decision: SuggestionDecision,
) -> int:
    """A proposal was decided: mark the rep's open (made, undecided) suggestions it acts on
    declined (rejected) or accepted (approved or edited). Returns how many were marked."""
    marked = 0
    for kind, record_id in kinds_changed_by(tool, args):
        cur = await conn.execute(
            """
            UPDATE suggestion_ledger SET state = %s, decided_at = now()
             WHERE tenant_id = %s AND rep_aad_id = %s AND kind = %s AND record_id = %s
               AND state = 'made'
            """,
            (decision, identity.tenant_id, identity.aad_object_id, kind, record_id),
        )
        marked += cur.rowcount
    return marked


async def entries(
    conn: AsyncConnection[Any], identity: RepIdentity, record_id: str | None = None
) -> list[LedgerEntry]:
    """The rep's ledger (or one record's), oldest first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            """
            SELECT kind, record_id, record_version, state, made_at, decided_at FROM suggestion_ledger
             WHERE tenant_id = %s AND rep_aad_id = %s AND (%s::text IS NULL OR record_id = %s)
             ORDER BY id
            """,
            (identity.tenant_id, identity.aad_object_id, record_id, record_id),
        )
        return [LedgerEntry.model_validate(r) for r in await cur.fetchall()]
