"""``python -m copilot brief``: print the briefs the timer would post at a given moment."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from copilot.auth.tokens import dev_sign_in_rep
from copilot.briefs.mailbox_settings import rep_schedule
from copilot.briefs.schedule import resolve_zone
from copilot.briefs.service import MAX_LEAD_MINUTES, briefs_at
from copilot.briefs.types import BriefRun
from copilot.cli_input import check_rep
from copilot.clock import Clock, system_clock
from copilot.errors import InvalidInput
from copilot.persistence.database import connect
from copilot.settings import Settings

# Entra's "the user account does not exist in the directory": the rep named is unknown.


def parse_at(text: str, now: Clock = system_clock) -> datetime:
    """``--at``: ``now`` (the default), or an ISO 8601 time (``Z`` or an offset; none = UTC)."""
    if text.strip().lower() == "now":
        return now().astimezone(UTC)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"--at {text[:60]!r} is not an ISO time (e.g. 2026-12-03T14:30:00Z) or now"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def check_lead(minutes: int) -> None:
    """``--lead-minutes``: 1 minute to a week."""
    if not 1 <= minutes <= MAX_LEAD_MINUTES:
        raise InvalidInput(f"--lead-minutes must be between 1 and {MAX_LEAD_MINUTES}, not {minutes}")


def render_run(run: BriefRun) -> str:
    """The run as text: a header (its moment in the rep's zone), then each brief, then how many
    meetings had none."""
    at = run.at.astimezone(resolve_zone(run.time_zone) or UTC)
    lines = [
        f"Briefs for {run.rep} at {at:%Y-%m-%d %H:%M} {run.time_zone}: meetings starting within "
        f"{run.lead_minutes} minutes ({run.meetings_in_window} in the window)"
    ]
    for brief in run.briefs:
        check = brief.citation_check
        lines += [
            "",
            brief.text,
            f"  citations: {len(check.cited)} checked, {len(check.unverified)} unverified",
        ]
    if not run.briefs:
        lines += ["", "No brief: no meeting in the window has a CRM contact you can see."]
    if run.briefs and run.meetings_without_brief:
        lines += [
            "",
            f"{run.meetings_without_brief} other meeting(s) in the window have no CRM contact you can see.",
        ]
    return "\n".join(lines)


async def main(settings: Settings, *, rep: str, at: str, lead_minutes: int, as_json: bool) -> int:
    """Sign the rep in (the local dev path, as ``ask``), compose the briefs, print them."""
    # azure-identity logs a refused token request as a multi-line warning; the command's
    # one-line error (which names what is missing) is what the rep reads.
    logging.getLogger("azure.identity").setLevel(logging.ERROR)
    check_rep(rep)
    moment = parse_at(at)
    check_lead(lead_minutes)
    identity, tokens = await dev_sign_in_rep(settings, rep)
    # The rep's zone, as Teams shows them: their mailbox settings (no Teams client here to fall back on).
    schedule = await rep_schedule(settings, tokens, None)
    async with connect(settings) as conn:
        run = await briefs_at(
            settings, identity, tokens, conn, at=moment, lead_minutes=lead_minutes, zone=schedule.tz
        )
    print(json.dumps(run.model_dump(mode="json")) if as_json else render_run(run), flush=True)
    return 0


async def digest_main(settings: Settings, *, rep: str, at: str, as_json: bool) -> int:
    """``python -m copilot digest``: sign the rep in (as ``brief``), compose their digest, print it.

    The waiting proposals come from the rep's threads, so this opens the copilot's service
    (its database must be migrated) and reads each thread's state through the runner.
    """
    from copilot.briefs.digest import digest_at
    from copilot.runner import open_service

    logging.getLogger("azure.identity").setLevel(logging.ERROR)
    check_rep(rep)
    moment = parse_at(at)
    identity, tokens = await dev_sign_in_rep(settings, rep)
    schedule = await rep_schedule(settings, tokens, None)
    async with open_service(settings) as service, service.pool.connection() as conn:
        digest = await digest_at(settings, identity, tokens, conn, service, at=moment, zone=schedule.tz)
    if as_json:
        print(json.dumps(digest.model_dump(mode="json")), flush=True)
        return 0
    check = digest.citation_check
    print(
        f"{digest.text}\n  citations: {len(check.cited)} checked, {len(check.unverified)} unverified",
        flush=True,
    )
    return 0
