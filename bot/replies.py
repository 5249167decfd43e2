"""Posting a card or a line of text as the turn's reply."""

from __future__ import annotations

from typing import Any

from botbuilder.core import CardFactory, MessageFactory, TurnContext
from botbuilder.schema import Activity

Card = dict[str, Any]
"""An Adaptive Card's JSON."""
Reply = Card | str
"""An Adaptive Card to post, or a line of text (as ``bot.delegations`` answers)."""


def card_message(card: Card) -> Activity:
    """A message carrying one Adaptive Card."""
    return MessageFactory.attachment(CardFactory.adaptive_card(card))


async def send_card(turn_context: TurnContext, card: Card) -> None:
    """Post an Adaptive Card as a reply in the turn's conversation."""
    await turn_context.send_activity(card_message(card))


async def send_reply(turn_context: TurnContext, reply: Reply) -> None:
    """Post a card, or a line of text."""
    if isinstance(reply, str):
        await turn_context.send_activity(reply)
    else:
        await send_card(turn_context, reply)
