"""Card submissions: from what Teams sends back to the runner's decision, refusing anything stale or altered."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from bot.card_submit import (
    STALE_MESSAGE,
    CardSubmission,
    InvalidSubmission,
    args_digest,
    command_text,
    declined_suggestion,
    parse_digest_feedback,
    parse_submission,
    to_decision,
)
from bot.cards import SNOOZE_INPUT_ID, CardView, approval_card, decline_suggestion_data, welcome_card
from copilot.decisions import Edit, edited_args, parse_decisions
from copilot.errors import CopilotError
from copilot.proposals import ProposalRecord
from copilot.turns import Proposal
from tests.support.adaptive_cards import inputs as walk_inputs
from tests.support.adaptive_cards import teams_submit

THREAD = "thr-1"


def proposal(tool: str, args: dict[str, Any], call: str = "call_1") -> Proposal:
    record: ProposalRecord = {
        "tool": tool,
        "target": {"type": "x", "id": "rec-1", "name": "Rec"},
        "version": 1,
        "current": {},
    }
    return Proposal(
        tool_call_id=call, tool=tool, args=args, record=record, description="", interrupt_id="int-1"
    )


UPDATE = proposal(
    "update_opportunity",
    {
        "opportunity_id": "opp-acme-renewal",
        "stage": "Negotiation",
        "close_date": "2026-12-15",
        "amount": 100000,
    },
)
LOG = proposal(
    "log_activity",
    {"type": "call", "subject": "Pricing call", "notes": "Discussed pricing", "account_id": "acc-acme"},
    call="call_2",
)
PREFS = proposal("update_preferences", {"email_tone": "formal", "followup_cadence_days": 5}, call="call_3")
DRAFT = proposal(
    "draft_followup_email", {"contact_id": "con-maria", "subject": "Hi", "body": "Thanks!"}, call="call_4"
)


def submit(prop: Proposal, action: str, changes: dict[str, str] | None = None) -> dict[str, Any]:
    # Edit and Reject are pressed on the card with that panel open (the bot opened it).
    view: CardView = "edit" if action == "edit" else "reject" if action == "reject" else "decide"
    return teams_submit(approval_card(prop, thread_id=THREAD, view=view), action, changes)


def decide(prop: Proposal, action: str, changes: dict[str, str] | None = None) -> dict[str, Any]:
    return to_decision(parse_submission(submit(prop, action, changes)), prop)


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("prop", [UPDATE, LOG, PREFS, DRAFT], ids=lambda p: p.tool)
def test_approve_button_becomes_an_approve_decision(prop: Proposal):
    assert decide(prop, "approve") == {
        "tool_call_id": prop.tool_call_id,
        "digest": args_digest(prop.args),
        "type": "approve",
    }


def test_submission_keeps_the_thread_and_proposal_it_came_from():
    sub = parse_submission(submit(UPDATE, "approve"))
    assert (sub.thread_id, sub.tool_call_id, sub.tool, sub.action) == (
        THREAD,
        "call_1",
        "update_opportunity",
        "approve",
    )
    assert sub.args_digest == args_digest(UPDATE.args)


def test_edit_with_a_new_amount_sends_only_that_field_as_a_number():
    assert decide(UPDATE, "edit", {"edit.amount": "120000"}) == {
        "tool_call_id": "call_1",
        "digest": args_digest(UPDATE.args),
        "type": "edit",
        "args": {"amount": 120000.0},
    }


def test_edit_that_changes_nothing_is_an_approval():
    def approval(prop: Proposal) -> dict[str, Any]:
        return {"tool_call_id": prop.tool_call_id, "digest": args_digest(prop.args), "type": "approve"}

    assert decide(UPDATE, "edit") == approval(UPDATE)
    assert decide(LOG, "edit") == approval(LOG)
    assert decide(PREFS, "edit") == approval(PREFS)
    assert decide(DRAFT, "edit", {"edit.subject": "  Hi  "}) == approval(DRAFT)


def test_edit_of_stage_and_close_date_keeps_a_stage_name_and_an_iso_date():
    decision = decide(UPDATE, "edit", {"edit.stage": "Closed Won", "edit.close_date": "2027-01-31"})
    assert decision["args"] == {"stage": "Closed Won", "close_date": "2027-01-31"}


def test_edited_decision_is_accepted_and_validated_by_the_runner():
    decision = decide(UPDATE, "edit", {"edit.amount": "120000", "edit.next_step": "Call CFO"})
    [parsed] = parse_decisions([decision])
    assert isinstance(parsed, Edit)
    assert edited_args(UPDATE.tool, UPDATE.args, parsed) == {
        "opportunity_id": "opp-acme-renewal",
        "stage": "Negotiation",
        "close_date": "2026-12-15",
        "amount": 120000.0,
        "next_step": "Call CFO",
    }


def test_whole_number_preferences_arrive_as_integers_and_toggles_as_booleans():
    decision = decide(PREFS, "edit", {"edit.followup_cadence_days": "7", "edit.reset": "true"})
    assert decision["args"] == {"followup_cadence_days": 7, "reset": True}
    assert isinstance(decision["args"]["followup_cadence_days"], int)


def test_clearing_an_optional_field_clears_it():
    decision = decide(LOG, "edit", {"edit.notes": "", "edit.account_id": " "})
    assert decision["args"] == {"notes": "", "account_id": None}
    assert decide(UPDATE, "edit", {"edit.stage": ""})["args"] == {"stage": None}


def test_an_input_missing_from_the_submission_stays_as_proposed():
    value = submit(UPDATE, "edit", {"edit.amount": "150000"})
    del value["edit.stage"], value["edit.close_date"]
    assert to_decision(parse_submission(value), UPDATE)["args"] == {"amount": 150000.0}


def test_edits_of_fields_the_card_does_not_offer_are_ignored():
    value = submit(UPDATE, "edit", {"edit.opportunity_id": "opp-other", "edit.amount": "1"})
    assert to_decision(parse_submission(value), UPDATE)["args"] == {"amount": 1.0}


MOVE = Proposal(
    tool_call_id="call_5",
    tool="update_opportunity",
    args={"opportunity_id": "opp-acme-renewal", "close_date": "2026-12-15"},
    record={
        "tool": "update_opportunity",
        "target": {"type": "opportunity", "id": "opp-acme-renewal", "name": "Renewal 2027"},
        "version": 3,
        "current": {
            "stage": "Proposal",
            "close_date": "2026-11-30",
            "amount": 95000.0,
            "next_step": "Send quote",
        },
    },
    description="",
    interrupt_id="int-5",
)
"""A proposal that sets one field of a record whose other editable fields have values."""


def test_the_edit_panel_shows_the_records_current_value_of_a_field_the_proposal_leaves_alone():
    card = approval_card(MOVE, thread_id=THREAD, view="edit")
    values = {i["id"]: i.get("value") for i in walk_inputs(card)}
    assert values["edit.close_date"] == "2026-12-15"  # proposed
    assert values["edit.stage"] == "Proposal"  # the record's, as they are now
    assert values["edit.amount"] == 95000.0
    assert values["edit.next_step"] == "Send quote"


def test_a_current_value_left_as_shown_is_no_change_and_one_changed_or_cleared_is():
    assert decide(MOVE, "edit") == {
        "tool_call_id": "call_5",
        "digest": args_digest(MOVE.args),
        "type": "approve",
    }
    assert decide(MOVE, "edit", {"edit.amount": "95000"})["type"] == "approve"
    assert decide(MOVE, "edit", {"edit.amount": "99000"})["args"] == {"amount": 99000.0}
    assert decide(MOVE, "edit", {"edit.next_step": ""})["args"] == {"next_step": None}


def test_reject_with_a_reason_becomes_a_reject_decision():
    assert decide(LOG, "reject", {"reject.reason": "  wrong account "}) == {
        "tool_call_id": "call_2",
        "digest": args_digest(LOG.args),
        "type": "reject",
        "reason": "wrong account",
    }


def test_teams_added_keys_are_ignored():
    value = {**submit(UPDATE, "approve"), "msteams": {"x": 1}, "replyToId": "abc"}
    assert to_decision(parse_submission(value), UPDATE)["type"] == "approve"


# --- refusals ----------------------------------------------------------------------------------


def refused(value: Any, prop: Proposal = UPDATE) -> str:
    with pytest.raises(InvalidSubmission) as caught:
        to_decision(parse_submission(value), prop)
    return caught.value.message


def test_invalid_submission_is_a_copilot_error():
    assert issubclass(InvalidSubmission, CopilotError)
    assert InvalidSubmission.code == "invalid_submission"


def test_tampered_args_digest_is_refused():
    value = {**submit(UPDATE, "approve"), "args_digest": args_digest({**UPDATE.args, "amount": 1})}
    assert refused(value) == STALE_MESSAGE
    assert STALE_MESSAGE == "This card is out of date or was altered; nothing was changed."


def test_card_for_arguments_that_have_since_changed_is_refused():
    value = submit(UPDATE, "approve")
    newer = proposal(UPDATE.tool, {**UPDATE.args, "stage": "Closed Won"})
    assert refused(value, newer) == STALE_MESSAGE


def test_card_for_another_tool_is_refused():
    value = {**submit(UPDATE, "approve"), "tool": "log_activity"}
    assert refused(value) == STALE_MESSAGE


def test_card_for_another_proposal_is_refused():
    value = {**submit(UPDATE, "approve"), "tool_call_id": "call_99"}
    assert refused(value) == STALE_MESSAGE


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_reject_without_a_reason_is_refused(reason: str | None):
    value = submit(LOG, "reject")
    if reason is not None:
        value["reject.reason"] = reason
    assert "reason" in refused(value, LOG)


def test_a_reason_longer_than_the_runner_accepts_is_refused():
    assert "too long" in refused(submit(LOG, "reject", {"reject.reason": "x" * 1001}), LOG)


@pytest.mark.parametrize(
    "value",
    [None, "approve", ["x"], {}, {"copilot": "command", "text": "my pipeline"}, {"action": "approve"}],
)
def test_anything_but_a_decision_card_is_refused(value: Any):
    assert "isn't a decision" in refused(value)


@pytest.mark.parametrize(
    ("key", "bad", "words"),
    [
        ("thread_id", None, "conversation is missing"),
        ("tool_call_id", "", "proposal id is not valid"),
        ("action", "approve_all", "button is not valid"),
        ("args_digest", "abc", "fingerprint is not valid"),
        ("v", "1", "different version"),
        ("v", True, "different version"),
        ("v", 2, "different version"),
    ],
)
def test_missing_or_invalid_fields_are_refused_in_plain_words(key: str, bad: Any, words: str):
    value = submit(UPDATE, "approve")
    if bad is None:
        del value[key]
    else:
        value[key] = bad
    assert words in refused(value)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"edit.amount": "lots"}, "Amount must be a number"),
        ({"edit.amount": "nan"}, "Amount must be a number"),
        ({"edit.close_date": "next Friday"}, "Close date must be a date"),
        ({"edit.stage": "Won-ish"}, "Stage must be one of"),
    ],
)
def test_edits_that_cannot_be_typed_are_refused(changes: dict[str, str], words: str):
    assert words in refused(submit(UPDATE, "edit", changes))


def test_emptying_a_required_field_is_refused():
    assert "Subject can't be empty" in refused(submit(LOG, "edit", {"edit.subject": ""}), LOG)


def test_a_whole_number_field_refuses_fractions():
    assert "whole number" in refused(submit(PREFS, "edit", {"edit.followup_cadence_days": "2.5"}), PREFS)


# --- misc ----------------------------------------------------------------------------------------


def test_submission_model_collects_inputs_from_the_raw_dict():
    sub = CardSubmission.model_validate(submit(UPDATE, "edit", {"edit.amount": "5"}))
    assert sub.edits == {"stage": "Negotiation", "close_date": "2026-12-15", "amount": "5"}
    assert sub.reason is None


def test_command_buttons_give_their_text_and_decisions_do_not():
    [first, *_] = welcome_card()["actions"]
    assert command_text(first["data"]) == "my pipeline"
    assert command_text(submit(UPDATE, "approve")) is None
    assert command_text({"copilot": "command", "text": "  "}) is None


# --- a suggestion's "Not now" ------------------------------------------------------------------


def _suggestion() -> Any:
    from copilot.briefs.suggestions import close_date_passed

    deal = {"id": "opp-1", "name": "Deal", "close_date": "2026-11-01", "version": 3}
    [suggestion] = close_date_passed([deal], dt.date(2026, 12, 1))
    return suggestion


def test_not_now_is_read_back_as_the_suggestion_and_version_it_declines():
    data = {**decline_suggestion_data(_suggestion()), "teams_extra": "ignored"}
    declined = declined_suggestion(data)
    assert declined is not None
    assert (declined.kind, declined.record_id, declined.record_version) == ("close_date_passed", "opp-1", 3)


@pytest.mark.parametrize(
    "change",
    [
        {"v": 2},
        {"kind": "stage_stuck"},
        {"record_id": ""},
        {"record_version": "3"},
        {"record_version": True},
        {"record_version": 0},
        {"copilot": "command"},
    ],
)
def test_an_altered_or_foreign_not_now_is_not_read_as_a_decline(change: dict[str, Any]):
    assert declined_suggestion({**decline_suggestion_data(_suggestion()), **change}) is None


def test_not_now_data_without_a_record_version_is_not_read_as_a_decline():
    data = decline_suggestion_data(_suggestion())
    del data["record_version"]
    assert declined_suggestion(data) is None


# --- the digest's feedback buttons ----------------------------------------------------------------


def test_a_digest_not_useful_submission_parses_to_the_day_and_no_records():
    feedback = parse_digest_feedback(
        {"copilot": "digest_feedback", "v": 1, "kind": "not_useful", "day": "2026-12-03", "extra": "teams"}
    )
    assert (feedback.kind, feedback.day, feedback.records) == ("not_useful", dt.date(2026, 12, 3), ())


def test_a_snooze_submission_carries_the_picked_records_from_the_choice_set():
    feedback = parse_digest_feedback(
        {
            "copilot": "digest_feedback",
            "v": 1,
            "kind": "snooze",
            "day": "2026-12-03",
            SNOOZE_INPUT_ID: "opp-1,acc-2",
        }
    )
    assert feedback.records == ("opp-1", "acc-2")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"copilot": "digest_feedback", "v": 1, "kind": "snooze", "day": "2026-12-03"}, "Pick at least one"),
        (
            {"copilot": "digest_feedback", "v": 2, "kind": "not_useful", "day": "2026-12-03"},
            "different version",
        ),
        ({"copilot": "digest_feedback", "v": 1, "kind": "love_it", "day": "2026-12-03"}, "not valid"),
        ({"copilot": "digest_feedback", "v": 1, "kind": "not_useful", "day": "tomorrow"}, "not valid"),
        ({"copilot": "decision", "v": 1}, "isn't a digest"),
    ],
)
def test_a_broken_digest_feedback_submission_is_refused_and_nothing_is_stored(value, says):
    with pytest.raises(InvalidSubmission, match=says):
        parse_digest_feedback(value)
