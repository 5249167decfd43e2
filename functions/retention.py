"""Daily retention: expire idle threads and prune old checkpoint versions (03:30 UTC)."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import azure.functions as func

from copilot.persistence.retention import RetentionReport, apply_retention
from functions.host import get_host

logger = logging.getLogger(__name__)

bp = func.Blueprint()

SCHEDULE = "0 30 3 * * *"
"""NCRONTAB (with seconds): every day at 03:30 (UTC unless WEBSITE_TIME_ZONE says otherwise)."""
KEEP_CHECKPOINTS = 1
"""Checkpoints kept per thread and namespace: the newest is the thread's state."""


@bp.function_name("retention")
@bp.timer_trigger(arg_name="timer", schedule=SCHEDULE, run_on_startup=False, use_monitor=True)
async def retention(timer: func.TimerRequest) -> None:
    """Apply the retention policy (``COPILOT_RETENTION_DAYS``)."""
    if getattr(timer, "past_due", False):
        logger.warning("retention is running late (past due)")
    await run_retention()


async def run_retention() -> RetentionReport:
    """Apply the retention policy once, with the host's database pool."""
    host = await get_host()
    days = host.runtime.bot_settings.retention_days
    async with host.runtime.service.pool.connection() as conn:
        report = await apply_retention(
            conn, older_than=timedelta(days=days), keep_checkpoints=KEEP_CHECKPOINTS
        )
    logger.info("retention (%d days): %s", days, json.dumps(report.to_json()))
    return report
