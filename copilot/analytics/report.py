"""Approval analytics from the queries' rows: rates per tool and per field, edit deltas (pure).

Per tool, every decided proposal is one of: ``approved`` (executed as proposed),
``edited`` (executed with the rep's changes), ``rejected``, or ``not_executed`` (approved
or edited, then a conflict, a refusal or a failure wrote nothing; the audit log does not
say whether it had been edited). Rates are shares of the decided proposals.

Per field (a tool argument the model gave a value): ``kept`` (in an executed write and
unchanged), ``edited`` (changed by the rep), ``rejected`` (in a rejected proposal); fields
the rep added or removed in an edit are counted apart. Not-executed writes are left out
of the per-field counts: only their arguments' hash is kept. Edit deltas are aggregates only:
how many edits, and for numbers the mean change, for dates the mean shift in days, for
anything else how many times the text changed. No record value is reported.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from statistics import fmean
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from copilot.analytics.queries import Rows
from copilot.writes.registry import write_tool

UNDO_TOOL = "undo_write"
NOT_RECORDED = "not recorded"
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")

Kind = Literal["number", "date", "text"]


class ToolRates(BaseModel):
    tool: str
    proposals: int
    approved: int
    edited: int
    rejected: int
    not_executed: int
    conflicts: int
    approve_rate: float
    edit_rate: float
    reject_rate: float


class FieldRates(BaseModel):
    tool: str
    field: str
    proposals: int
    kept: int
    edited: int
    rejected: int
    added_by_rep: int
    removed_by_rep: int
    edit_rate: float
    reject_rate: float


class EditDelta(BaseModel):
    """How one field was changed by edits, in aggregate."""

    tool: str
    field: str
    edits: int
    kind: Kind
    mean_change: float | None
    """Numbers: mean of (approved - proposed); dates: mean shift in days; text: None."""


class Reason(BaseModel):
    reason: str
    count: int
    tools: list[str]


class Proactive(BaseModel):
    """What the copilot posted on its own and how the digest was received."""

    briefs_posted: int
    digests_posted: int
    not_useful: int
    """Digests the rep marked "Not useful"."""
    not_useful_rate: float
    """``not_useful`` / ``digests_posted`` (0 when none was posted)."""
    snoozes: int
    """Records snoozed out of digests (one per record per digest)."""


NO_PROACTIVE = "no proactive tables"


class AnalyticsReport(BaseModel):
    since: dt.date | None
    tenant: str | None
    decided: int
    tools: list[ToolRates]
    fields: list[FieldRates]
    edit_deltas: list[EditDelta]
    top_rejection_reasons: list[Reason]
    conflicts: int
    undo: str | float
    """The share of executed writes that were undone, or why there is none."""
    model_call_limit_hits: str
    fallbacks: str
    feedback: dict[str, int] | str
    """``{"like": n, "dislike": m}``, or "no feedback table"."""
    proactive: Proactive | str = NO_PROACTIVE
    """Briefs and digests posted, "Not useful" and snoozes; or :data:`NO_PROACTIVE`."""


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _normalised(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """The arguments as the write guard compares them: through the tool's schema when it is
    registered and they validate, else the given values without nulls."""
    entry = write_tool(tool)
    if entry is not None:
        try:
            return entry.args_schema.model_validate(args).model_dump(mode="json", exclude_none=True)
        except ValidationError:
            pass
    return {k: v for k, v in args.items() if v is not None}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _days(value: Any) -> dt.date | None:
    if isinstance(value, str) and _DATE.match(value):
        try:
            return dt.date.fromisoformat(value[:10])
        except ValueError:
            return None
    return None


class _Changes:
    def __init__(self) -> None:
        self.edited: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.added: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.removed: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.numbers: defaultdict[tuple[str, str], list[float]] = defaultdict(list)
        self.dates: defaultdict[tuple[str, str], list[float]] = defaultdict(list)
        self.texts: defaultdict[tuple[str, str], int] = defaultdict(int)

    def add(self, tool: str, original: dict[str, Any], final: dict[str, Any]) -> None:
        proposed = _normalised(tool, original)
        for field in sorted(set(proposed) | set(final)):
            before, after = proposed.get(field), final.get(field)
            key = (tool, field)
            if before == after:
                continue
            if before is None:
                self.added[key] += 1
                continue
            if after is None:
                self.removed[key] += 1
                continue
            self.edited[key] += 1
            b_num, a_num = _number(before), _number(after)
            b_day, a_day = _days(before), _days(after)
            if b_num is not None and a_num is not None:
                self.numbers[key].append(a_num - b_num)
            elif b_day is not None and a_day is not None:
                self.dates[key].append(float((a_day - b_day).days))
            else:
                self.texts[key] += 1

    def deltas(self) -> list[EditDelta]:
        out = []
        for key in sorted(self.edited):
            tool, field = key
            if self.numbers[key] and not self.dates[key] and not self.texts[key]:
                out.append(
                    EditDelta(
                        tool=tool,
                        field=field,
                        edits=self.edited[key],
                        kind="number",
                        mean_change=fmean(self.numbers[key]),
                    )
                )
            elif self.dates[key] and not self.numbers[key] and not self.texts[key]:
                out.append(
                    EditDelta(
                        tool=tool,
                        field=field,
                        edits=self.edited[key],
                        kind="date",
                        mean_change=fmean(self.dates[key]),
                    )
                )
            else:
                out.append(
                    EditDelta(tool=tool, field=field, edits=self.edited[key], kind="text", mean_change=None)
                )
        return out


def _tool_rates(rows: Rows) -> list[ToolRates]:
    counts: defaultdict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in rows.executed_by_tool:
        counts[row["tool"]]["approved" if row["decision"] == "approve" else "edited"] += int(row["n"])
    for row in rows.rejected_by_tool:
        counts[row["tool"]]["rejected"] += int(row["n"])
    for row in rows.not_executed_by_tool:
        counts[row["tool"]]["not_executed"] += int(row["n"])
        if row["outcome"] == "conflict":
            counts[row["tool"]]["conflicts"] += int(row["n"])
    out = []
    for tool in sorted(counts):
        c = counts[tool]
        total = c["approved"] + c["edited"] + c["rejected"] + c["not_executed"]
        out.append(
            ToolRates(
                tool=tool,
                proposals=total,
                approved=c["approved"],
                edited=c["edited"],
                rejected=c["rejected"],
                not_executed=c["not_executed"],
                conflicts=c["conflicts"],
                approve_rate=_rate(c["approved"], total),
                edit_rate=_rate(c["edited"], total),
                reject_rate=_rate(c["rejected"], total),
            )
        )
    return out


def _field_rates(rows: Rows, changes: _Changes) -> list[FieldRates]:
    executed: defaultdict[tuple[str, str], int] = defaultdict(int)
    rejected: defaultdict[tuple[str, str], int] = defaultdict(int)
    for row in rows.executed_fields:
        executed[(row["tool"], row["field"])] += int(row["n"])
    for row in rows.rejected_fields:
        rejected[(row["tool"], row["field"])] += int(row["n"])
    out = []
    for key in sorted(set(executed) | set(rejected) | set(changes.added)):
        tool, field = key
        edited = changes.edited.get(key, 0)
        proposals = executed[key] + rejected[key]
        out.append(
            FieldRates(
                tool=tool,
                field=field,
                proposals=proposals,
                kept=executed[key] - edited - changes.removed.get(key, 0),
                edited=edited,
                rejected=rejected[key],
                added_by_rep=changes.added.get(key, 0),
                removed_by_rep=changes.removed.get(key, 0),
                edit_rate=_rate(edited, proposals),
                reject_rate=_rate(rejected[key], proposals),
            )
        )
    return out


def _undo(tools: list[ToolRates]) -> str | float:
    if write_tool(UNDO_TOOL) is None:
        return f"0 (there is no {UNDO_TOOL} tool yet)"
    undone = sum(t.approved + t.edited for t in tools if t.tool == UNDO_TOOL)
    executed = sum(t.approved + t.edited for t in tools if t.tool != UNDO_TOOL)
    return _rate(undone, executed)


def summarise(rows: Rows, *, since: dt.date | None, tenant: str | None) -> AnalyticsReport:
    """The report of the rows :func:`copilot.analytics.queries.fetch` returned."""
    changes = _Changes()
    for row in rows.edited_rows:
        changes.add(row["tool"], dict(row["original_args"] or {}), dict(row["edited_args"] or {}))
    tools = _tool_rates(rows)
    feedback: dict[str, int] | str = (
        "no feedback table"
        if rows.feedback is None
        else {"like": 0, "dislike": 0} | {str(r["rating"]): int(r["n"]) for r in rows.feedback}
    )
    counts = rows.proactive
    proactive: Proactive | str = (
        NO_PROACTIVE
        if counts is None
        else Proactive(
            briefs_posted=int(counts["briefs_posted"]),
            digests_posted=int(counts["digests_posted"]),
            not_useful=int(counts["not_useful"]),
            not_useful_rate=_rate(int(counts["not_useful"]), int(counts["digests_posted"])),
            snoozes=int(counts["snoozes"]),
        )
    )
    return AnalyticsReport(
        since=since,
        tenant=tenant,
        decided=sum(t.proposals for t in tools),
        tools=tools,
        fields=_field_rates(rows, changes),
        edit_deltas=changes.deltas(),
        top_rejection_reasons=[
            Reason(reason=r["reason"] or "(empty)", count=int(r["n"]), tools=list(r["tools"]))
            for r in rows.top_reasons
        ],
        conflicts=sum(t.conflicts for t in tools),
        undo=_undo(tools),
        # The limit's stop and a fallback leave no row in any table (the limit only marks
        # the answer message in the checkpoint, which retention prunes): not a zero.
        model_call_limit_hits=NOT_RECORDED,
        fallbacks=NOT_RECORDED,
        feedback=feedback,
        proactive=proactive,
    )


def _pct(value: float) -> str:
    return f"{value * 100:.1f} %"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def to_text(report: AnalyticsReport) -> str:
    """The tables: per tool, per field, edit deltas, rejection reasons; then the other counts."""
    scope = f"since {report.since}" if report.since else "all time"
    lines = [
        f"approval analytics ({scope}, {'tenant ' + report.tenant if report.tenant else 'every tenant'}): "
        f"{report.decided} decided proposals",
        "",
    ]
    if report.tools:
        rows = [
            [
                "tool",
                "proposals",
                "approved",
                "edited",
                "rejected",
                "not executed",
                "approve",
                "edit",
                "reject",
            ]
        ]
        rows += [
            [
                t.tool,
                str(t.proposals),
                str(t.approved),
                str(t.edited),
                str(t.rejected),
                str(t.not_executed),
                _pct(t.approve_rate),
                _pct(t.edit_rate),
                _pct(t.reject_rate),
            ]
            for t in report.tools
        ]
        lines += _table(rows)
    else:
        lines.append("no decided proposals")
    if report.fields:
        rows = [
            ["tool", "field", "proposals", "kept", "edited", "rejected", "added", "removed", "edit", "reject"]
        ]
        rows += [
            [
                f.tool,
                f.field,
                str(f.proposals),
                str(f.kept),
                str(f.edited),
                str(f.rejected),
                str(f.added_by_rep),
                str(f.removed_by_rep),
                _pct(f.edit_rate),
                _pct(f.reject_rate),
            ]
            for f in report.fields
        ]
        lines += ["", *_table(rows)]
    if report.edit_deltas:
        rows = [["tool", "field", "edits", "typical change"]]
        for d in report.edit_deltas:
            change = {
                "number": lambda x: f"mean {x:+,.2f}",
                "date": lambda x: f"mean shift {x:+.1f} days",
                "text": lambda x: "text changed",
            }[d.kind](d.mean_change)
            rows.append([d.tool, d.field, str(d.edits), change])
        lines += ["", *_table(rows)]
    if report.top_rejection_reasons:
        rows = [["rejection reason (normalised)", "count", "tools"]]
        rows += [[r.reason, str(r.count), ", ".join(r.tools)] for r in report.top_rejection_reasons]
        lines += ["", *_table(rows)]
    feedback = (
        report.feedback
        if isinstance(report.feedback, str)
        else f"{report.feedback['like']} up, {report.feedback['dislike']} down"
    )
    undo = report.undo if isinstance(report.undo, str) else _pct(report.undo)
    lines += [
        "",
        f"conflicts: {report.conflicts} (approved writes the record had changed under; retained threads only)",
        f"undo rate: {undo}",
        f"model-call-limit hits: {report.model_call_limit_hits}",
        f"fallbacks: {report.fallbacks}",
        f"feedback: {feedback}",
        "",
        _proactive_text(report.proactive),
    ]
    return "\n".join(lines)


def _proactive_text(proactive: Proactive | str) -> str:
    if isinstance(proactive, str):
        return f"proactive: {proactive}"
    return (
        f"proactive: {proactive.briefs_posted} briefs posted, {proactive.digests_posted} digests posted, "
        f"{proactive.not_useful} not useful ({_pct(proactive.not_useful_rate)}), "
        f"{proactive.snoozes} snoozed"
    )
