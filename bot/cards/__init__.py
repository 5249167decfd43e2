"""Adaptive Cards for Teams (pure builders: plain data in, card JSON out, no I/O), one module a card.

Every card targets schema **1.5** and uses only elements and actions that render on Teams mobile
(:mod:`bot.cards.blocks`): no ``Table``, no ``Action.Execute``; facts are stacked and every
TextBlock wraps. This face hands on each module's names.
"""

from bot.cards.approval import *  # noqa: F403
from bot.cards.approvals_list import *  # noqa: F403
from bot.cards.blocks import *  # noqa: F403
from bot.cards.brief import *  # noqa: F403
from bot.cards.delegation_card import *  # noqa: F403
from bot.cards.digest import *  # noqa: F403
from bot.cards.fields import *  # noqa: F403
from bot.cards.help import *  # noqa: F403
from bot.cards.outcome import *  # noqa: F403
from bot.cards.sources import *  # noqa: F403
from bot.cards.suggestions import *  # noqa: F403
