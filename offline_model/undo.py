"""Undo requests: find the rep's change in their recent writes, then propose ONE undo of it.

The change is named by its number (an Undo button asks "… audit record 42"), or by words
the rep used ("undo the Zephyr stage change"): resolved by the record the change was made to,
then by the kind of change and its fields, never by words in its prose (a draft's body, an
activity's notes); two changes that match equally are not guessed between: the rep is asked
which, newest first. No words ("undo my last change") = the newest.
"""

from __future__ import annotations

from typing import Any

from offline_model.catalog import words
from offline_model.context import PlanContext
from offline_model.outcomes import after_write
from offline_model.steps import PlannedCall, Step, answer

HISTORY_LIMIT = 20


FREE_TEXT = frozenset({"notes", "body", "subject", "next_step", "signature", "description"})
"""Fields whose values are the rep's prose: words in them name no change (a draft that mentions
"the fleet expansion" is not a change to the Fleet expansion deal)."""
ASK_AT_MOST = 5


def _stems(text: str) -> set[str]:
    found = words(text)
    return found | {w.rstrip("s") for w in found}


def _record_words(item: dict[str, Any]) -> set[str]:
    """The record a change was made to: its name (with its account) and id. A name that is the
    change's own prose (a draft's or an activity's subject) names no record: it is left out."""
    record = str(item.get("record") or "")
    raw = item.get("changes")
    changes: dict[str, Any] = raw if isinstance(raw, dict) else {}
    for key, value in changes.items():
        if key in FREE_TEXT and isinstance(value, str) and value.strip():
            record = record.replace(value.strip(), " ")
    return _stems(f"{record} {item.get('record_id') or ''}")


def _field_words(item: dict[str, Any]) -> set[str]:
    """What kind of change it was: the tool and its title ("stage change", "activity", "draft"),
    the fields it set, and the values of those that are not prose (a stage, a type, a date)."""
    raw = item.get("changes")
    changes: dict[str, Any] = raw if isinstance(raw, dict) else {}
    parts = [str(item.get("what") or ""), str(item.get("tool") or "").replace("_", " ")]
    parts += [k.replace("_", " ") for k in changes]
    parts += [str(v) for k, v in changes.items() if k not in FREE_TEXT and not str(k).endswith("_id")]
    return _stems(" ".join(parts))


def _score(item: dict[str, Any], wanted: tuple[str, ...]) -> tuple[int, int]:
    """How well the rep's words name this change: words naming its record, then its field."""

    def hits(found: set[str]) -> int:
        return sum(1 for w in wanted if w in found or w.rstrip("s") in found)

    return hits(_record_words(item)), hits(_field_words(item))


def candidates(items: list[dict[str, Any]], wanted: tuple[str, ...]) -> list[dict[str, Any]]:
    """The changes the rep's words name best, newest first (by record, then by field; words in a
    change's prose count for nothing). None named: the newest undoable change. Empty when nothing
    matches, or when what matches best can no longer be undone (the rep means that one)."""
    listed = [i for i in items if isinstance(i.get("audit_id"), int)]
    if not wanted:
        return next(([i] for i in listed if i.get("undoable")), [])
    scored = [(_score(i, wanted), i) for i in listed]
    best = max((score for score, _ in scored), default=(0, 0))
    if best == (0, 0):
        return []
    return [i for score, i in scored if score == best and i.get("undoable")]


def _pick(items: list[dict[str, Any]], wanted: tuple[str, ...]) -> dict[str, Any] | None:
    """The one change the words name; None when none does, or when two match equally (then the
    rep is asked which: :func:`candidates`)."""
    found = candidates(items, wanted)
    return found[0] if len(found) == 1 else None


def _short(value: Any, at_most: int = 40) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= at_most else text[: at_most - 1] + "…"


def _which(found: list[dict[str, Any]]) -> str:
    """Asking which of the changes that match equally the rep means (newest first)."""
    lines = []
    for item in found[:ASK_AT_MOST]:
        raw = item.get("changes")
        changes: dict[str, Any] = raw if isinstance(raw, dict) else {}
        fields = ", ".join(
            f"{k.replace('_', ' ')} → {_short(v)}"
            for k, v in changes.items()
            if k not in ("body", "notes", "signature") and not k.endswith("_id")
        )
        cite = f" [{item['record_id']}]" if item.get("record_id") else ""
        lines.append(
            f"- {item.get('what')}: {item.get('record') or 'a record'}{cite}"
            + (f" ({fields})" if fields else "")
        )
    return (
        f"{len(found)} of your recent changes match; which one should I undo?\n"
        + "\n".join(lines)
        + '\nSay it with the record and the field, e.g. "undo the stage change on …".'
    )


def propose_undo(ctx: PlanContext) -> Step:
    """Propose undoing the change the rep means (after reading their recent changes)."""
    prior = ctx.calls("write_undo")
    last = prior[-1].result if prior else None
    if last is not None and not last.ok and not last.rejected and not last.unavailable:
        # The undo's own refusal says why in the rep's terms (already undone, too old…).
        return answer(last.error_message or "That change could not be undone; nothing was done.")
    stop = ctx.require("write_undo", "undo changes") or after_write(ctx, "write_undo")
    if stop is not None:
        return stop
    spec = ctx.req.undo
    assert spec is not None
    name = ctx.tools.name("write_undo")
    assert name is not None
    if spec.audit_id is not None:
        return Step(calls=[PlannedCall(name, {"audit_id": spec.audit_id})])
    history = ctx.read("write_history", {"limit": HISTORY_LIMIT}, "look up your recent changes")
    if isinstance(history, Step):
        return history
    if not history.ok:
        return answer("I couldn't read your recent changes right now, so I can't undo one.")
    found = candidates(history.items, spec.words)
    if len(found) > 1:
        return answer(_which(found))
    chosen = found[0] if found else None
    if chosen is None:
        what = " matching your words" if spec.words else ""
        return answer(
            f"I found no recent change of yours{what} that can still be undone. "
            "A change can be undone once, by you, within the undo window."
        )
    return Step(calls=[PlannedCall(name, {"audit_id": chosen["audit_id"]})])
