"""Scale-out of the proactive timers: 4 instances firing together, some SIGKILLed mid-run.

Four worker processes (``tests/support/timer_worker.py``, each one Functions instance running
the brief and digest timers' own work) fire at the same moment over one PostgreSQL, the real
sandbox (every CRM call slowed, so a kill lands inside a run) and the fake Bot Connector
(every post slowed, so a kill lands between a claim and its post). While they run, workers are
killed at random moments and started again, every other time all of them at once while a post
is in flight (a host recycle). Then, once a killed instance's claims have outlived their lease,
the four fire together once more (the next timer tick).

The four reps work around the clock in UTC for this test (their Outlook working hours in the
sandbox), so quiet hours hold nothing back: they have their own tests. From the connector's
recordings: every rep gets exactly one brief card per meeting the brief composer gives them
(the very function, run once here as the reference), exactly one digest card for the day and
exactly one follow-through card per meeting that just ended, none twice and none lost. CI runs a small count; ``make soak`` (``COPILOT_SOAK=1``) the full
one. ``SCALE_SEED`` fixes which worker dies when (the seed is printed).
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.cards import BRIEF_ELEMENT_PREFIX, DIGEST_ELEMENT_PREFIX
from bot.insight_cards import FOLLOW_THROUGH_ELEMENT_PREFIX
from copilot.briefs.service import briefs_at
from copilot.followthrough import follow_throughs_at
from copilot.persistence.database import connect
from copilot.persistence.pool import open_pool
from copilot.settings import Settings
from sandbox.directory import find_user
from tests.adversarial.counts import Tally, count
from tests.support.copilot_env import bot_environment, copilot_settings, prepare_database, sign_in
from tests.support.fake_connector import FakeConnector, card_of
from tests.support.postgres import fresh_database
from tests.support.posting import keep_settings
from tests.support.sandbox_process import PROJECT_ROOT, SandboxProcess, start_sandbox, stop_sandbox
from tests.support.working_hours import EVERY_DAY, mailbox_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

WORKERS = 4
REPS = ("alex", "megan", "diego", "jordan")
"""Reps with customer meetings in the seeded calendar."""
KILLS = count(3, 40)
ROUNDS = 3
"""Timer runs each worker makes per start (overlapping firings and retries)."""
WINDOW = 5 * 24 * 60
"""Lead minutes covering every seeded meeting of the coming days."""
FIRED_AT = timedelta(hours=8)
"""When the timers fire, after midnight UTC of the seeded day: past the reps' 07:30 digest time."""
AFTER_MEETING = timedelta(hours=17, minutes=40)
"""When the follow-through timer fires: ten minutes after the seeded day's Acme meeting ended."""
CRM_LATENCY_MS = 40
CLAIM_LEASE_SECONDS = 2
POST_LATENCY_SECONDS = 0.3
"""Each post to the Bot Connector takes this long to arrive, so kills land between a claim and\nits post too."""
REFUSED_POSTS = 2
IN_FLIGHT_WAIT_SECONDS = 30
"""How long an all-at-once kill waits for a post to be on its way."""
WAIT_SECONDS = 240
"""How long the workers may take to finish their rounds."""


@pytest.fixture
def scale_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    running = start_sandbox(tmp_path_factory.mktemp("scale-sandbox"))
    try:
        yield running
    finally:
        stop_sandbox(running)


@pytest.fixture
async def settings(postgres_server_url: str, scale_sandbox: SandboxProcess) -> AsyncIterator[Settings]:
    with fresh_database(postgres_server_url, "proactive") as url:
        made = copilot_settings(url, scale_sandbox)
        await prepare_database(made)
        yield made


@pytest.fixture
async def connector() -> AsyncIterator[FakeConnector]:
    running = FakeConnector(inbound_delay=POST_LATENCY_SECONDS)
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


def _reference(connector: FakeConnector, handle: str) -> dict[str, Any]:
    user = find_user(handle)
    assert user is not None
    return {
        "user": {"id": f"29:{handle}", "aadObjectId": user.aad_object_id},
        "bot": {"id": "28:copilot"},
        "conversation": {"id": f"conv-{handle}", "conversationType": "personal", "tenantId": user.tenant_id},
        "channelId": "msteams",
        "serviceUrl": connector.url,
    }


