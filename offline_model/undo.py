"""Undo requests: find the rep's change in their recent writes, then propose ONE undo of it.

The change is named by its number (an Undo button asks "… audit record 42"), or by words
the rep used ("undo the Zephyr stage change"): the newest undoable change whose record,
tool title or changed fields mention them; no words ("undo my last change") = the newest.
"""

from __future__ import annotations

from typing import Any

from offline_model.catalog import words
from offline_model.context import PlanContext
from offline_model.outcomes import after_write
from offline_model.steps import PlannedCall, Step, answer

HISTORY_LIMIT = 20


def _searchable(item: dict[str, Any]) -> set[str]:
    raw = item.get("changes")
    changes: dict[str, Any] = raw if isinstance(raw, dict) else {}
    text = " ".join(
        [str(item.get("record") or ""), str(item.get("what") or ""), str(item.get("tool") or "")]
        + [f"{k} {v}" for k, v in changes.items()]
    )
    found = words(text)
    # "stage change", "amount", "activity", "draft", "email": the kind of change too.
    return found | {w.rstrip("s") for w in found}


def _pick(items: list[dict[str, Any]], wanted: tuple[str, ...]) -> dict[str, Any] | None:
    """The change the words name (newest first on a tie); None when the best match cannot be
    undone any more (already undone, or an undo): the rep means that one, not another."""
    listed = [i for i in items if isinstance(i.get("audit_id"), int)]
    if not wanted:
        return next((i for i in listed if i.get("undoable")), None)
    best: tuple[int, dict[str, Any]] | None = None
    for item in listed:  # newest first: a tie keeps the newer change
        found = _searchable(item)
        hits = sum(1 for w in wanted if w in found or w.rstrip("s") in found)
        if hits and (best is None or hits > best[0]):
            best = (hits, item)
    if best is None or not best[1].get("undoable"):
        return None
    return best[1]


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
    chosen = _pick(history.items, spec.words)
    if chosen is None:
        what = " matching your words" if spec.words else ""
        return answer(
            f"I found no recent change of yours{what} that can still be undone. "
            "A change can be undone once, by you, within the undo window."
        )
    return Step(calls=[PlannedCall(name, {"audit_id": chosen["audit_id"]})])
