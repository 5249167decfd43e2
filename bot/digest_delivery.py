"""The digest timer's work: each opted-in rep's daily digest, posted once per local day to their 1:1 chat.

For every rep with the digest on (``bot.brief_store``, ``digest on``): their stored token
(``RepTokens``; none → nothing is read for them), their schedule (``copilot.briefs.mailbox_settings``:
their zone and working days), and if their digest is due
(:func:`copilot.briefs.schedule.digest_due`: their digest time on a working day, or up to a few
hours late when a run missed it) the day is claimed, :func:`bot.digests.rep_digest` composes it
as the rep and :func:`bot.cards.digest_card` is posted through the stored 1:1 reference. One
digest per rep per local day across instances and retries (``digest_claims``); a post that
fails gives its claim back; a claim whose instance died before recording its post is taken
again after the lease (``bot.brief_store.CLAIM_LEASE``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING

from botbuilder.schema import ConversationReference

from bot import brief_store, cards, digest_store
from bot.brief_delivery import is_group, post_card
from bot.digests import rep_digest
from bot.proactive_reps import proactive_rep
from copilot.briefs.mailbox_settings import rep_schedule
from copilot.briefs.schedule import digest_due, local_day
from copilot.errors import ProactivePostFailed

if TYPE_CHECKING:
    from bot.runtime import BotRuntime

logger = logging.getLogger(__name__)


@dataclass
class DigestReport:
    """What one digest timer run did."""

    reps: int = 0
    posted: list[tuple[str, date]] = field(default_factory=list)
    """(rep's AAD object id, the rep's local day) of each digest this run posted."""
    already_posted: int = 0
    not_due: int = 0
    """Reps whose digest time has not come (or passed more than the grace ago), or on a day off."""
    not_signed_in: int = 0
    group_chats: int = 0
    failed: int = 0
    """Digests whose post did not reach the chat: claim given back, the next run posts them."""


async def deliver_digests(runtime: BotRuntime, *, at: datetime) -> DigestReport:
    """Post the digest of every opted-in rep whose digest is due at ``at`` in their zone, once per day."""
    pool = runtime.service.pool
    lease = timedelta(seconds=runtime.bot_settings.proactive_claim_lease_seconds)
    report = DigestReport()
    for sub in await brief_store.subscribers(pool, digest=True):
        report.reps += 1
        if is_group(sub.reference):
            report.group_chats += 1
            continue
        rep = await proactive_rep(runtime, sub.tenant_id, sub.aad_object_id, sub.reference, on=at.date())
        if rep is None:
            report.not_signed_in += 1
            continue
        schedule = await rep_schedule(runtime.settings, rep.broker, sub.preferences.time_zone)
        day = digest_due(at, schedule, sub.preferences.digest_time)
        if day is None:
            report.not_due += 1
            continue
        token = await digest_store.claim_digest(pool, rep.identity, day, lease=lease)
        if token is None:
            report.already_posted += 1
            continue
        # Late past midnight (the grace period): the digest is still that day's, as of its time.
        moment = (
            at
            if local_day(at, schedule) == day
            else datetime.combine(day, sub.preferences.digest_time, tzinfo=schedule.tz)
        )
        try:
            digest = await rep_digest(runtime.settings, pool, runtime.service, rep, schedule, at=moment)
            card = cards.digest_card(digest, record_url_template=runtime.bot_settings.record_url_template)
            reference = ConversationReference().deserialize(sub.reference)
            # Composing reads the CRM as the rep and may outlast the claim's lease: another
            # instance may have taken the day over meanwhile, and then it posts, not this one.
            confirmed = await digest_store.confirm_digest(pool, rep.identity, day, token)
            if confirmed is None:
                report.already_posted += 1
                continue
            token = confirmed
            activity_id = await post_card(runtime, reference, card)
        except ProactivePostFailed as failure:
            await digest_store.release_digest(pool, rep.identity, day, token)
            report.failed += 1
            logger.warning("digest of %s not posted: %s", day, failure)
            continue
        except BaseException:
            # Not posted: the next run within the grace period posts it.
            await digest_store.release_digest(pool, rep.identity, day, token)
            raise
        await digest_store.mark_digest_posted(pool, rep.identity, day, activity_id)
        report.posted.append((sub.aad_object_id, day))
    logger.info(
        "digests: %d reps, %d posted, %d already posted, %d not due, %d not signed in, %d group chats, "
        "%d failed (to be retried)",
        report.reps,
        len(report.posted),
        report.already_posted,
        report.not_due,
        report.not_signed_in,
        report.group_chats,
        report.failed,
    )
    return report
