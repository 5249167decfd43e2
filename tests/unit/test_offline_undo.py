"""The offline model's undo requests: which change a rep's words name, from recent_writes."""

from __future__ import annotations

from typing import Any

import pytest

from offline_model.intents import parse_undo
from offline_model.undo import _pick


def _item(audit_id: int, tool: str, record: str, undoable: bool = True, **changes: Any) -> dict[str, Any]:
    return {
        "audit_id": audit_id,
        "tool": tool,
        "what": {"update_opportunity": "Update an opportunity", "log_activity": "Log an activity"}[tool],
        "record": record,
        "changes": changes,
        "undoable": undoable,
    }


HISTORY = [  # newest first, as recent_writes lists them
    _item(9, "log_activity", "Zephyr Air", subject="Pricing call"),
    _item(8, "update_opportunity", "Zephyr Air — Renewal (Zephyr Air)", stage="Negotiation"),
    _item(7, "update_opportunity", "Kestrel — Pilot (Kestrel)", amount=5000),
    _item(6, "update_opportunity", "Kestrel — Renewal (Kestrel)", undoable=False, stage="Proposal"),
]


@pytest.mark.parametrize(
    ("text", "audit_id"),
    [
        ("undo my last change", 9),
        ("Undo the Zephyr stage change", 8),
        ("please undo the kestrel amount", 7),
        ("I'd like to undo the activity I logged", 9),
        ("Undo my change recorded as audit record 6", 6),
    ],
)
def test_a_rep_who_asks_to_undo_gets_the_newest_undoable_change_their_words_name(text: str, audit_id: int):
    spec = parse_undo(text)
    assert spec is not None
    chosen = (
        spec.audit_id if spec.audit_id is not None else (_pick(HISTORY, spec.words) or {}).get("audit_id")
    )
    assert chosen == audit_id


def test_a_change_already_undone_or_not_named_is_not_picked_and_other_requests_are_not_undos():
    spec = parse_undo("undo the kestrel renewal stage change")
    assert spec is not None
    # The change it names best (the Kestrel renewal's stage) was undone already: not another one.
    assert _pick(HISTORY, spec.words) is None
    assert _pick(HISTORY, ("globex",)) is None
    assert _pick([], ()) is None
    for text in ("what did I change on the kestrel pilot?", "log a call with Zephyr", "my pipeline"):
        assert parse_undo(text) is None, text
