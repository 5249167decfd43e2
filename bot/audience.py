"""Who is in a conversation and whose activity it is: the conversation's kind and the tenant.

Kept apart from the handler so the timers (``bot.brief_delivery``, ``bot.proactive_reps``) can
tell a group from a 1:1 chat without importing the turn's handler, and the runner with it.
"""

from __future__ import annotations

from datetime import tzinfo

from botbuilder.schema import Activity

from bot.ai_entities import client_time_zone
from bot.settings import BotSettings
from copilot.briefs.schedule import resolve_zone

PRIVATE_ONLY = (
    "I answer CRM questions only in a 1:1 chat with you: I read the CRM with the permissions "
    "of whoever asks, and everyone here would see the answer. Message me privately and ask there."
)
BRIEFS_PRIVATE_ONLY = 'Briefs come only to your 1:1 chat with me: say "brief me" there.'
"""A brief or the digest (the rep's own day) asked for in a group chat."""
GROUP_CONVERSATION_TYPES = frozenset({"groupChat", "channel"})
"""Teams ``conversationType``s with more people than the rep (1:1 chats are ``personal``)."""


def in_group(activity: Activity) -> bool:
    """Whether the activity came from a group chat or a channel (anyone there sees the reply)."""
    return getattr(activity.conversation, "conversation_type", None) in GROUP_CONVERSATION_TYPES


def answers_here(activity: Activity, settings: BotSettings) -> bool:
    """Whether CRM questions are answered in this conversation (1:1, or groups if allowed).

    A conversation without a type (not Teams, e.g. a Bot Framework test client) is a 1:1.
    """
    return not in_group(activity) or settings.group_answers


def tenant_id(activity: Activity) -> str | None:
    """The sender's tenant: the conversation's, else Teams' ``channelData.tenant``."""
    conversation = activity.conversation
    if conversation is not None and getattr(conversation, "tenant_id", None):
        return str(conversation.tenant_id)
    channel_data = activity.channel_data or {}
    tenant = channel_data.get("tenant") if isinstance(channel_data, dict) else None
    return str(tenant.get("id")) if isinstance(tenant, dict) and tenant.get("id") else None


def sender_aad_id(activity: Activity) -> str | None:
    """The sender's Entra object id (None: not a Microsoft 365 user, e.g. a test client)."""
    return getattr(activity.from_property, "aad_object_id", None) if activity.from_property else None


def rep_zone(activity: Activity) -> tzinfo | None:
    """The rep's zone as Teams reports it with this activity (``None``: unknown, cards say UTC)."""
    return resolve_zone(client_time_zone(activity.entities, activity.local_timezone))
