"""A process standing in for one scaled-out Functions instance firing the proactive timers.

``python -m tests.support.timer_worker --at ISO --rounds N --events FILE`` opens the bot
runtime from the environment (as ``functions.host`` does, in local development mode: reps
sign in at the sandbox identity provider) and runs the timers' own work, the functions
``functions/briefs.py`` and ``functions/digest.py`` call (and, with ``--after``, the
follow-through timer's at that moment), ``--rounds`` times at the moment ``--at``, a short random pause between rounds, as overlapping timer firings and the host's
retries would. Each round appends one JSON line to ``--events`` (written and flushed
line by line, so a SIGKILL loses nothing already done).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

from bot.brief_delivery import deliver_briefs
from bot.digest_delivery import deliver_digests
from bot.followthrough_delivery import deliver_follow_throughs
from bot.runtime import open_runtime
from bot.settings import BotSettings
from copilot.settings import Settings


async def _run(at: dt.datetime, lead: int, rounds: int, events: Path, after: dt.datetime | None) -> None:
    async with open_runtime(Settings(), BotSettings()) as runtime:
        with events.open("a", encoding="utf-8") as out:
            for number in range(rounds):
                briefs = await deliver_briefs(runtime, at=at, lead_minutes=lead)
                digests = await deliver_digests(runtime, at=at)
                follows = await deliver_follow_throughs(runtime, at=after) if after is not None else None
                line: dict[str, Any] = {
                    "round": number,
                    "posted": briefs.posted,
                    "already_posted": briefs.already_posted,
                    "held": briefs.quiet_hours + briefs.day_off,
                    "failed": briefs.failed,
                    "digests_posted": [[aad, day.isoformat()] for aad, day in digests.posted],
                    "digests_already_posted": digests.already_posted,
                    "digests_not_due": digests.not_due,
                    "digests_failed": digests.failed,
                    "follow_throughs_posted": follows.posted if follows is not None else [],
                }
                out.write(json.dumps(line) + "\n")
                out.flush()
                await asyncio.sleep(random.uniform(0, 0.2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--at", required=True, type=dt.datetime.fromisoformat)
    parser.add_argument("--lead", required=True, type=int)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", required=True, type=Path)
    parser.add_argument("--after", type=dt.datetime.fromisoformat, default=None)
    args = parser.parse_args()
    asyncio.run(_run(args.at, args.lead, args.rounds, args.events, args.after))


if __name__ == "__main__":
    main()
