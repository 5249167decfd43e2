"""The SQL of ``python -m copilot analytics`` (pure text) and the one function that runs it.

What the tables hold (so what can be counted):

* ``audit_log``: one row per *executed* write, with ``decision`` ``approve`` (as proposed)
  or ``edit``, ``original_args`` (the model's call as it was proposed) and ``edited_args``
  (the final arguments, only for an edit);
* ``rejections``: one row per rejected proposal, its ``args`` and the rep's ``reason``;
* ``idempotency_keys``: one row per approved write attempt; a ``done`` key whose stored
  outcome is ``conflict``, ``refused`` or ``failed`` was approved (or edited) but wrote
  nothing. Its arguments are not kept (only their hash), and retention deletes the keys
  with their thread, so these counts cover the retained threads only;
* ``answer_feedback`` (optional: the Teams feedback buttons, a bot migration that may not
  exist): thumbs up / down per answer;
* ``brief_claims``, ``digest_claims`` and ``digest_feedback`` (optional, the bot's migrations:
  what the copilot posted on its own): a claim with an ``activity_id`` is a brief or digest
  that was posted; the digest's "Not useful" (one per digest) and "Snooze" (one row per
  snoozed record). Read by SQL here, as ``answer_feedback`` is: ``copilot`` does not import
  ``bot``, and the tables belong to the Teams layer that writes them.

Every query takes the same three filters, ``since`` (a UTC timestamp or NULL), ``tenant``
(or NULL) and ``reps`` (an array of Entra object ids, the rows' ``rep_aad_id`` /
``aad_object_id``, or NULL for everyone), as named parameters. Nothing here selects a record's values except the edited
rows' arguments, which :mod:`copilot.analytics.report` reduces to per-field aggregates.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row


def _where(time_column: str, alias: str = "", rep_column: str = "rep_aad_id") -> str:
    prefix = f"{alias}." if alias else ""
    return (
        f"(%(since)s::timestamptz IS NULL OR {prefix}{time_column} >= %(since)s::timestamptz)"
        f" AND (%(tenant)s::text IS NULL OR {prefix}tenant_id = %(tenant)s::text)"
        f" AND (%(reps)s::text[] IS NULL OR {prefix}{rep_column} = ANY(%(reps)s::text[]))"
    )


EXECUTED_BY_TOOL = f"""
SELECT tool, decision, count(*) AS n
  FROM audit_log WHERE {_where("decided_at")}
 GROUP BY tool, decision ORDER BY tool, decision
"""

REJECTED_BY_TOOL = f"""
SELECT tool, count(*) AS n
  FROM rejections WHERE {_where("rejected_at")}
 GROUP BY tool ORDER BY tool
"""

NOT_EXECUTED_BY_TOOL = f"""
SELECT tool, result->>'status' AS outcome, count(*) AS n
  FROM idempotency_keys
 WHERE status = 'done' AND result->>'status' IN ('conflict', 'refused', 'failed') AND {_where("updated_at")}
 GROUP BY tool, result->>'status' ORDER BY tool, outcome
"""

# A field counts as proposed when the model's call gave it a value (not JSON null).
EXECUTED_FIELDS = f"""
SELECT a.tool, f.key AS field, a.decision, count(*) AS n
  FROM audit_log a CROSS JOIN LATERAL jsonb_each(a.original_args) f
 WHERE f.value <> 'null'::jsonb AND {_where("decided_at", "a")}
 GROUP BY a.tool, f.key, a.decision ORDER BY a.tool, f.key, a.decision
"""

REJECTED_FIELDS = f"""
SELECT r.tool, f.key AS field, count(*) AS n
  FROM rejections r CROSS JOIN LATERAL jsonb_each(r.args) f
 WHERE f.value <> 'null'::jsonb AND {_where("rejected_at", "r")}
 GROUP BY r.tool, f.key ORDER BY r.tool, f.key
"""

EDITED_ROWS = f"""
SELECT tool, original_args, edited_args
  FROM audit_log WHERE decision = 'edit' AND edited_args IS NOT NULL AND {_where("decided_at")}
 ORDER BY id
"""

# Reasons grouped by their normalised text: trimmed, whitespace collapsed, lower case,
# trailing punctuation dropped ("Wrong amount." and "wrong amount" are one reason); at
# most 120 characters of it are shown.
TOP_REJECTION_REASONS = f"""
SELECT left(reason, 120) AS reason, count(*) AS n, array_agg(DISTINCT tool ORDER BY tool) AS tools
  FROM (
    SELECT tool,
           regexp_replace(lower(regexp_replace(btrim(reason), '\\s+', ' ', 'g')), '[[:punct:][:space:]]+$', '')
             AS reason
      FROM rejections WHERE {_where("rejected_at")}
  ) normalised
 GROUP BY reason ORDER BY n DESC, reason LIMIT %(top)s
