"""Teams AI message features (pure): the AI label, numbered citations, feedback, where they show."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from bot.ai_entities import (
    FEEDBACK_CHANNEL_DATA,
    MAX_CITATIONS,
    abstract,
    answer_style,
    client_platform,
    message_entity,
    number_citations,
)
from bot.feedback import MAX_COMMENT, Feedback, InvalidFeedback, parse_feedback
from bot.json_entity import JsonEntity
from copilot.citations import CitedRecord, cited_records
from tests.support.teams_ai_schema import assert_valid_ai_message, problems

TEMPLATE = "https://crm.example.com/records/{id}"
ACME = CitedRecord("acc-acme", "Acme Corporation", "account", ("Manufacturing", "Seattle"))
DEAL = CitedRecord("opp-7", "Acme — Expansion", "opportunity", ("Negotiation", "USD 120,000", "2026-12-20"))


def _message(text: str, entity: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "text": text, "entities": [entity], "channelData": dict(FEEDBACK_CHANNEL_DATA)}


def test_cited_record_ids_become_numbered_markers_in_order_of_first_mention():
    answer = "Acme Corporation [acc-acme] has one deal [opp-7]; see [acc-acme] again."
    numbered = number_citations(answer, ["acc-acme", "opp-7"], {"acc-acme": ACME, "opp-7": DEAL}, None)

    assert numbered.text == "Acme Corporation [1] has one deal [2]; see [1] again."
    assert [c["position"] for c in numbered.citations] == [1, 2]
    first = numbered.citations[0]["appearance"]
    assert first["name"] == "Acme Corporation"
    assert first["abstract"] == "Account · Manufacturing · Seattle"
    assert "url" not in first
    assert_valid_ai_message(_message(numbered.text, message_entity(numbered.citations)))


def test_each_citation_links_to_the_record_when_a_url_template_is_set():
    numbered = number_citations("Deal [opp-7].", ["opp-7"], {"opp-7": DEAL}, TEMPLATE)
    appearance = numbered.citations[0]["appearance"]
    assert appearance["url"] == "https://crm.example.com/records/opp-7"
    assert appearance["abstract"] == "Opportunity · Negotiation · USD 120,000 · 2026-12-20"
    assert_valid_ai_message(_message(numbered.text, message_entity(numbered.citations)))


def test_brackets_that_are_not_verified_citations_stay_as_written():
    numbered = number_citations("Acme [acc-acme] and [note] [opp-9].", ["acc-acme"], {"acc-acme": ACME}, None)
    assert numbered.text == "Acme [1] and [note] [opp-9]."
    assert len(numbered.citations) == 1


def test_a_record_no_tool_result_described_is_named_by_its_id_with_a_plain_abstract():
    numbered = number_citations("See [con-3].", ["con-3"], {}, None)
    appearance = numbered.citations[0]["appearance"]
    assert appearance == {"@type": "DigitalDocument", "name": "con-3", "abstract": "CRM record"}


def test_long_names_and_abstracts_are_clipped_to_teams_limits():
    long = CitedRecord("opp-1", "N" * 200, "opportunity", tuple(f"fact number {i}" for i in range(30)))
    numbered = number_citations("[opp-1]", ["opp-1"], {"opp-1": long}, None)
    appearance = numbered.citations[0]["appearance"]
    assert len(appearance["name"]) == 80
    assert appearance["name"].endswith("…")
    assert len(appearance["abstract"]) <= 160
    assert_valid_ai_message(_message(numbered.text, message_entity(numbered.citations)))


def test_an_answer_without_citations_still_carries_the_ai_label_alone():
    entity = message_entity()
    assert entity == {
        "type": "https://schema.org/Message",
        "@type": "Message",
        "@context": "https://schema.org",
        "additionalType": ["AIGeneratedContent"],
    }
    assert_valid_ai_message(_message("Your preferences: none set.", entity))


def test_the_schema_refuses_what_teams_refuses():
    numbered = number_citations("Acme [acc-acme].", ["acc-acme"], {"acc-acme": ACME}, None)
    good = _message(numbered.text, message_entity(numbered.citations))
    assert problems(good) == []
    two_roots = {**good, "entities": [message_entity(), message_entity()]}
    no_marker = {**good, "text": "Acme."}
    too_long = json.loads(json.dumps(good))
    too_long["entities"][0]["citation"][0]["appearance"]["name"] = "x" * 81
    wrong_type = json.loads(json.dumps(good))
    wrong_type["entities"][0]["citation"][0]["@type"] = "Citation"
    too_many = _message(
        " ".join(f"[{n}]" for n in range(1, 22)),
        message_entity([{**numbered.citations[0], "position": n} for n in range(1, 22)]),
    )
    for bad in (two_roots, no_marker, too_long, wrong_type, too_many):
        assert problems(bad), bad


@pytest.mark.parametrize(
    ("setting", "channel", "platform", "dev_mode", "cited", "expected"),
    [
        ("auto", "msteams", "Windows", False, 3, "entities"),
        ("auto", "msteams", "Web", False, 3, "entities"),
        ("auto", "msteams", None, False, 3, "entities"),
        ("auto", "msteams", "iOS", False, 3, "card"),
        ("auto", "msteams", "Android", False, 3, "card"),
        ("auto", "msteams", "Web", True, 3, "card"),  # local development: the Agents Playground
        ("auto", "webchat", "Web", False, 3, "card"),
        ("auto", "msteams", "Web", False, MAX_CITATIONS + 1, "card"),
        ("entities", "msteams", "Web", True, 3, "entities"),
        ("entities", "msteams", "Web", True, MAX_CITATIONS + 1, "card"),
        ("card", "msteams", "Windows", False, 3, "card"),
    ],
)
def test_sources_go_into_citations_only_where_the_teams_client_shows_them(
    setting: Any, channel: str, platform: str | None, dev_mode: bool, cited: int, expected: str
):
    assert (
        answer_style(setting, channel_id=channel, platform=platform, dev_mode=dev_mode, cited=cited)
        == expected
    )


def test_the_client_platform_is_read_from_the_client_info_entity_as_botbuilder_holds_it():
    from botbuilder.schema import Entity

    held = Entity().deserialize({"type": "clientInfo", "platform": "Android", "locale": "en-US"})
    assert client_platform([Entity(type="mention"), held]) == "Android"
    assert client_platform([{"type": "clientInfo", "platform": "Web"}]) == "Web"
    assert client_platform(None) is None


def test_an_entity_is_sent_with_every_property_not_just_its_type():
    entity = message_entity(number_citations("[acc-acme]", ["acc-acme"], {"acc-acme": ACME}, None).citations)
    assert JsonEntity(entity).serialize() == entity


def test_abstract_of_an_unknown_kind_says_crm_record():
    assert abstract(CitedRecord("x-1", "Thing")) == "CRM record"
    assert abstract(None) == "CRM record"


# --- the records behind the citations, from the run's tool results ------------------------------


def test_cited_records_are_named_and_typed_from_the_tool_results_without_contact_details():
    accounts = {
        "items": [
            {"id": "acc-acme", "name": "Acme Corporation", "industry": "Manufacturing", "city": "Seattle"}
        ]
    }
    contacts = {
        "items": [
            {
                "id": "con-1",
                "name": "Maria Gonzalez",
                "title": "VP Operations",
                "email": "maria@acme.example",
                "phone": "+1 206 555 0100",
                "account": {"id": "acc-acme", "name": "Acme Corporation"},
            }
        ]
    }
    deal = {
        "id": "opp-7",
        "name": "Acme — Expansion",
        "stage": "Negotiation",
        "amount": 120000,
        "currency": "USD",
        "account": {"id": "acc-acme", "name": "Acme Corporation"},
    }
    messages = [
        HumanMessage("summarise Acme"),
        AIMessage("", tool_calls=[{"name": "search_accounts", "args": {}, "id": "c1"}]),
        ToolMessage(json.dumps(accounts), tool_call_id="c1", name="search_accounts"),
        ToolMessage(json.dumps(contacts), tool_call_id="c2", name="list_contacts"),
        ToolMessage(json.dumps(deal), tool_call_id="c3", name="get_opportunity"),
        ToolMessage(
            json.dumps(
                {
                    "items": [
                        {
                            "id": "act-1",
                            "subject": "Pricing call",
                            "type": "call",
                            "occurred_at": "2026-11-29T10:00:00Z",
                        }
                    ]
                }
            ),
            tool_call_id="c4",
            name="list_activities",
        ),
    ]

    found = cited_records(messages, ["opp-7", "con-1", "acc-acme", "act-1", "acc-unseen"])

    assert list(found) == ["opp-7", "con-1", "acc-acme", "act-1"]
    assert found["act-1"] == CitedRecord("act-1", "Pricing call", "activity", ("call", "2026-11-29"))
    assert found["acc-acme"] == CitedRecord(
        "acc-acme", "Acme Corporation", "account", ("Manufacturing", "Seattle")
    )
    assert found["con-1"] == CitedRecord("con-1", "Maria Gonzalez", "contact", ("VP Operations",))
    assert found["opp-7"].kind == "opportunity"
    assert found["opp-7"].facts == ("Negotiation", "USD 120,000")
    assert "maria@" not in repr(found)
    assert "555" not in repr(found)


# --- feedback payloads ------------------------------------------------------------------------


def test_teams_feedback_with_a_comment_is_read():
    value = {
        "actionName": "feedback",
        "actionValue": {"reaction": "dislike", "feedback": json.dumps({"feedbackText": " Wrong deal. "})},
    }
    assert parse_feedback(value) == Feedback("dislike", "Wrong deal.")


def test_the_playgrounds_plain_text_comment_and_an_empty_one_are_read():
    assert parse_feedback(
        {"actionName": "feedback", "actionValue": {"reaction": "like", "feedback": "Great"}}
    ) == (Feedback("like", "Great"))
    assert parse_feedback(
        {"actionName": "feedback", "actionValue": {"reaction": "like", "feedback": ""}}
    ) == (Feedback("like", None))
    assert parse_feedback({"actionName": "feedback", "actionValue": {"reaction": "like"}}) == Feedback(
        "like", None
    )


@pytest.mark.parametrize(
    "value",
    [
        None,
        "thumbs down",
        {},
        {"actionName": "feedback"},
        {"actionName": "other", "actionValue": {"reaction": "like"}},
        {"actionName": "feedback", "actionValue": {"reaction": "love"}},
        {
            "actionName": "feedback",
            "actionValue": {"reaction": "like", "feedback": json.dumps({"feedbackText": 3})},
        },
        {"actionName": "feedback", "actionValue": {"reaction": "like", "feedback": "x" * (MAX_COMMENT + 1)}},
    ],
)
def test_a_payload_that_is_not_valid_feedback_is_refused_with_a_reason(value: Any):
    with pytest.raises(InvalidFeedback) as refused:
        parse_feedback(value)
    assert refused.value.message
