"""The delegations card (pure): who may approve for the rep, each with Revoke, and whose
proposals the rep may decide."""

from __future__ import annotations

import datetime as dt
from typing import Any

from bot.cards.blocks import (
    SUBMIT_VERSION,
    Card,
    adaptive_card,
    card_header,
    text_block,
)
from bot.cards.help import (
    APPROVALS_COMMANDS,
)
from bot.dates import DEFAULT_LOCALE, format_when
from copilot.delegation import Delegation

__all__ = ["REVOKE_DELEGATION_KIND", "delegations_card", "revoke_delegation_data"]

REVOKE_DELEGATION_KIND = "revoke_delegation"
"""``data.copilot`` of a delegation card's Revoke button: end that grant now."""


def revoke_delegation_data(delegation_id: int) -> dict[str, Any]:
    """The ``data`` of a Revoke button: the grant's id (the bot revokes only the clicker's own)."""
    return {"copilot": REVOKE_DELEGATION_KIND, "v": SUBMIT_VERSION, "delegation_id": delegation_id}


def _last_day(ends_at: dt.datetime) -> dt.date:
    # A grant "until Dec 24" ends at the start of Dec 25 (UTC): the card names Dec 24.
    return (ends_at.astimezone(dt.UTC) - dt.timedelta(microseconds=1)).date()


def delegations_card(
    granted: list[Delegation],
    held: list[Delegation],
    *,
    locale: str | None = DEFAULT_LOCALE,
    notice: str | None = None,
) -> Card:
    """Who may approve for the rep (each with a Revoke button) and whose proposals the rep may
    decide, with ``notice`` on top (e.g. the grant just made, or what was revoked) (pure)."""
    title = notice or (
        "You have delegated your approvals" if granted else "You have not delegated your approvals"
    )
    body: list[Card] = [
        card_header(
            "Delegated approvals",
            title,
            "A delegate approves or rejects your CRM changes as proposed, with their own CRM "
            "permissions, and sees nothing else of your conversations.",
        )
    ]
    for grant in granted:
        body.append(
            {
                "type": "Container",
                "id": f"delegation-{grant.id}",
                "separator": True,
                "spacing": "Medium",
                "items": [
                    text_block(
                        f"**{grant.delegate_name or 'A colleague'}** may decide your proposals", wrap=True
                    ),
                    text_block(
                        f"Until {format_when(_last_day(grant.ends_at), locale)}", size="Small", isSubtle=True
                    ),
                    {
                        "type": "ActionSet",
                        "actions": [
                            {
                                "type": "Action.Submit",
                                "title": "Revoke",
                                "data": revoke_delegation_data(grant.id),
                            }
                        ],
                    },
                ],
            }
        )
    for grant in held:
        body.append(
            text_block(
                f"You may decide **{grant.owner_name or 'a colleague'}**'s proposals until "
                f"{format_when(_last_day(grant.ends_at), locale)}: say **{APPROVALS_COMMANDS[0]}**.",
                separator=True,
                spacing="Medium",
            )
        )
    if not granted:
        body.append(
            text_block(
                'To delegate, say for example "delegate my approvals to Megan Bowen until '
                'Friday"; "revoke my delegation to Megan" ends it early. Either waits for your approval.',
                isSubtle=True,
                spacing="Medium",
            )
        )
    return adaptive_card(body, fallback=f"Delegated approvals: {title}.")
