"""The audit seal (every 5 minutes): verify the audit log and anchor its head.

Rows are anchored right after they commit (``copilot.persistence.audit``); this timer bounds
what that cannot: a row whose anchor was lost (the anchor store failed, the worker died
between commit and anchor) is anchored at the next run, and a removed anchored row, or a
forged or altered anchor, is reported at the next run (the invocation fails and logs the
problem: alert on the ``audit_seal`` function's failures). The schedule is derived from
``audit.SEAL_INTERVAL``, the bound the documentation states.

Like the retention timer, this module imports only ``azure.functions`` at load time; the
audit code and the host's edge (its database pool, no agent stack) come when the timer fires.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import azure.functions as func

if TYPE_CHECKING:
    from copilot.persistence.audit import SealResult

logger = logging.getLogger(__name__)

bp = func.Blueprint()

SCHEDULE = "0 */5 * * * *"
"""NCRONTAB (with seconds): every 5 minutes, ``audit.SEAL_INTERVAL`` (a unit test keeps them equal)."""


@bp.function_name("audit_seal")
@bp.timer_trigger(arg_name="timer", schedule=SCHEDULE, run_on_startup=False, use_monitor=True)
async def audit_seal(timer: func.TimerRequest) -> None:
    """Verify the audit log and anchor its head; fail (and log why) when it does not verify."""
    if getattr(timer, "past_due", False):
        logger.warning("audit seal is running late (past due): the anchoring bound is stretched")
    await run_seal()


async def run_seal() -> SealResult:
    """One seal with the edge's pool (bound to the audit keys and anchor store)."""
    # Imported when the timer fires, not when the app is indexed (see the module docstring).
    from copilot.errors import AuditTamperDetected
    from copilot.persistence import audit
    from functions.host import get_edge

    edge = await get_edge()
    async with edge.pool.connection() as conn:
        try:
            result = await audit.seal_head(conn)
        except AuditTamperDetected as exc:
            logger.error("audit seal: %s", exc)
            raise
    anchored = "nothing new to anchor" if result.anchor is None else f"anchored row {result.anchor.last_id}"
    logger.info("audit seal: %d rows verify; %s", result.report.rows_checked, anchored)
    return result
