"""The daily digest (every 15 minutes): each opted-in rep's digest, posted once per local day.

The work is ``bot.digest_delivery.deliver_digests``: for each rep with the digest on whose
digest time has come in their own time zone (on one of their working days), the digest
``python -m copilot digest`` prints, read with the rep's own stored token and posted
proactively through the Bot Connector, once per rep per day (a claim table), so overlapping runs
on scaled-out instances and retries post nothing twice. A run that missed the moment (the host
was down) still posts within a few hours.

Like the other timers, this module imports only ``azure.functions`` at load time; the bot
runtime comes when the timer fires.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

import azure.functions as func

if TYPE_CHECKING:
    from bot.digest_delivery import DigestReport

logger = logging.getLogger(__name__)

bp = func.Blueprint()

SCHEDULE = "0 */15 * * * *"
"""NCRONTAB (with seconds): every 15 minutes; a digest comes at most 15 minutes after the rep's
digest time."""


@bp.function_name("digest")
@bp.timer_trigger(arg_name="timer", schedule=SCHEDULE, run_on_startup=False, use_monitor=True)
async def digest(timer: func.TimerRequest) -> None:
    """Post the digests that are due (each once per rep per day)."""
    if getattr(timer, "past_due", False):
        logger.warning("the digest timer is running late (past due)")
    await run_digests()


async def run_digests(at: dt.datetime | None = None) -> DigestReport:
    """One run with the host's bot runtime, at ``at`` (default: now)."""
    # Imported when the timer fires, not when the app is indexed (see the module docstring).
    from bot.digest_delivery import deliver_digests
    from functions.host import get_host

    host = await get_host()
    return await deliver_digests(host.runtime, at=at or dt.datetime.now(dt.UTC))