"""

FEEDBACK_TABLE = "answer_feedback"
FEEDBACK_EXISTS = f"SELECT to_regclass('{FEEDBACK_TABLE}') IS NOT NULL AS present"
FEEDBACK_BY_RATING = f"""
SELECT rating, count(*) AS n
  FROM {FEEDBACK_TABLE} WHERE {_where("received_at", rep_column="aad_object_id")}
 GROUP BY rating ORDER BY rating
"""

PROACTIVE_TABLES = ("brief_claims", "digest_claims", "digest_feedback")
PROACTIVE_EXISTS = (
    "SELECT " + " AND ".join(f"to_regclass('{t}') IS NOT NULL" for t in PROACTIVE_TABLES) + " AS present"
)
PROACTIVE_COUNTS = f"""
SELECT
  (SELECT count(*) FROM brief_claims
    WHERE activity_id IS NOT NULL AND {_where("claimed_at", rep_column="aad_object_id")}) AS briefs_posted,
  (SELECT count(*) FROM digest_claims
    WHERE activity_id IS NOT NULL AND {_where("claimed_at", rep_column="aad_object_id")}) AS digests_posted,
  (SELECT count(DISTINCT (tenant_id, aad_object_id, day)) FROM digest_feedback
    WHERE kind = 'not_useful' AND {_where("received_at", rep_column="aad_object_id")}) AS not_useful,
  (SELECT count(*) FROM digest_feedback
    WHERE kind = 'snooze' AND {_where("received_at", rep_column="aad_object_id")}) AS snoozes
"""


@dataclass(frozen=True)
class Filters:
    """Which decisions count: on or after ``since`` (UTC), of ``tenant`` and ``reps`` only (None: all)."""

    since: datetime | None = None
    tenant: str | None = None
    reps: frozenset[str] | None = None
    """Only these reps' decisions (Entra object ids, as the rows name reps; pair it with
    ``tenant``, object ids are unique per tenant). None: everyone; empty: no one."""
    top: int = 10
    """How many rejection reasons to list."""

    def params(self) -> dict[str, Any]:
        reps = None if self.reps is None else sorted(self.reps)
        return {"since": self.since, "tenant": self.tenant, "reps": reps, "top": self.top}


@dataclass(frozen=True)
class Rows:
    """Every query's rows, as :mod:`copilot.analytics.report` summarises them."""

    executed_by_tool: list[dict[str, Any]]
    rejected_by_tool: list[dict[str, Any]]
    not_executed_by_tool: list[dict[str, Any]]
    executed_fields: list[dict[str, Any]]
    rejected_fields: list[dict[str, Any]]
    edited_rows: list[dict[str, Any]]
    top_reasons: list[dict[str, Any]]
    feedback: list[dict[str, Any]] | None
    """None: there is no feedback table in this database."""
    proactive: dict[str, Any] | None = None
    """The counts of :data:`PROACTIVE_COUNTS`; None: the bot's proactive tables are not here."""


async def fetch(conn: AsyncConnection[Any], filters: Filters) -> Rows:
    """Run every query on ``conn`` with ``filters`` (read only)."""
    params = filters.params()
    async with conn.cursor(row_factory=dict_row) as cur:

        async def rows(sql: str) -> list[dict[str, Any]]:
            await cur.execute(sql, params)
            return [dict(row) for row in await cur.fetchall()]

        found = Rows(
            executed_by_tool=await rows(EXECUTED_BY_TOOL),
            rejected_by_tool=await rows(REJECTED_BY_TOOL),
            not_executed_by_tool=await rows(NOT_EXECUTED_BY_TOOL),
            executed_fields=await rows(EXECUTED_FIELDS),
            rejected_fields=await rows(REJECTED_FIELDS),
            edited_rows=await rows(EDITED_ROWS),
            top_reasons=await rows(TOP_REJECTION_REASONS),
            feedback=None,
        )
        await cur.execute(FEEDBACK_EXISTS)
        present = await cur.fetchone()
        if present is not None and present["present"]:
            found = Rows(**{**found.__dict__, "feedback": await rows(FEEDBACK_BY_RATING)})
        await cur.execute(PROACTIVE_EXISTS)
        present = await cur.fetchone()
        if present is not None and present["present"]:
            [counts] = await rows(PROACTIVE_COUNTS)
            found = Rows(**{**found.__dict__, "proactive": counts})
    return found