async def _expected(settings: Settings, at: datetime) -> set[tuple[str, str]]:
    """(conversation, meeting id) of every brief the composer gives the reps at ``at``."""
    expected: set[tuple[str, str]] = set()
    for handle in REPS:
        rep = await sign_in(settings, handle)
        async with connect(settings) as conn:
            run = await briefs_at(settings, rep.identity, rep.broker, conn, at=at, lead_minutes=WINDOW)
        expected |= {(f"conv-{handle}", b.meeting_id) for b in run.briefs}
    return expected


async def _expected_follow_throughs(settings: Settings, after: datetime) -> set[tuple[str, str]]:
    """(conversation, meeting id) of every follow-through card the composer gives at ``after``."""
    expected: set[tuple[str, str]] = set()
    for handle in REPS:
        rep = await sign_in(settings, handle)
        async with connect(settings) as conn:
            found = await follow_throughs_at(settings, rep.identity, rep.broker, conn, at=after)
        expected |= {(f"conv-{handle}", f.meeting_id) for f in found}
    return expected


def _fired_at(sandbox: SandboxProcess) -> datetime:
    """The seeded day's :data:`FIRED_AT` (UTC): the meetings of the coming days follow it."""
    return _seeded_day(sandbox) + FIRED_AT


def _seeded_day(sandbox: SandboxProcess) -> datetime:
    events: list[dict[str, Any]] = sandbox.admin("GET", "/admin/export")["events"]
    first = min(datetime.fromisoformat(e["start_at"].replace("Z", "+00:00")) for e in events)
    return first.replace(hour=0, minute=0, second=0, microsecond=0)


