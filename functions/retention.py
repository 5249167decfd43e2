"""Daily retention (03:30 UTC): expire idle threads, prune old checkpoint versions and expired
SSO tokens (``python -m copilot retention run`` does the same on demand), and forget the
webhook deliveries this app de-duplicates against (``inbound_activities``) and messages
whose rep never signed in (``pending_messages``).

Cold start: ``function_app`` imports every blueprint when the app is indexed, the HTTP
trigger's included, so this module imports only ``azure.functions`` at load time; the
retention code (LangGraph's checkpointer) and the host are imported when the timer fires.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import TYPE_CHECKING

import azure.functions as func

if TYPE_CHECKING:
    from copilot.persistence.retention import RetentionReport

logger = logging.getLogger(__name__)

bp = func.Blueprint()

SCHEDULE = "0 30 3 * * *"
"""NCRONTAB (with seconds): every day at 03:30 (UTC unless WEBSITE_TIME_ZONE says otherwise)."""


@bp.function_name("retention")
@bp.timer_trigger(arg_name="timer", schedule=SCHEDULE, run_on_startup=False, use_monitor=True)
async def retention(timer: func.TimerRequest) -> None:
    """Apply the retention policy (``COPILOT_RETENTION_DAYS``)."""
    if getattr(timer, "past_due", False):
        logger.warning("retention is running late (past due)")
    await run_retention()


async def run_retention() -> RetentionReport:
    """Apply the retention policy once, with the host's database pool and checkpointer."""
    # Imported when the timer fires, not when the app is indexed (see the module docstring).
    from bot.conversations import prune_pending
    from copilot.persistence.retention import apply_retention
    from functions.dedupe import prune_deliveries
    from functions.host import get_host

    host = await get_host()
    service = host.runtime.service
    days = host.runtime.bot_settings.retention_days
    async with service.pool.connection() as conn:
        report = await apply_retention(
            conn, service.saver, older_than=timedelta(days=days), now=service.clock()
        )
    deliveries = await prune_deliveries(service.pool)
    unanswered = await prune_pending(service.pool)
    logger.info(
        "retention (%d days): %s; %d webhook deliveries and %d messages never signed in for forgotten",
        days,
        json.dumps(report.to_json()),
        deliveries,
        unanswered,
    )
    return report
