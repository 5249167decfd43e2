"""Meeting prep briefs (every 5 minutes): each opted-in rep's new briefs, posted to their 1:1 chat.

The work is ``bot.brief_delivery.deliver_briefs`` (the same ``copilot.briefs.service.briefs_at``
that ``python -m copilot brief`` prints): it reads each rep's calendar and CRM with the rep's own
stored token and posts each brief proactively through the Bot Connector, once per meeting per
rep (a claim table), so overlapping runs on scaled-out instances and retries post nothing twice.

Like the other timers, this module imports only ``azure.functions`` at load time; the bot
runtime comes when the timer fires.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

import azure.functions as func

if TYPE_CHECKING:
    from bot.brief_delivery import DeliveryReport

logger = logging.getLogger(__name__)

bp = func.Blueprint()

SCHEDULE = "0 */5 * * * *"
"""NCRONTAB (with seconds): every 5 minutes; a meeting enters the lead-time window at most
five minutes before the rep sees its brief."""


@bp.function_name("briefs")
@bp.timer_trigger(arg_name="timer", schedule=SCHEDULE, run_on_startup=False, use_monitor=True)
async def briefs(timer: func.TimerRequest) -> None:
    """Post the briefs of meetings starting within the lead time (each once)."""
    if getattr(timer, "past_due", False):
        logger.warning("briefs are running late (past due)")
    await run_briefs()


async def run_briefs(at: dt.datetime | None = None) -> DeliveryReport:
    """One run with the host's bot runtime, at ``at`` (default: now)."""
    # Imported when the timer fires, not when the app is indexed (see the module docstring).
    from bot.brief_delivery import deliver_briefs
    from functions.host import get_host

    host = await get_host()
    return await deliver_briefs(host.runtime, at=at or dt.datetime.now(dt.UTC))
