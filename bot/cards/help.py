"""What a rep can say and what the copilot can do (pure): the chat commands, the welcome,
help and notice cards, and the sign-in card."""

from __future__ import annotations

from bot.cards.blocks import (
    Card,
    adaptive_card,
    card_header,
    command_data,
    text_block,
    text_lines,
)
from bot.cards.fields import (
    field_label,
)
from copilot.writes import write_tools

__all__ = [
    "APPROVALS_COMMANDS",
    "DELEGATIONS_COMMANDS",
    "EMPTY_MESSAGE_REPLY",
    "HELP_COMMANDS",
    "OAUTH_CARD_CONTENT_TYPE",
    "RESET_COMMANDS",
    "SIGN_IN_FOR_BRIEFS",
    "STATS_COMMANDS",
    "WELCOME_COMMANDS",
    "help_card",
    "notice_card",
    "sign_in_card",
    "welcome_card",
]

APPROVALS_COMMANDS: tuple[str, ...] = ("my approvals", "my pending approvals", "approvals")
"""Ways to ask for the waiting approvals (the agent's ``pending_approvals`` answers with its
card); the first is the one the cards suggest."""
WELCOME_COMMANDS: tuple[str, ...] = (
    "my pipeline",
    "my deals closing this quarter",
    APPROVALS_COMMANDS[0],
    "help",
    "my preferences",
)
STATS_COMMANDS: tuple[str, ...] = ("copilot stats", "my stats", "approval stats", "team stats", "stats")
"""Ways to ask for the approval stats (the agent's ``approval_stats`` answers with its card);
the first is the one the cards suggest."""
DELEGATIONS_COMMANDS: tuple[str, ...] = ("my delegations", "delegations")
"""Ways to ask who may approve for the rep (the agent's ``who_can_approve`` answers with the
delegations card; granting and ending one are write tools)."""
HELP_COMMANDS: frozenset[str] = frozenset({"help", "what can you do", "?"})
"""Messages (lower-cased) answered with the help card."""
RESET_COMMANDS: tuple[str, ...] = ("new conversation", "start over", "reset")
"""Messages (lower-cased) that start a new thread; the first is the one the cards suggest."""
EMPTY_MESSAGE_REPLY = (
    'Ask me about your accounts, deals or contacts, for example "my pipeline". '
    'Say "help" to see what I can do.'
)


def welcome_card() -> Card:
    """What the copilot can do, with example commands as buttons (pure)."""
    body: list[Card] = [
        card_header("CRM sales copilot", "Hi! I help you work your pipeline from Teams."),
        text_block(
            "- **Answers from live CRM data**, read with your own permissions, citing the "
            "records behind every fact"
        ),
        text_block(
            "- **Drafts follow-up emails** into your Outlook drafts. I never send anything.",
            spacing="Small",
        ),
        text_block(
            "- **Proposes CRM changes** (log an activity, update an opportunity). You approve, "
            "edit or reject each one; nothing is written without you.",
            spacing="Small",
        ),
        text_block("Try one of these, or just ask:", spacing="Medium", isSubtle=True),
    ]
    actions: list[Card] = [
        {"type": "Action.Submit", "title": text, "data": command_data(text)} for text in WELCOME_COMMANDS
    ]
    return adaptive_card(body, actions, fallback="CRM sales copilot: ask about your accounts and pipeline.")


def help_card() -> Card:
    """What the copilot can do, from the write-tool registry, with example buttons (pure).

    The changes it can propose are listed from the registry (title and the fields a rep
    may edit), so a new write tool appears here without touching this card.
    """
    body: list[Card] = [
        card_header("What I can do", "Ask in your own words; I answer from the CRM as you."),
        text_block("**Answer questions** from live CRM data, with your permissions, citing each record:"),
        text_block(
            "account summaries, your pipeline (by stage or closing this quarter), deal amounts, "
            "close dates and next steps, contacts by title, the last activity on an account; "
            "**deals at risk** (and why) and **catch me up** (what changed since you last looked, "
            "or since a day you name).",
            spacing="Small",
        ),
        text_block(
            "**Propose changes** that you approve, edit or reject on their own card:", spacing="Medium"
        ),
    ]
    for tool in write_tools():
        fields = ", ".join(field_label(name).lower() for name in tool.editable)
        body.append(text_block(f"- {tool.title}" + (f" ({fields})" if fields else ""), spacing="Small"))
    body += [
        text_block("**Speak first**, in this 1:1 chat, in your working hours:", spacing="Medium"),
        text_block(
            "**brief on** / **brief off** (a meeting prep brief before each customer meeting), "
            "**brief 30 minutes before**, **brief me** (your next customer meeting, now); "
            "**digest on** / **digest off** (your day each working morning), **digest at 8:00**, "
            "**digest me** (today's, now); with briefs on, a **How did it go?** card after each "
            "customer meeting. Say it in your own words too: a change of these comes on a card "
            "for your approval, like every change.",
            spacing="Small",
        ),
        text_block(
            "Nothing is written without your decision, and I never send email: drafts stay in "
            "your Outlook drafts.",
            spacing="Medium",
        ),
        text_block(
            f"Say **{APPROVALS_COMMANDS[0]}** to see every proposal waiting for you, "
            f"**{STATS_COMMANDS[0]}** for approve / edit / reject rates (your reports' if you "
            f"manage a team), **{RESET_COMMANDS[0]}** to start over, **help** to see this again.",
            spacing="Small",
            isSubtle=True,
        ),
    ]
    actions: list[Card] = [
        {"type": "Action.Submit", "title": text, "data": command_data(text)}
        for text in WELCOME_COMMANDS
        if text not in HELP_COMMANDS
    ]
    return adaptive_card(
        body, actions, fallback="What I can do: answer from the CRM, and propose changes you approve."
    )


def notice_card(title: str, text: str, *, correlation_id: str | None = None) -> Card:
    """A short notice (an error, a limit hit, "CRM unavailable"), with an optional reference id."""
    body: list[Card] = [text_block(title, weight="Bolder", size="Medium"), *text_lines(text)]
    if correlation_id:
        body.append(
            text_block(
                f"Reference: {correlation_id} (give this to your IT admin if it keeps happening)",
                size="Small",
                isSubtle=True,
                spacing="Medium",
            )
        )
    return adaptive_card(body, fallback=f"{title}: {text}")


OAUTH_CARD_CONTENT_TYPE = "application/vnd.microsoft.card.oauth"
"""The attachment content type of a Bot Framework OAuthCard (what :func:`sign_in_card` builds)."""
SIGN_IN_FOR_BRIEFS = (
    "Sign in so I can post your meeting prep briefs: I read your calendar and the CRM with your "
    "own permissions, and nothing before you have signed in."
)


def sign_in_card(
    *, connection_name: str, exchange_uri: str, exchange_id: str, text: str = SIGN_IN_FOR_BRIEFS
) -> Card:
    """An OAuthCard's content for the bot's OAuth connection (Teams SSO signs the rep in silently
    through the token exchange resource; the button is the fallback sign-in)."""
    return {
        "text": text,
        "connectionName": connection_name,
        "buttons": [{"type": "signin", "title": "Sign in", "value": ""}],
        "tokenExchangeResource": {"id": exchange_id, "uri": exchange_uri},
    }
