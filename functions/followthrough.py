"""The meeting followed through (every 5 minutes): after each opted-in rep's customer meeting ends,
one "How did it go?" card in their 1:1 chat, once per meeting (``bot.followthrough_delivery``).

Like the other timers, this module imports only ``azure.functions`` at load time; the bot
runtime comes when the timer fires.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

import azure.functions as func

if TYPE_CHECKING:
    from bot.followthrough_delivery import FollowThroughReport

logger = logging.getLogger(__name__)

bp = func.Blueprint()

SCHEDULE = "30 */5 * * * *"
"""NCRONTAB (with seconds): every 5 minutes, offset from the brief timer."""


@bp.function_name("followthrough")
@bp.timer_trigger(arg_name="timer", schedule=SCHEDULE, run_on_startup=False, use_monitor=True)
async def followthrough(timer: func.TimerRequest) -> None:
    """Post the follow-through cards of meetings that just ended (each once)."""
    if getattr(timer, "past_due", False):
        logger.warning("follow-throughs are running late (past due)")
    await run_follow_throughs()


async def run_follow_throughs(at: dt.datetime | None = None) -> FollowThroughReport:
    """One run, at ``at`` (now by default)."""
    from bot.followthrough_delivery import deliver_follow_throughs
    from functions.host import get_host

    host = await get_host()
    return await deliver_follow_throughs(host.runtime, at=at or dt.datetime.now(dt.UTC))
