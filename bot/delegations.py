"""Approval delegation in Teams: the chat commands and the card's Revoke button, answered.

The rep names a colleague (email or full name); the copilot looks them up in the rep's own
directory with the rep's own Graph token (``copilot.people``), so only a colleague of the
same organisation can be found, and stores the grant (``copilot.delegation``). What a
delegate may then do is decided where every decision is checked, not here.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from bot import cards
from bot.conversations import Pool
from bot.delegation_commands import Delegate, DelegationCommand, Revoke, ShowDelegations, Unparsed
from bot.rep_tokens import SignedInRep
from copilot import delegation
from copilot.errors import AuthError, DirectoryUnavailable, InvalidInput
from copilot.people import find_colleague, people_scopes
from copilot.settings import Settings

Reply = dict[str, Any] | str
"""An Adaptive Card to post, or a line of text."""


async def answer_command(
    settings: Settings,
    pool: Pool,
    rep: SignedInRep,
    command: DelegationCommand,
    *,
    locale: str | None,
    now: dt.datetime,
) -> Reply:
    """What the bot posts for a delegation command, at ``now`` (the service's clock)."""
    if isinstance(command, Unparsed):
        return command.message
    try:
        if isinstance(command, ShowDelegations):
            return await _card(pool, rep, locale, None, now)
        if isinstance(command, Delegate):
            colleague = await _colleague(settings, rep, command.who)
            async with pool.connection() as conn:
                granted = await delegation.grant(
                    conn, rep.identity, colleague, until=delegation.end_of_day(command.until), now=now
                )
            notice = f"{granted.delegate_name or command.who} may now decide your proposals"
            return await _card(pool, rep, locale, notice, now)
        if isinstance(command, Revoke):
            async with pool.connection() as conn:
                live = await delegation.granted_by(conn, rep.identity, now=now)
            if command.who is not None:
                colleague = await _colleague(settings, rep, command.who)
                live = [d for d in live if d.delegate_aad_id == colleague.aad_object_id]
            ended = 0
            async with pool.connection() as conn:
                for grant in live:
                    ended += await delegation.revoke(conn, rep.identity, grant.id, now=now)
            notice = "Nothing to revoke" if ended == 0 else f"Revoked {_grants(ended)}"
            return await _card(pool, rep, locale, notice, now)
    except (InvalidInput, DirectoryUnavailable, AuthError) as exc:
        return f"I couldn't do that: {exc.message}. Nothing was changed."
    raise AssertionError(f"unhandled delegation command {command!r}")


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


async def _colleague(settings: Settings, rep: SignedInRep, who: str) -> delegation.Colleague:
    token = await rep.broker.token_for(people_scopes(settings))
    return await find_colleague(settings, token, rep.identity, who)


async def _card(
    pool: Pool, rep: SignedInRep, locale: str | None, notice: str | None, now: dt.datetime
) -> Reply:
    async with pool.connection() as conn:
        granted = await delegation.granted_by(conn, rep.identity, now=now)
        held = await delegation.held_by(conn, rep.identity, now=now)
    return cards.delegations_card(granted, held, locale=locale, notice=notice)


def _grants(n: int) -> str:
    return "1 delegation" if n == 1 else f"{n} delegations"
