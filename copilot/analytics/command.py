"""The ``analytics`` command: read the decision history, summarise, print."""

from __future__ import annotations

import datetime as dt
import json

from copilot.analytics.queries import Filters, fetch
from copilot.analytics.report import summarise, to_text
from copilot.persistence.database import connect
from copilot.persistence.migrations import assert_schema_current
from copilot.settings import Settings


async def main(settings: Settings, *, since: dt.date | None, tenant: str | None, as_json: bool) -> int:
    """Print the analytics of decisions on or after ``since`` (UTC day), of ``tenant`` only if given."""
    start = None if since is None else dt.datetime.combine(since, dt.time(), tzinfo=dt.UTC)
    async with connect(settings) as conn:
        await assert_schema_current(conn)
        rows = await fetch(conn, Filters(since=start, tenant=tenant))
    report = summarise(rows, since=since, tenant=tenant)
    print(json.dumps(report.model_dump(mode="json"), indent=2) if as_json else to_text(report))
    return 0
