"""Running the brief items through the product's own ``briefs_at`` and ``digest_at``.

No model writes a brief or a digest (both are composed from reads made as the rep), so the
brief items run once per eval, not once per model, in an environment of their own: a freshly
seeded sandbox, a fresh migrated database with the sandbox's library ingested (no thread yet,
so no proposal waits), and each rep signed in as the eval signs reps in; every read is made
with that rep's own tokens. Each run is scored (:func:`evals.metrics.score_brief`).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import assert_never

from copilot.briefs.digest import digest_at
from copilot.briefs.service import DEFAULT_LEAD_MINUTES, briefs_at
from copilot.briefs.types import BriefRun, Digest
from copilot.errors import CopilotError
from copilot.runner import CopilotService, open_service
from copilot.settings import CrmKind
from evals.dataset import Bounds, BriefCase, resolve_moment
from evals.environment import EvalEnvironment, SignedInRep, eval_environment
from evals.metrics import (
    Breach,
    BriefObservation,
    BriefPart,
    BriefScore,
    MetricValue,
    aggregate_briefs,
    breaches,
    score_brief,
)

Progress = Callable[[str], None]
SERVICE_MODEL = "offline"
"""The service a digest reads waiting proposals through needs a model configured; none is called."""


@dataclass
class BriefRecord:
    case: BriefCase
    at: dt.datetime
    observation: BriefObservation
    score: BriefScore


@dataclass
class BriefReport:
    """The brief items' run: per item its result, the metrics and their breaches."""

    items: list[BriefRecord]
    values: dict[str, MetricValue]
    breaches: list[Breach]
    seconds: float

    @property
    def passed(self) -> bool:
        return not self.breaches


def observe_run(run: BriefRun) -> BriefObservation:
    """A brief run as the metrics see it: each brief by meeting id with the ids its text cites."""
    return BriefObservation(
        parts=[BriefPart(b.meeting_id, tuple(b.citations)) for b in run.briefs],
        text="\n\n".join(b.text for b in run.briefs),
        unverified=[i for b in run.briefs for i in b.citation_check.unverified],
        rep=run.rep,
    )


def observe_digest(digest: Digest) -> BriefObservation:
    """A digest as the metrics see it: each line by section with the ids it cites."""
    return BriefObservation(
        # The digest's at-risk lines are scored by the risk items (they need the CRM's change
        # history); every line still counts for leaks, through the text.
        parts=[BriefPart(i.section, tuple(i.cited)) for i in digest.items if i.section != "at_risk"],
        text=digest.text,
        unverified=list(digest.citation_check.unverified),
        rep=digest.rep,
    )


async def run_case(
    env: EvalEnvironment, service: CopilotService, rep: SignedInRep, case: BriefCase, seeded: dt.date
) -> BriefRecord:
    """One brief item: the product's brief run or digest as the rep at the item's moment, scored."""
    at = resolve_moment(case.at, seeded)
    settings = env.settings(SERVICE_MODEL)
    try:
        async with service.pool.connection() as conn:
            if case.kind == "brief":
                lead = case.lead_minutes or DEFAULT_LEAD_MINUTES
                run = await briefs_at(settings, rep.identity, rep.broker, conn, at=at, lead_minutes=lead)
                observation = observe_run(run)
            elif case.kind == "digest":
                observation = observe_digest(
                    await digest_at(settings, rep.identity, rep.broker, conn, service, at=at)
                )
            else:
                assert_never(case.kind)
    except CopilotError as exc:
        observation = BriefObservation(error=f"{type(exc).__name__}: {exc}")
    return BriefRecord(case, at, observation, score_brief(case.kind, case.expect, observation))


async def evaluate_briefs(
    cases: Sequence[BriefCase], bounds: Bounds, progress: Progress, profile: CrmKind = "reference"
) -> BriefReport:
    """Every brief item, in dataset order, in an environment of their own on the CRM ``profile``
    (skipped when there are none: the bounds then report that nothing was measured)."""
    started = time.monotonic()
    records: list[BriefRecord] = []
    if cases:
        async with eval_environment(progress, profile) as env:
            # The sandbox was seeded just now: its meetings are offsets from today (UTC).
            seeded = dt.datetime.now(dt.UTC).date()
            reps: dict[str, SignedInRep] = {}
            async with open_service(env.settings(SERVICE_MODEL)) as service:
                for number, case in enumerate(cases, start=1):
                    if case.rep not in reps:
                        reps[case.rep] = await env.sign_in(case.rep)
                    record = await run_case(env, service, reps[case.rep], case, seeded)
                    records.append(record)
                    verdict = "ok" if record.score.ok else "FAIL"
                    progress(f"eval [briefs] {number}/{len(cases)} {case.id} {case.kind}: {verdict}")
    values = aggregate_briefs([r.score for r in records])
    return BriefReport(
        items=records,
        values=values,
        breaches=breaches(values, bounds.min, bounds.max),
        seconds=time.monotonic() - started,
    )
