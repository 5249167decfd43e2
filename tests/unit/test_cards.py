"""Adaptive Cards: valid for the official renderer, safe for Teams mobile, and saying the right things."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any, get_args
from zoneinfo import ZoneInfo

import pytest

from bot.cards import (
    ALLOWED_ACTIONS,
    ALLOWED_ELEMENTS,
    APPROVALS_COMMANDS,
    APPROVALS_SHOWN,
    EDITABLE_FIELDS,
    NOT_SENT_NOTICE,
    SNOOZE_INPUT_ID,
    WELCOME_COMMANDS,
    Outcome,
    WaitingProposal,
    answer_card,
    approval_card,
    approvals_card,
    brief_card,
    brief_follow_up_request,
    brief_log_request,
    card_element_id,
    decline_suggestion_data,
    delegations_card,
    digest_card,
    digest_feedback_card,
    help_card,
    moved_card,
    notice_card,
    outcome_card,
    suggestion_block,
    suggestion_request,
    welcome_card,
)
from copilot.briefs.compose import AccountReads, compose_brief
from copilot.briefs.digest import CustomerMeeting, DigestReads, compose_digest
from copilot.briefs.digest import WaitingProposal as DigestWaiting
from copilot.briefs.suggestions import close_date_passed
from copilot.briefs.types import DIGEST_TITLES, SECTION_TITLES, Meeting
from copilot.delegation import Delegation, end_of_day
from copilot.proposals import ProposalRecord
from copilot.tools.schemas import STAGES, ActivityType, EmailTone
from copilot.turns import Proposal, args_digest
from copilot.writes import title
from tests.support.adaptive_cards import all_text, elements, inputs, submit_actions, validate_cards, walk

THREAD = "thr-7f3a"


def proposal(
    tool: str, args: dict[str, Any], record: ProposalRecord | None, call: str = "call_1"
) -> Proposal:
    return Proposal(
        tool_call_id=call, tool=tool, args=args, record=record, description="", interrupt_id=f"int-{call}"
    )


UPDATE = proposal(
    "update_opportunity",
    {
        "opportunity_id": "opp-acme-renewal",
        "stage": "Negotiation",
        "close_date": "2026-12-15",
        "amount": 120000.0,
        "next_step": "Send the revised quote",
    },
    {
        "tool": "update_opportunity",
        "target": {"type": "opportunity", "id": "opp-acme-renewal", "name": "Renewal 2027"},
        "version": 4,
        "current": {
            "name": "Renewal 2027",
            "stage": "Proposal",
            "close_date": "2026-11-30",
            "amount": 95000.0,
            "currency": "USD",
            "next_step": None,
            "probability": 50,
        },
        "proposed": {},
        "error": None,
    },
)
LOG = proposal(
    "log_activity",
    {
        "type": "call",
        "subject": "Pricing call",
        "notes": "Discussed pricing.\nNext step: send proposal.",
        "account_id": "acc-acme",
    },
    {
        "tool": "log_activity",
        "target": {"type": "account", "id": "acc-acme", "name": "Acme Corporation"},
        "version": 2,
        "current": {},
        "error": None,
    },
    call="call_2",
)
DRAFT = proposal(
    "draft_followup_email",
    {"contact_id": "con-maria", "subject": "Pricing follow-up", "body": "Thanks for the call today."},
    {
        "tool": "draft_followup_email",
        "target": {"type": "contact", "id": "con-maria", "name": "Maria Garcia"},
        "version": None,
        "current": {"title": "VP Procurement"},
        "preview": "Hi Maria,\n\nThanks for the call today.\n\nBest regards,\nAlex Wilber",
        "error": None,
    },
    call="call_3",
)
PREFS = proposal(
    "update_preferences",
    {"email_tone": "formal", "followup_cadence_days": 5},
    {
        "tool": "update_preferences",
        "target": {"type": "preferences", "id": None, "name": "Your preferences"},
        "version": None,
        "current": {"email_tone": "friendly", "signature": None, "followup_cadence_days": 3},
        "error": None,
    },
    call="call_4",
)
UNREADABLE = proposal(
    "update_opportunity",
    {"opportunity_id": "opp-gone", "stage": "Closed Lost"},
    {
        "tool": "update_opportunity",
        "target": {"type": "opportunity", "id": "opp-gone", "name": ""},
        "version": None,
        "current": {},
        "error": {"code": "not_found", "message": "opportunity opp-gone was not found"},
    },
    call="call_5",
)
NO_RECORD = proposal(
    "log_activity", {"type": "task", "subject": "Ping", "account_id": "acc-x"}, None, "call_6"
)

PROPOSALS = {"update": UPDATE, "log": LOG, "draft": DRAFT, "prefs": PREFS, "unreadable": UNREADABLE}
PROPOSALS["no_record"] = NO_RECORD
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
OUTCOME_DETAILS: dict[str, dict[str, Any]] = {
    "approved": {"audit_id": 42, "args": {**UPDATE.args, "amount": 125000.0}},
    "rejected": {"reason": "wrong opportunity"},
    "conflict": {
        "status": "conflict",
        "current": {
            "id": "opp-acme-renewal",
            "owner_id": "rep-diego",
            "stage": "Closed Won",
            "close_date": "2026-10-01",
            "amount": 95000.0,
            "currency": "USD",
            "version": 5,
        },
    },
    "failed": {"message": "The CRM refused the change: amount too large."},
    "already_decided": {},
}


def all_cards() -> dict[str, dict[str, Any]]:
    cards = {f"approval:{name}": approval_card(p, thread_id=THREAD) for name, p in PROPOSALS.items()}
    for view in ("edit", "reject"):
        for name, p in PROPOSALS.items():
            cards[f"approval-{view}:{name}"] = approval_card(p, thread_id=THREAD, view=view)
    for outcome in OUTCOMES:
        cards[f"outcome:{outcome}"] = outcome_card(UPDATE, outcome, detail=OUTCOME_DETAILS[outcome])
    cards["outcome:approved-from-result"] = outcome_card(
        UPDATE,
        "approved",
        detail={
            "status": "done",
            "audit_id": 44,
            "opportunity": {**UPDATE.args, "id": "opp-acme-renewal", "amount": 130000.0, "version": 5},
        },
    )
    cards["outcome:approved-draft"] = outcome_card(DRAFT, "approved", detail={"audit_id": 43})
    cards["answer:linked"] = answer_card(
        "Acme Corporation [acc-acme] has one open deal:\n\n- Renewal 2027 [opp-acme-renewal], **Negotiation**",
        ["acc-acme", "opp-acme-renewal"],
        record_url_template="https://crm.example.com/records/{id}",
    )
    cards["answer:plain"] = answer_card("No open opportunities.", [])
    cards["welcome"] = welcome_card()
    cards["help"] = help_card()
    cards["notice"] = notice_card("Something went wrong", "Please try again.", correlation_id="corr-123")
    cards["moved"] = moved_card(UPDATE)
    cards["approvals:some"] = approvals_card(WAITING, now=NOW)
    cards["approvals:none"] = approvals_card([], now=NOW)
    cards["approval:update-de"] = approval_card(UPDATE, thread_id=THREAD, locale="de-DE")
    cards["approvals:delegated"] = approvals_card(
        [WaitingProposal(THREAD, PROPOSALS["update"], NOW, on_behalf_of="Alex Wilber")], now=NOW
    )
    cards["delegations:some"] = delegations_card(
        [GRANT], [HELD], notice="Megan Bowen may now decide your proposals"
    )
    cards["delegations:none"] = delegations_card([], [])
    cards["brief:full"] = brief_card(
        BRIEF,
        now=MEETING_STARTED,
        record_url_template="https://crm.example.com/records/{id}",
        documents={"kb-proposal-1": ("Proposal stage playbook", "https://kb.example.com/proposal")},
    )
    cards["brief:sparse"] = brief_card(SPARSE_BRIEF, now=MEETING_STARTED, locale="de-DE")
    cards["brief:suggested"] = brief_card(SUGGESTED_BRIEF, now=MEETING_STARTED)
    cards["brief:ahead"] = brief_card(BRIEF, now=MEETING.start - dt.timedelta(hours=1))
    cards["digest:full"] = digest_card(DIGEST, record_url_template="https://crm.example.com/records/{id}")
    cards["digest:empty"] = digest_card(EMPTY_DIGEST)
    cards["digest-feedback:not_useful"] = digest_feedback_card("not_useful", (), None)
    cards["digest-feedback:snooze"] = digest_feedback_card("snooze", ("opp-1",), dt.date(2026, 12, 10))
    return cards


MEETING = Meeting(
    id="evt-acme-review",
    subject="Renewal review",
    start=dt.datetime(2026, 12, 3, 15, tzinfo=dt.UTC),
    end=dt.datetime(2026, 12, 3, 15, 45, tzinfo=dt.UTC),
    is_online=True,
)
MEETING_STARTED = MEETING.start + dt.timedelta(minutes=5)
BRIEF = compose_brief(
    MEETING,
    [
        AccountReads(
            account={"id": "acc-acme", "name": "Acme Corporation", "industry": "Manufacturing"},
            contacts=[{"id": "con-maria", "name": "Maria Gonzalez", "title": "VP Operations"}],
            opportunities=[
                {
                    "id": "opp-acme-renewal",
                    "name": "Renewal 2027",
                    "stage": "Proposal",
                    "amount": 120000.0,
                    "currency": "USD",
                    "close_date": "2026-12-15",
                    "next_step": "Send the revised quote",
                }
            ],
            activities=[
                {
                    "id": "act-call-1",
                    "type": "call",
                    "subject": "Pricing call",
                    "occurred_at": "2026-11-30T10:00:00Z",
                }
            ],
            playbooks={
                "Proposal": {
                    "id": "kb-proposal-1",
                    "title": "Proposal stage playbook",
                    "snippet": "- Present live",
                }
            },
        )
    ],
    2,
    [],
)
SPARSE_BRIEF = compose_brief(
    MEETING,
    [
        AccountReads(
            account={"id": "acc-fab", "name": "Fabrikam"},
            contacts=[],
            opportunities=[],
            activities=[],
            playbooks={},
        )
    ],
    0,
    [],
)

OVERDUE = {
    "id": "opp-acme-late",
    "name": "Acme Corporation — Rollout",
    "stage": "Proposal",
    "close_date": "2026-11-27",
    "version": 4,
    "owner": {"id": "u-alex", "name": "Alex Wilber"},
}
SUGGESTIONS = close_date_passed([OVERDUE], dt.date(2026, 12, 3))
SUGGESTED_BRIEF = compose_brief(
    MEETING,
    [
        AccountReads(
            account={"id": "acc-acme", "name": "Acme Corporation"},
            contacts=[],
            opportunities=[OVERDUE],
            activities=[],
            playbooks={},
        )
    ],
    0,
    [],
    SUGGESTIONS,
)

DIGEST_AT = dt.datetime(2026, 12, 3, 15, 30, tzinfo=dt.UTC)
DIGEST = compose_digest(
    "alex@contoso.example",
    DIGEST_AT,
    ZoneInfo("America/Los_Angeles"),
    DigestReads(
        meetings=[
            CustomerMeeting(
                MEETING,
                [
                    {
                        "id": "con-maria",
                        "name": "Maria Gonzalez",
                        "title": "VP Operations",
                        "account_id": "acc-acme",
                    }
                ],
                {"acc-acme": {"id": "acc-acme", "name": "Acme Corporation"}},
            )
        ],
        closing_quiet=[
            {"id": "opp-quiet", "name": "Harbor — Add-on", "stage": "Proposal", "close_date": "2026-12-14"}
        ],
        overdue=[
            {
                "id": "opp-late",
                "name": "Granite — Renewal",
                "stage": "Prospecting",
                "close_date": "2026-11-27",
                "next_step": "Schedule a deep dive",
            }
        ],
        waiting=[
            DigestWaiting(
                tool_call_id="call_1",
                tool="update_opportunity",
                target={"id": "opp-acme-renewal", "name": "Renewal 2027"},
                proposed_at="2026-12-02T10:00:00Z",
            )
        ],
    ),
    2,
    [],
)
EMPTY_DIGEST = compose_digest("alex@contoso.example", DIGEST_AT, dt.UTC, DigestReads((), (), (), ()), 0, [])


NOW = dt.datetime(2026, 12, 1, 15, 0, tzinfo=dt.UTC)
GRANT = Delegation(
    7, "t-1", "aad-alex", "Alex Wilber", "aad-megan", "Megan Bowen", NOW, end_of_day(dt.date(2026, 12, 24))
)
HELD = Delegation(
    8, "t-1", "aad-nestor", "Nestor Wilke", "aad-alex", "Alex Wilber", NOW, end_of_day(dt.date(2026, 12, 31))
)
WAITING = [
    WaitingProposal("thr-old", PROPOSALS["log"], NOW - dt.timedelta(hours=3)),
    WaitingProposal(THREAD, PROPOSALS["update"], NOW - dt.timedelta(minutes=5)),
]


CARDS = all_cards()


@pytest.fixture(scope="module")
def validation() -> dict[str, dict[str, list[dict[str, str]]]]:
    names = list(CARDS)
    return dict(zip(names, validate_cards([CARDS[n] for n in names]), strict=True))


def approval(name: str) -> dict[str, Any]:
    return CARDS[f"approval:{name}"]


def editing(name: str) -> dict[str, Any]:
    """The approval card with its Edit panel open."""
    return CARDS[f"approval-edit:{name}"]


def rejecting(name: str) -> dict[str, Any]:
    """The approval card with its Reject panel open."""
    return CARDS[f"approval-reject:{name}"]


def decision_buttons(card: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in submit_actions(card) if a["data"].get("copilot") == "decision"]


def input_by_id(card: dict[str, Any], input_id: str) -> dict[str, Any]:
    matches = [i for i in inputs(card) if i.get("id") == input_id]
    assert len(matches) == 1, f"{input_id}: {matches}"
    return matches[0]


# --- the official validator ---------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CARDS))
def test_card_passes_the_official_adaptive_cards_validator(name: str, validation):
    assert validation[name] == {"errors": [], "warnings": []}


def test_the_validator_reports_what_is_wrong_with_a_broken_card():
    broken = {
        "type": "AdaptiveCard",
        "version": "1.6",
        "body": [
            {"type": "Fancy"},
            {"type": "Input.Text", "id": "a", "isRequired": True},
            {"type": "Input.Text", "id": "a", "label": "Again"},
        ],
    }
    [result] = validate_cards([broken])
    error_events = {e["event"] for e in result["errors"]}
    assert {"UnsupportedCardVersion", "DuplicateId", "RequiredInputsShouldHaveErrorMessage"} <= error_events
    assert [w["event"] for w in result["warnings"]] == ["UnknownElementType"]


# --- Teams mobile rules ---------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CARDS))
def test_card_targets_schema_1_5(name: str):
    assert CARDS[name]["type"] == "AdaptiveCard"
    assert CARDS[name]["version"] == "1.5"


@pytest.mark.parametrize("name", list(CARDS))
def test_card_leaves_its_width_to_teams(name: str):
    # msteams.width "Full" is flagged under every card by the Agents Playground.
    assert "width" not in CARDS[name].get("msteams", {})


@pytest.mark.parametrize("name", list(CARDS))
def test_card_uses_only_elements_and_actions_that_render_on_teams_mobile(name: str):
    used = {node["type"] for node in elements(CARDS[name])}
    actions = {t for t in used if t.startswith("Action.")}
    assert actions <= ALLOWED_ACTIONS
    assert used - actions <= ALLOWED_ELEMENTS
    assert "Action.Execute" not in used
    assert "Table" not in used


def test_allowed_lists_exclude_execute_and_table():
    assert "Action.Execute" not in ALLOWED_ACTIONS
    assert "Table" not in ALLOWED_ELEMENTS


@pytest.mark.parametrize("name", list(CARDS))
def test_every_input_has_its_own_id_and_a_label(name: str):
    ids = [i.get("id") for i in inputs(CARDS[name])]
    assert all(ids)
    assert len(ids) == len(set(ids))
    assert all(i.get("label") for i in inputs(CARDS[name]))


@pytest.mark.parametrize("name", list(CARDS))
def test_every_text_block_wraps(name: str):
    blocks = [n for n in elements(CARDS[name]) if n["type"] == "TextBlock"]
    assert blocks
    assert all(b.get("wrap") is True for b in blocks)


@pytest.mark.parametrize("name", list(CARDS))
def test_no_card_lays_out_more_than_two_columns(name: str):
    for node in elements(CARDS[name]):
        if node["type"] == "ColumnSet":
            assert len(node["columns"]) <= 2


@pytest.mark.parametrize("name", list(PROPOSALS))
def test_approval_card_has_exactly_one_top_level_approve_and_no_approve_all(name: str):
    card = approval(name)
    top = [a for a in card["actions"] if a["type"] == "Action.Submit" and a["data"]["copilot"] == "decision"]
    assert [a["data"]["action"] for a in top] == ["approve"]
    assert top[0]["style"] == "positive"
    for action in elements(card):
        if action["type"].startswith("Action."):
            assert "all" not in action.get("title", "").lower().split()
            assert "approve all" not in action.get("title", "").lower()


@pytest.mark.parametrize("name", list(PROPOSALS))
def test_edit_and_reject_open_panels_the_bot_keeps_on_the_card_itself(name: str):
    prop = PROPOSALS[name]
    card = approval(name)
    views = {a["title"]: a for a in card["actions"] if a["data"].get("copilot") == "view"}
    assert set(views) == {"Edit…", "Reject…"}
    for button, view in (("Edit…", "edit"), ("Reject…", "reject")):
        assert views[button]["type"] == "Action.Submit"
        assert views[button]["associatedInputs"] == "none"
        assert views[button]["data"] == {
            "copilot": "view",
            "v": 1,
            "thread_id": THREAD,
            "tool_call_id": prop.tool_call_id,
            "view": view,
        }
    assert not [a for a in elements(card) if a["type"] == "Action.ShowCard"], (
        "no client-side panel to collapse"
    )
    assert not inputs(card)
    edit = editing(name)
    assert [(a["title"], a["data"].get("action") or a["data"].get("view")) for a in edit["actions"]] == [
        ("Edit and approve", "edit"),
        ("Back", "decide"),
    ]
    reject = rejecting(name)
    assert [(a["title"], a["data"].get("action") or a["data"].get("view")) for a in reject["actions"]] == [
        ("Reject", "reject"),
        ("Back", "decide"),
    ]
    assert [i["id"] for i in inputs(reject)] == ["reject.reason"]


def test_an_open_panel_still_shows_the_proposal_next_to_the_current_values():
    edit = editing("update")
    assert {"title": "Proposed", "value": "Negotiation"} in fact_pairs(edit)
    assert edit["body"][0]["id"] == card_element_id(UPDATE.tool_call_id)


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_outcome_card_has_no_actions_unless_it_offers_undo(outcome: str):
    card = CARDS[f"outcome:{outcome}"]
    assert "actions" not in card
    assert not [n for n in elements(card) if n["type"].startswith("Action.") or n["type"] == "ActionSet"]
    assert not inputs(card)


# --- approval card contents -----------------------------------------------------------------


def test_approval_card_names_the_tool_and_the_record_by_name_without_its_id_or_version():
    text = all_text(approval("update"))
    assert title("update_opportunity") in text
    assert "Renewal 2027" in text
    # Internals stay in the state, the card's data and the audit log, not in what a rep reads.
    assert "opp-acme-renewal" not in text
    assert "version" not in text.lower()


def fact_pairs(card: dict[str, Any]) -> list[dict[str, str]]:
    return [fact for n in elements(card) if n["type"] == "FactSet" for fact in n["facts"]]


def test_update_opportunity_card_shows_current_next_to_proposed_values():
    card = approval("update")
    blocks = {
        c["items"][0]["text"]: {f["title"]: f["value"] for f in c["items"][1]["facts"]}
        for c in card["body"]
        if c["type"] == "Container" and len(c.get("items", [])) == 2 and c["items"][1]["type"] == "FactSet"
    }
    assert blocks["Stage"] == {"Current": "Proposal", "Proposed": "Negotiation"}
    assert blocks["Close date"] == {"Current": "Nov 30, 2026", "Proposed": "Dec 15, 2026"}
    assert blocks["Amount"] == {"Current": "95,000 USD", "Proposed": "120,000 USD"}
    assert blocks["Next step"] == {"Current": "—", "Proposed": "Send the revised quote"}
    assert "Opportunity" not in blocks  # the target is in the header, not a field to change


def test_preferences_card_shows_current_next_to_proposed_preferences():
    facts = fact_pairs(approval("prefs"))
    assert {"title": "Current", "value": "friendly"} in facts
    assert {"title": "Proposed", "value": "formal"} in facts
    assert {"title": "Current", "value": "3"} in facts
    assert {"title": "Proposed", "value": "5"} in facts


def test_log_activity_card_lists_the_new_activity_and_its_notes_line_by_line():
    card = approval("log")
    assert {"title": "Type", "value": "call"} in fact_pairs(card)
    assert {"title": "Subject", "value": "Pricing call"} in fact_pairs(card)
    texts = [n["text"] for n in elements(card) if n["type"] == "TextBlock"]
    assert "Discussed pricing." in texts
    assert "Next step: send proposal." in texts
    shown = [f["value"] for f in fact_pairs(card)]
    assert "Acme Corporation" in shown, "the account by its name"
    assert "acc-acme" not in shown


def test_approval_card_warns_when_the_record_could_not_be_read():
    card = approval("unreadable")
    warnings = [c for c in card["body"] if c["type"] == "Container" and c.get("style") == "attention"]
    assert len(warnings) == 1
    assert "opportunity opp-gone was not found" in all_text(warnings[0])
    assert "could not be read" in all_text(approval("no_record"))
    assert not [c for c in approval("update")["body"] if c.get("style") == "attention"]


def test_draft_card_shows_the_preview_and_says_it_will_not_be_sent():
    card = approval("draft")
    text = all_text(card)
    for line in ("Hi Maria,", "Thanks for the call today.", "Best regards,", "Alex Wilber"):
        assert line in text
    assert NOT_SENT_NOTICE in text
    assert "will NOT be sent" in text
    assert "To: Maria Garcia (VP Procurement)" in text
    assert "con-maria" not in text
    assert card["actions"][0]["title"] == "Save to Outlook drafts"


@pytest.mark.parametrize("name", list(CARDS))
def test_no_action_on_any_card_sends_anything(name: str):
    for node in elements(CARDS[name]):
        if node["type"].startswith("Action."):
            assert not re.search(r"\bsend\b", node.get("title", ""), re.IGNORECASE), node["title"]


def test_edit_inputs_are_namespaced_and_prefilled_with_the_proposed_values():
    card = editing("update")
    assert [i["id"] for i in inputs(card) if i["id"].startswith("edit.")] == [
        f"edit.{f}" for f in EDITABLE_FIELDS["update_opportunity"]
    ]
    assert input_by_id(card, "edit.stage")["value"] == "Negotiation"
    assert input_by_id(card, "edit.close_date")["value"] == "2026-12-15"
    assert input_by_id(card, "edit.amount")["value"] == 120000.0
    assert input_by_id(card, "edit.next_step")["value"] == "Send the revised quote"


def test_stage_is_chosen_from_every_stage():
    stage = input_by_id(editing("update"), "edit.stage")
    assert stage["type"] == "Input.ChoiceSet"
    assert [c["value"] for c in stage["choices"]] == list(STAGES)
    assert stage["style"] == "compact"


def test_close_date_is_edited_with_a_date_input_and_amount_with_a_non_negative_number():
    card = editing("update")
    assert input_by_id(card, "edit.close_date")["type"] == "Input.Date"
    amount = input_by_id(card, "edit.amount")
    assert amount["type"] == "Input.Number"
    assert amount["min"] == 0
    assert input_by_id(card, "edit.next_step")["type"] == "Input.Text"


def test_activity_type_is_a_choice_and_notes_a_multiline_text():
    card = editing("log")
    kind = input_by_id(card, "edit.type")
    assert kind["type"] == "Input.ChoiceSet"
    assert [c["value"] for c in kind["choices"]] == list(get_args(ActivityType))
    assert kind["value"] == "call"
    assert kind["isRequired"] is True
    assert kind["errorMessage"]
    notes = input_by_id(card, "edit.notes")
    assert notes["type"] == "Input.Text"
    assert notes["isMultiline"] is True
    assert notes["value"] == LOG.args["notes"]
    assert input_by_id(card, "edit.subject")["isRequired"] is True


def test_draft_edit_offers_subject_and_a_multiline_body():
    card = editing("draft")
    assert [i["id"] for i in inputs(card) if i["id"].startswith("edit.")] == ["edit.subject", "edit.body"]
    body = input_by_id(card, "edit.body")
    assert body["isMultiline"] is True
    assert body["value"] == "Thanks for the call today."


def test_preference_edits_are_typed():
    card = editing("prefs")
    tone = input_by_id(card, "edit.email_tone")
    assert tone["type"] == "Input.ChoiceSet"
    assert [c["value"] for c in tone["choices"]] == list(get_args(EmailTone))
    assert tone["value"] == "formal"
    cadence = input_by_id(card, "edit.followup_cadence_days")
    assert (cadence["type"], cadence["min"], cadence["max"], cadence["value"]) == ("Input.Number", 1, 90, 5)
    assert input_by_id(card, "edit.signature")["isMultiline"] is True
    assert input_by_id(card, "edit.reset")["type"] == "Input.Toggle"


def test_reject_reason_is_required_with_an_error_message():
    reason = input_by_id(rejecting("update"), "reject.reason")
    assert reason["type"] == "Input.Text"
    assert reason["isRequired"] is True
    assert reason["errorMessage"]


@pytest.mark.parametrize("name", list(PROPOSALS))
def test_every_decision_button_carries_the_thread_the_proposal_and_an_args_digest(name: str):
    prop = PROPOSALS[name]
    actions = [a for card in (approval(name), editing(name), rejecting(name)) for a in decision_buttons(card)]
    assert sorted(a["data"]["action"] for a in actions) == ["approve", "edit", "reject"]
    for action in actions:
        assert action["data"] == {
            "copilot": "decision",
            "v": 1,
            "thread_id": THREAD,
            "tool_call_id": prop.tool_call_id,
            "tool": prop.tool,
            "action": action["data"]["action"],
            "args_digest": args_digest(prop.args),
        }


def test_args_digest_is_canonical_sha256_of_the_arguments():
    assert args_digest({"a": 1, "b": "x"}) == args_digest({"b": "x", "a": 1})
    assert args_digest({"a": 1}) != args_digest({"a": 2})
    assert re.fullmatch(r"[0-9a-f]{64}", args_digest(UPDATE.args))


# --- outcome, answer, welcome, notice -------------------------------------------------------


def element_ids(card: dict[str, Any]) -> list[str]:
    return [str(n["id"]) for n, _ in walk(card) if "id" in n]


def test_approved_outcome_keeps_the_audit_id_in_its_data_and_shows_the_final_values():
    card = CARDS["outcome:approved"]
    text = all_text(card)
    assert "✓" in text
    assert "42" not in text
    assert "audit record #" not in text.lower()
    assert "audit-42" in element_ids(card)
    assert "125,000 USD" in text  # the edited amount, not the proposed one
    assert "Negotiation" in text


def test_approved_outcome_shows_the_values_the_write_tool_reports_as_written():
    text = all_text(CARDS["outcome:approved-from-result"])
    assert "130,000 USD" in text
    assert "120,000 USD" not in text
    assert "audit-44" in element_ids(CARDS["outcome:approved-from-result"])


def test_approved_draft_outcome_says_saved_not_sent():
    text = all_text(CARDS["outcome:approved-draft"])
    assert "Outlook drafts" in text
    assert "not been sent" in text


def test_rejected_outcome_shows_the_reason():
    text = all_text(CARDS["outcome:rejected"])
    assert "Rejected" in text
    assert "wrong opportunity" in text


def test_conflict_outcome_shows_the_records_values_now_and_that_a_fresh_proposal_follows():
    card = CARDS["outcome:conflict"]
    assert {"title": "Stage", "value": "Closed Won"} in fact_pairs(card)
    assert {"title": "Close date", "value": "Oct 1, 2026"} in fact_pairs(card)
    assert "Version" not in [f["title"] for f in fact_pairs(card)]
    assert "rep-diego" not in all_text(card)  # only the fields the proposal is about
    assert "fresh proposal" in all_text(card)
    assert "nothing was written" in all_text(card)


def test_failed_and_already_decided_outcomes_say_what_happened():
    assert "amount too large" in all_text(CARDS["outcome:failed"])
    assert "already decided" in all_text(CARDS["outcome:already_decided"])


def test_times_on_approval_outcome_and_my_approvals_cards_are_in_the_reps_zone():
    call = proposal(
        "log_activity",
        {**LOG.args, "occurred_at": "2026-11-30T17:00:00Z"},
        LOG.record,
        call="call_at",
    )
    pacific = ZoneInfo("America/Los_Angeles")
    local = "9:00:00 AM America/Los_Angeles"  # 17:00 UTC (CLDR's narrow space before AM made plain)
    conflict = {"current": {"occurred_at": "2026-11-30T16:30:00Z", "subject": "Pricing call"}}
    waiting = [WaitingProposal(THREAD, call, NOW - dt.timedelta(minutes=5))]
    shown = {
        "approval": approval_card(call, thread_id=THREAD, zone=pacific),
        "approved": outcome_card(call, "approved", detail={"audit_id": 7}, zone=pacific),
        "my approvals": approvals_card(waiting, now=NOW, zone=pacific),
    }
    for name, card in shown.items():
        text = " ".join(all_text(card).split())
        assert local in text, name
        assert "UTC" not in text, name
    now = all_text(outcome_card(call, "conflict", detail=conflict, zone=pacific))
    assert "8:30:00\u202fAM America/Los_Angeles" in now
    assert "UTC" not in now
    utc = all_text(approval_card(call, thread_id=THREAD))
    assert "5:00:00\u202fPM UTC" in utc, "no zone known: UTC, and it says so"


def test_answer_card_links_each_cited_record_with_a_url_template():
    text = all_text(CARDS["answer:linked"])
    assert "Sources" in text
    assert "[acc-acme](https://crm.example.com/records/acc-acme)" in text
    assert "[opp-acme-renewal](https://crm.example.com/records/opp-acme-renewal)" in text
    assert "- Renewal 2027 [opp-acme-renewal], **Negotiation**" in text


def test_answer_card_lists_plain_ids_without_a_template_and_no_sources_without_citations():
    plain = answer_card("Acme [acc-acme].", ["acc-acme", "acc-acme"])
    assert plain["body"][-1]["items"][1]["text"] == "acc-acme"
    assert "Sources" not in all_text(CARDS["answer:plain"])


def test_welcome_card_explains_the_copilot_and_offers_example_commands():
    card = CARDS["welcome"]
    text = all_text(card)
    assert "live CRM data" in text
    assert "never send" in text
    assert "approve" in text
    commands = [a["data"] for a in card["actions"]]
    assert commands == [{"copilot": "command", "text": t} for t in WELCOME_COMMANDS]
    assert {"my pipeline", "my deals closing this quarter", "my preferences"} <= set(WELCOME_COMMANDS)
    assert all(a["type"] == "Action.Submit" for a in card["actions"])


def test_notice_card_shows_the_correlation_id():
    text = all_text(CARDS["notice"])
    assert "Something went wrong" in text
    assert "corr-123" in text


def test_walk_reaches_inputs_inside_show_cards():
    nested = {
        "type": "AdaptiveCard",
        "body": [{"type": "Input.Text", "id": "edit.subject", "label": "Subject"}],
    }
    card = {
        "type": "AdaptiveCard",
        "body": [{"type": "Input.Text", "id": "top", "label": "Top"}],
        "actions": [{"type": "Action.ShowCard", "title": "More", "card": nested}],
    }
    depths = {node.get("id"): depth for node, depth in walk(card) if "id" in node}
    assert depths == {"top": 0, "edit.subject": 1}


# --- internal ids, locale, "my approvals", moved cards ----------------------------------------


@pytest.mark.parametrize(
    "name", [n for n in CARDS if n.startswith(("approval:", "approval-", "outcome:")) or n == "moved"]
)
def test_no_card_shows_the_proposal_id_but_every_card_about_one_carries_it_as_data(name: str):
    card = CARDS[name]
    text = all_text(card)
    assert "call_" not in text
    assert "Proposal call" not in text
    assert "audit record" not in text.lower()
    assert card_element_id(card["body"][0]["id"].removeprefix("proposal-")) == card["body"][0]["id"]
    assert card["body"][0]["id"].startswith("proposal-call_")


def test_dates_on_a_card_are_in_the_reps_locale():
    german = fact_pairs(approval("update-de"))
    assert {"title": "Current", "value": "30.11.2026"} in german
    assert {"title": "Proposed", "value": "15.12.2026"} in german
    english = fact_pairs(approval("update"))
    assert {"title": "Proposed", "value": "Dec 15, 2026"} in english


def test_an_unknown_locale_falls_back_to_us_english():
    card = approval_card(UPDATE, thread_id=THREAD, locale="xx-not-a-locale")
    assert {"title": "Proposed", "value": "Dec 15, 2026"} in fact_pairs(card)


def test_my_approvals_lists_each_proposal_newest_first_with_record_fields_age_and_an_open_button():
    card = CARDS["approvals:some"]
    rows = [n for n in card["body"] if n.get("id", "").startswith("waiting-")]
    assert [r["id"] for r in rows] == [
        f"waiting-{UPDATE.tool_call_id}",
        f"waiting-{PROPOSALS['log'].tool_call_id}",
    ]
    first = all_text(rows[0])
    assert "Renewal 2027" in first
    assert "Negotiation" in first
    assert "Dec 15, 2026" in first
    assert "5 minutes ago" in first
    assert "3 hours ago" in all_text(rows[1])
    assert "2 proposals wait" in all_text(card)
    buttons = [a for a in submit_actions(card)]
    assert [b["title"] for b in buttons] == ["Open", "Open"]
    assert buttons[0]["data"] == {
        "copilot": "open_proposal",
        "v": 1,
        "thread_id": THREAD,
        "tool_call_id": UPDATE.tool_call_id,
    }


def test_my_approvals_never_decides_anything_itself():
    for name in ("approvals:some", "approvals:none"):
        datas = [a.get("data") or {} for a in submit_actions(CARDS[name])]
        assert all(d.get("copilot") != "decision" for d in datas)
        assert "approve all" not in all_text(CARDS[name]).lower()
        assert not inputs(CARDS[name])


def test_my_approvals_with_nothing_waiting_says_so():
    assert "Nothing waits for your decision" in all_text(CARDS["approvals:none"])


def test_my_approvals_shows_at_most_its_limit_and_counts_the_rest():
    many = [
        WaitingProposal(THREAD, UPDATE, NOW - dt.timedelta(minutes=i)) for i in range(APPROVALS_SHOWN + 3)
    ]
    card = approvals_card(many, now=NOW)
    assert len([a for a in submit_actions(card)]) == APPROVALS_SHOWN
    assert "3 older ones" in all_text(card)


def test_a_moved_card_has_no_buttons_and_says_where_to_decide():
    card = CARDS["moved"]
    assert not [n for n in elements(card) if n["type"].startswith("Action.") or n["type"] == "ActionSet"]
    assert "actions" not in card
    assert "shown again below" in all_text(card)


def test_the_welcome_card_offers_my_approvals():
    assert APPROVALS_COMMANDS[0] in WELCOME_COMMANDS
    titles = [a["title"] for a in CARDS["welcome"]["actions"]]
    assert "my approvals" in titles


# --- undo -----------------------------------------------------------------------------------

UNDO = proposal(
    "undo_write",
    {"audit_id": 42},
    {
        "tool": "undo_write",
        "target": {"type": "opportunity", "id": "opp-acme-renewal", "name": "Renewal 2027"},
        "version": 5,
        "current": {"stage": "Negotiation", "amount": 120000.0, "currency": "USD"},
        "restored": {"stage": "Proposal", "amount": 95000.0},
        "summary": "Put back the values this opportunity had before your change.",
        "proposed": {"audit_id": 42},
        "error": None,
    },
)


def test_an_approved_change_within_the_undo_window_offers_an_undo_button_naming_its_audit_id():
    from bot.card_submit import undo_audit_id
    from bot.cards import UNDO_KIND, undo_request

    card = outcome_card(UPDATE, "approved", detail={"audit_id": 42, "args": UPDATE.args}, undo=True)
    [button] = submit_actions(card)
    assert button["title"] == "Undo"
    assert button["data"] == {"copilot": UNDO_KIND, "audit_id": 42}
    assert undo_audit_id(button["data"]) == 42
    assert "42" in undo_request(42)
    assert undo_audit_id({"copilot": UNDO_KIND, "audit_id": "42; drop"}) is None
    assert [c["errors"] for c in validate_cards([card])] == [[]]
    # Not offered on a rejected or conflicted card, nor without an audit id.
    for kind, detail in (("rejected", {"reason": "no"}), ("conflict", {"current": {}}), ("approved", {})):
        assert "actions" not in outcome_card(UPDATE, kind, detail=detail, undo=True)  # type: ignore[arg-type]


def test_an_undo_approval_card_shows_current_next_to_restored_values_and_nothing_to_edit():
    card = approval_card(UNDO, thread_id=THREAD)
    assert [c["errors"] for c in validate_cards([card])] == [[]]
    pairs = fact_pairs(card)
    assert {"title": "Current", "value": "Negotiation"} in pairs
    assert {"title": "Restored", "value": "Proposal"} in pairs
    assert "Put back the values" in all_text(card)
    assert title("undo_write") in all_text(card)
    assert [a["title"] for a in card["actions"]] == ["Approve", "Reject…"]


def test_answer_card_shows_a_cited_document_by_its_title_linked_to_its_source_once_per_document():
    card = answer_card(
        "Renewal 2027 [opp-acme-renewal] is in Proposal. Present it live [kb-1a2b3c4d5e-2] [kb-1a2b3c4d5e-3].",
        ["opp-acme-renewal", "kb-1a2b3c4d5e-2", "kb-1a2b3c4d5e-3"],
        record_url_template="https://crm.example.com/records/{id}",
        documents={
            "kb-1a2b3c4d5e-2": (
                "Proposal stage playbook",
                "https://contoso.sharepoint.example/playbook-proposal.md",
            ),
            "kb-1a2b3c4d5e-3": (
                "Proposal stage playbook",
                "https://contoso.sharepoint.example/playbook-proposal.md",
            ),
        },
    )
    sources = card["body"][-1]["items"][1]["text"]
    assert sources == (
        "[opp-acme-renewal](https://crm.example.com/records/opp-acme-renewal)"
        " · [Proposal stage playbook](https://contoso.sharepoint.example/playbook-proposal.md)"
    )
    local = answer_card("See [kb-1]", ["kb-1"], documents={"kb-1": ("Guide [v2]", "file:///srv/guide.md")})
    assert local["body"][-1]["items"][1]["text"] == "Guide (v2)"  # no link a Teams client cannot open


# --- approval delegation ----------------------------------------------------------------------


def test_the_delegation_card_names_each_delegate_with_its_last_day_and_a_revoke_button():
    card = CARDS["delegations:some"]
    text = all_text(card)
    assert "Megan Bowen may now decide your proposals" in text
    assert "Until Dec 24, 2026" in text, "the last day of the window, not the instant after it"
    assert "Nestor Wilke" in text
    assert "Dec 31, 2026" in text
    [revoke] = [a for a in submit_actions(card) if a["title"] == "Revoke"]
    assert revoke["data"] == {"copilot": "revoke_delegation", "v": 1, "delegation_id": 7}


def test_my_approvals_says_whose_a_delegated_proposal_is():
    assert "For Alex Wilber" in all_text(CARDS["approvals:delegated"])
    assert "For " not in all_text(CARDS["approvals:some"])


# --- meeting prep briefs ---------------------------------------------------------------------------


def test_brief_card_shows_every_fact_with_its_citation_and_lists_every_cited_id_as_a_source():
    card = CARDS["brief:full"]
    text = all_text(card)
    for fact in (
        "Acme Corporation",
        "Maria Gonzalez, VP Operations",
        "Renewal 2027",
        "Pricing call",
        "Send the revised quote",
        "Present live",
    ):
        assert fact in text, fact
    assert [i.section for a in BRIEF.accounts for i in a.items] == [
        "account",
        "attendee",
        "deal",
        "activity",
        "next_step",
        "playbook",
    ]
    for item in BRIEF.accounts[0].items:
        assert any(f"- {item.text}" == n.get("text") for n in elements(card)), item.text
        assert all(f"[{c}]" in item.text for c in item.cited)
    sources = next(
        n for n in elements(card) if n.get("type") == "Container" and all_text(n).startswith("Sources")
    )
    for cited in BRIEF.citations:
        # A record by its id, a knowledge chunk by its document's title (as answers show them).
        assert cited in all_text(sources) or cited == "kb-proposal-1", cited
    assert "[acc-acme](https://crm.example.com/records/acc-acme)" in all_text(sources)
    assert "[Proposal stage playbook](https://kb.example.com/proposal)" in all_text(sources)
    assert "2 other external attendees" in text
    for heading in SECTION_TITLES.values():
        assert heading in text


def test_brief_card_says_when_a_section_has_nothing_on_record_and_shows_the_time_in_the_reps_locale():
    card = CARDS["brief:sparse"]
    text = all_text(card)
    assert text.count("None on record.") == 5
    assert "03.12.2026" in text
    assert "other external" not in text


def test_brief_buttons_send_the_chat_requests_that_propose_through_the_approval_card():
    buttons = submit_actions(CARDS["brief:full"])
    assert [b["title"] for b in buttons] == ["Log this meeting", "Draft follow-up"]
    assert [b["data"] for b in buttons] == [
        {"copilot": "command", "text": brief_log_request("Acme Corporation", "Renewal review")},
        {"copilot": "command", "text": brief_follow_up_request("Acme Corporation", "Renewal review")},
    ]
    assert buttons[0]["data"]["text"] == "log a meeting with Acme Corporation — Renewal review"


def test_a_brief_card_shows_the_meeting_time_in_the_reps_zone():
    pacific = compose_brief(
        MEETING,
        [AccountReads({"id": "acc-acme", "name": "Acme"}, [], [], [], {})],
        0,
        [],
        zone=ZoneInfo("America/Los_Angeles"),
    )
    text = all_text(brief_card(pacific, now=MEETING_STARTED))
    assert "7:00:00\u202fAM America/Los_Angeles" in text  # CLDR puts a narrow space before AM
    assert "UTC" not in text
    assert "3:00:00\u202fPM UTC" in all_text(CARDS["brief:full"]), "no zone known: UTC, and it says so"


def test_log_this_meeting_is_offered_only_once_the_meeting_has_started():
    ahead = CARDS["brief:ahead"]
    assert [b["title"] for b in submit_actions(ahead)] == ["Draft follow-up"]
    assert "Log this meeting" not in repr(ahead)
    at_start = brief_card(BRIEF, now=MEETING.start)
    assert [b["title"] for b in submit_actions(at_start)] == ["Log this meeting", "Draft follow-up"]


def test_a_suggestion_asks_for_its_change_in_chat_and_not_now_names_the_suggestion_at_its_version():
    [block] = suggestion_block(SUGGESTIONS)
    [suggestion] = SUGGESTIONS
    assert (
        "The close date of Acme Corporation — Rollout [opp-acme-late] passed 6 days ago: move it?"
        in all_text(block)
    )
    move, not_now = submit_actions(block)
    assert move["title"] == "Move the close date"
    assert move["data"] == {
        "copilot": "command",
        "text": "move the close date of Acme Corporation — Rollout (opp-acme-late) to 2026-12-17",
    }
    assert move["data"]["text"] == suggestion_request(suggestion)
    assert not_now["title"] == "Not now"
    assert not_now["data"] == decline_suggestion_data(suggestion)
    assert not_now["data"] == {
        "copilot": "decline_suggestion",
        "v": 1,
        "kind": "close_date_passed",
        "record_id": "opp-acme-late",
        "record_version": 4,
    }


def test_no_suggestions_no_section_and_the_brief_card_shows_its_suggestions_above_the_sources():
    assert suggestion_block(()) == []
    assert "Suggestions" not in all_text(CARDS["brief:full"])
    card = CARDS["brief:suggested"]
    titles = [n.get("text") for n in card["body"] if n.get("type") == "Container"]
    heads = [all_text(n).split("\n")[0] for n in card["body"] if n.get("type") == "Container"]
    assert heads[-2:] == ["Suggestions", "Sources"], titles
    assert "opp-acme-late" in all_text(card["body"][-1])
    # The brief's own buttons stay its card's actions; a suggestion's live beside it.
    assert [a["title"] for a in card["actions"]] == ["Log this meeting", "Draft follow-up"]


def test_brief_card_header_carries_the_meeting_id_as_its_element_id():
    assert CARDS["brief:full"]["body"][0]["id"] == "brief-evt-acme-review"


# --- the daily digest ---------------------------------------------------------------------------


def test_digest_card_shows_every_line_with_its_citations_and_every_cited_id_as_a_source():
    card = CARDS["digest:full"]
    text = all_text(card)
    assert [i.section for i in DIGEST.items] == ["meeting", "closing_quiet", "overdue", "waiting"]
    for item in DIGEST.items:
        assert any(f"- {item.text}" == n.get("text") for n in elements(card)), item.text
    for heading in DIGEST_TITLES.values():
        assert heading in text
    sources = next(
        n for n in elements(card) if n.get("type") == "Container" and all_text(n).startswith("Sources")
    )
    for cited in DIGEST.citations:
        assert f"[{cited}](https://crm.example.com/records/{cited})" in all_text(sources), cited
    assert "07:00–07:45 Renewal review" in text  # the meeting in the rep's zone (Los Angeles)
    assert "America/Los_Angeles" in text
    assert "2 other meetings" not in text
    assert "1 other meeting" in text
    assert CARDS["digest:full"]["body"][0]["id"] == "digest-2026-12-03"


@pytest.mark.parametrize("name", sorted(CARDS))
def test_no_card_shows_an_internal_tool_call_id(name: str):
    """Tool call ids (``call_…``) are the runner's: a card may carry them in a button's data, never
    in what the rep reads (text, Sources, choices)."""

    def seen(node: Any) -> Any:  # everything but the data buttons submit and the elements' ids
        if isinstance(node, dict):
            return {k: seen(v) for k, v in node.items() if k not in ("data", "id")}
        return [seen(v) for v in node] if isinstance(node, list) else node

    shown = json.dumps(seen(CARDS[name]))
    assert not re.search(r"\bcall_[0-9a-z]", shown), name


def test_digest_card_stacks_its_lines_for_phone_width_and_an_empty_day_says_none():
    assert "ColumnSet" not in {n["type"] for n in elements(CARDS["digest:full"])}
    assert all_text(CARDS["digest:empty"]).count("None.") == len(DIGEST_TITLES)
    assert [a["title"] for a in CARDS["digest:empty"]["actions"]] == ["Not useful"]


def test_digest_card_offers_not_useful_and_a_snooze_panel_choosing_among_its_lines_records():
    card = CARDS["digest:full"]
    not_useful, snooze = card["actions"]
    assert not_useful["title"] == "Not useful"
    assert not_useful["data"] == {
        "copilot": "digest_feedback",
        "v": 1,
        "kind": "not_useful",
        "day": "2026-12-03",
    }
    assert snooze["type"] == "Action.ShowCard"
    [choices] = [i for i in inputs(snooze["card"]) if i["type"] == "Input.ChoiceSet"]
    assert choices["id"] == SNOOZE_INPUT_ID
    assert choices["isMultiSelect"] is True
    assert [c["value"] for c in choices["choices"]] == [
        "acc-acme",
        "opp-quiet",
        "opp-late",
        "opp-acme-renewal",
    ]
    [submit] = snooze["card"]["actions"]
    assert submit["data"]["kind"] == "snooze"


def test_digest_feedback_cards_confirm_what_was_stored():
    assert "not useful" in all_text(CARDS["digest-feedback:not_useful"])
    snoozed = all_text(CARDS["digest-feedback:snooze"])
    assert "opp-1" in snoozed
    assert "2026-12-10" in snoozed


def test_the_sign_in_card_is_an_oauth_card_for_the_connection_with_teams_sso_token_exchange():
    from botbuilder.schema import OAuthCard

    from bot.cards import OAUTH_CARD_CONTENT_TYPE, SIGN_IN_FOR_BRIEFS, sign_in_card

    content = sign_in_card(
        connection_name="crm-copilot-sso", exchange_uri="api://bot.example/app", exchange_id="x1"
    )
    card = OAuthCard().deserialize(content)

    assert OAUTH_CARD_CONTENT_TYPE == "application/vnd.microsoft.card.oauth"
    assert card.connection_name == "crm-copilot-sso"
    # botbuilder types the resource as a plain object: Teams reads it as this JSON.
    assert card.token_exchange_resource == {"id": "x1", "uri": "api://bot.example/app"}
    assert [(b.type, b.title) for b in card.buttons] == [("signin", "Sign in")]
    assert card.text == SIGN_IN_FOR_BRIEFS
    # It serialises back to the very JSON built (nothing botbuilder would drop or rename).
    assert card.serialize() == content
