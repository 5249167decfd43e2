"""The offline model's undo requests: which change a rep's words name, from recent_writes."""

from __future__ import annotations

from typing import Any

import pytest

from offline_model.intents import parse_undo
from offline_model.undo import _pick, candidates


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


def _draft(audit_id: int, subject: str, body: str) -> dict[str, Any]:
    return {
        "audit_id": audit_id,
        "tool": "draft_followup_email",
        "what": "Draft a follow-up email",
        "record": subject,
        "record_id": "con-sarah",
        "changes": {"contact_id": "con-sarah", "subject": subject, "body": body},
        "undoable": True,
    }


FLEET = {
    **_item(11, "update_opportunity", "Fleet expansion (Acme Corporation)", close_date="2027-01-15"),
    "record_id": "opp-acme-fleet",
}


def test_an_undo_is_resolved_by_record_and_field_never_by_words_in_a_changes_free_text():
    """ "the change I made to the Acme fleet expansion" names the deal, not a newer unsent draft
    whose text mentions the expansion."""
    history = [
        _draft(12, "Pricing follow-up", "Hi Sarah, about the Acme fleet expansion we discussed…"),
        FLEET,
    ]
    spec = parse_undo("undo the change I made to the Acme fleet expansion")
    assert spec is not None
    assert (_pick(history, spec.words) or {}).get("audit_id") == 11
    spec = parse_undo("undo the fleet expansion close date")
    assert spec is not None
    assert (_pick(history, spec.words) or {}).get("audit_id") == 11


def test_two_changes_that_match_equally_are_not_guessed_between_the_rep_is_asked_which():
    older = {
        **_item(10, "update_opportunity", "Fleet expansion (Acme Corporation)", stage="Proposal"),
        "record_id": "opp-acme-fleet",
    }
    history = [FLEET, older]
    spec = parse_undo("undo my Acme fleet expansion change")
    assert spec is not None
    assert _pick(history, spec.words) is None
    assert [c["audit_id"] for c in candidates(history, spec.words)] == [11, 10]  # newest first
    # Naming the field tells them apart.
    spec = parse_undo("undo the Acme fleet expansion stage change")
    assert spec is not None
    assert (_pick(history, spec.words) or {}).get("audit_id") == 10