class Workers:
    """The instances: started, killed and restarted as subprocesses."""

    def __init__(self, env: dict[str, str], at: datetime, events: Path, logs: Path, after: datetime):
        self._env, self._at, self._events, self._logs, self._after = env, at, events, logs, after
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * WORKERS
        self.starts = 0

    def start(self, index: int, rounds: int = ROUNDS) -> None:
        self.starts += 1
        log = (self._logs / f"worker-{index}-{self.starts}.log").open("wb")
        self.processes[index] = subprocess.Popen(
            [
                sys.executable, "-m", "tests.support.timer_worker", "--at", self._at.isoformat(),
                "--lead", str(WINDOW), "--rounds", str(rounds), "--events", str(self._events),
                "--after", self._after.isoformat(),
            ],
            cwd=PROJECT_ROOT, env=self._env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def running(self) -> list[int]:
        return [i for i, p in enumerate(self.processes) if p is not None and p.poll() is None]

    def kill(self, index: int) -> None:
        process = self.processes[index]
        assert process is not None
        process.kill()
        process.wait()

    async def wait_all(self) -> None:
        for _ in range(WAIT_SECONDS * 10):
            if not self.running():
                break
            await asyncio.sleep(0.1)
        assert not self.running(), "workers still running"
        failed = [p.returncode for p in self.processes if p is not None and p.returncode not in (0, -9)]
        assert failed == [], f"a worker failed (exit codes {failed}); see {self._logs}"


async def test_four_instances_firing_together_with_kills_post_each_brief_digest_and_follow_through_exactly_once(
    settings: Settings, scale_sandbox: SandboxProcess, connector: FakeConnector, tmp_path: Path
) -> None:
    seed = int(os.environ.get("SCALE_SEED") or random.randrange(1 << 30))
    print(f"SCALE_SEED={seed}")
    chance = random.Random(seed)
    at = _fired_at(scale_sandbox)
    for handle in REPS:
        always = mailbox_settings("UTC", EVERY_DAY, "00:00:00", "23:59:59")
        scale_sandbox.admin("PUT", f"/admin/users/{handle}/mailbox-settings", always)
    expected = await _expected(settings, at)
    assert len(expected) >= 5, expected
    expected_digests = {(f"conv-{handle}", at.date().isoformat()) for handle in REPS}
    after = _seeded_day(scale_sandbox) + AFTER_MEETING
    expected_follow = await _expected_follow_throughs(settings, after)
    assert expected_follow, "the seeded Acme meeting ends ten minutes before"

    assert settings.database_url is not None
    url = settings.database_url.get_secret_value()
    pool = await open_pool(url, settings)
    try:
        for handle in REPS:
            rep = await sign_in(settings, handle)
            reference = _reference(connector, handle)
            await keep_settings(pool, rep.identity, reference, time_zone="UTC", briefs=True, digest=True)
    finally:
        await pool.close()

    env = {
        **bot_environment(url, scale_sandbox, tmp_path / "data"),
        "COPILOT_PROACTIVE_CLAIM_LEASE_SECONDS": str(CLAIM_LEASE_SECONDS),
    }
    scale_sandbox.admin("PUT", "/admin/knobs", {"latency_ms": CRM_LATENCY_MS})
    workers = Workers(env, at, tmp_path / "events.jsonl", tmp_path, after)
    # The connector also refuses a few posts outright (403): their claims are given back.
    connector.fail_next.extend([(403, {})] * REFUSED_POSTS)
    try:
        for index in range(WORKERS):
            workers.start(index)
        kills = killed_in_flight = 0
        while kills < KILLS:
            # Every other kill lands while a post is on its way to the Connector, and takes all
            # the instances at once (as a host recycle does), so the sender surely dies between
            # its claim and its post; the others come at a random moment and take one instance.
            everyone = kills % 2 == 0
            if everyone:
                # Starting an instance (imports, sign-in, the slowed CRM reads) takes seconds.
                for _ in range(IN_FLIGHT_WAIT_SECONDS * 100):
                    if connector.in_flight:
                        break
                    await asyncio.sleep(0.01)
                await asyncio.sleep(chance.uniform(0, POST_LATENCY_SECONDS / 3))
            else:
                await asyncio.sleep(chance.uniform(0.2, 1.5))
            alive = workers.running()
            if not alive:
                for index in range(WORKERS):
                    workers.start(index)
                continue
            victims = alive if everyone else [chance.choice(alive)]
            in_flight = connector.in_flight
            for victim in victims:
                workers.kill(victim)
            kills += 1
            killed_in_flight += bool(in_flight)
            for victim in victims:
                workers.start(victim)
        await workers.wait_all()
        # The next timer tick, after the killed instances' claims outlived their lease.
        await asyncio.sleep(CLAIM_LEASE_SECONDS + 1)
        for index in range(WORKERS):
            workers.start(index, rounds=1)
        await workers.wait_all()
    finally:
        for index in workers.running():
            workers.kill(index)
        scale_sandbox.admin("PUT", "/admin/knobs", {})
        for handle in REPS:
            scale_sandbox.admin("DELETE", f"/admin/users/{handle}/mailbox-settings")

    posted: Counter[tuple[str, str]] = Counter()
    digests: Counter[tuple[str, str]] = Counter()
    follows: Counter[tuple[str, str]] = Counter()
    for message in connector.messages():
        card = card_of(message)
        header = str(card["body"][0].get("id", ""))
        if header.startswith(BRIEF_ELEMENT_PREFIX):
            posted[(message.conversation_id, header.removeprefix(BRIEF_ELEMENT_PREFIX))] += 1
        elif header.startswith(DIGEST_ELEMENT_PREFIX):
            digests[(message.conversation_id, header.removeprefix(DIGEST_ELEMENT_PREFIX))] += 1
        elif header.startswith(FOLLOW_THROUGH_ELEMENT_PREFIX):
            follows[(message.conversation_id, header.removeprefix(FOLLOW_THROUGH_ELEMENT_PREFIX))] += 1
    tally = Tally("briefs")
    for key in sorted(expected | set(posted)):
        n = posted.get(key, 0)
        tally.record(key in expected and n == 1, f"{key}: posted {n} times (expected {int(key in expected)})")
    digest_tally = Tally("digests")
    for key in sorted(expected_digests | set(digests)):
        n = digests.get(key, 0)
        digest_tally.record(
            key in expected_digests and n == 1,
            f"{key}: posted {n} times (expected {int(key in expected_digests)})",
        )
    print(
        f"workers {WORKERS}, kills {kills} ({killed_in_flight} with a post in flight), "
        f"starts {workers.starts}, posts lost in flight {connector.lost_in_flight}, "
        f"posts refused {len(connector.failed)}"
    )
    follow_tally = Tally("follow-throughs")
    for key in sorted(expected_follow | set(follows)):
        n = follows.get(key, 0)
        follow_tally.record(
            key in expected_follow and n == 1,
            f"{key}: posted {n} times (expected {int(key in expected_follow)})",
        )
    tally.assert_clean()
    digest_tally.assert_clean()
    follow_tally.assert_clean()
    # The first kill takes every instance while a post is on its way: that brief's claim is
    # held by a dead instance, and only the lease gives it back.
    assert killed_in_flight >= 1, "no kill landed while a post was in flight"
