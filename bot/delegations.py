"""Approval delegation in Teams: the delegations card and its Revoke button.

A rep grants or ends a delegation in their own words, through the agent: the write tools of
``copilot/writes/delegation.py`` look the colleague up in the rep's own directory with the rep's
own Graph token (``copilot.people``) and need the rep's approval. What a delegate may then do is
decided where every decision is checked, not here.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from bot import cards
from bot.conversations import Pool
from bot.rep_tokens import SignedInRep
from bot.replies import Reply
from copilot import delegation


async def show(pool: Pool, rep: SignedInRep, *, locale: str | None, now: dt.datetime) -> Reply:
    """The delegations card: who may decide the rep's proposals, and whose the rep may decide.

    Granting and ending a delegation in the rep's own words are write tools behind the approval
    card (``copilot/writes/delegation.py``); this card's Revoke button stays a click.
    """
    return await _card(pool, rep, locale, None, now)


async def revoke_from_card(
    pool: Pool, rep: SignedInRep, value: dict[str, Any], *, locale: str | None, now: dt.datetime
) -> Reply:
    """A delegation card's Revoke: ends that grant if it is the clicker's own (else nothing)."""
    raw = value.get("delegation_id")
    if not isinstance(raw, int) or isinstance(raw, bool):
        return "That button is not a delegation of yours. Nothing was changed."
    async with pool.connection() as conn:
        ended = await delegation.revoke(conn, rep.identity, raw, now=now)
    return await _card(pool, rep, locale, "Revoked the delegation" if ended else "Nothing to revoke", now)


async def delegated_owners(pool: Pool, rep: SignedInRep, *, now: dt.datetime) -> dict[str, str]:
    """The colleagues whose proposals this rep may decide at ``now``: object id → name."""
    async with pool.connection() as conn:
        return {d.owner_aad_id: d.owner_name for d in await delegation.held_by(conn, rep.identity, now=now)}


async def _card(
    pool: Pool, rep: SignedInRep, locale: str | None, notice: str | None, now: dt.datetime
) -> Reply:
    async with pool.connection() as conn:
        granted = await delegation.granted_by(conn, rep.identity, now=now)
        held = await delegation.held_by(conn, rep.identity, now=now)
    return cards.delegations_card(granted, held, locale=locale, notice=notice)
