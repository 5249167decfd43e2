"""Contact emails and phone numbers are redacted before the model sees them; CRM data is not."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from copilot.citations import message_text
from copilot.middleware.pii import detect_phone_numbers, pii_middleware

EMAIL = "maria.garcia@acme.example"
PHONE = "+1 415-555-0133"
NO_RUNTIME: Any = None  # the PII hooks never touch the runtime


@pytest.mark.parametrize(
    "phone",
    [
        "+1 415-555-0133",
        "(206) 555 0199",
        "415.555.0100",
        "+44 20 7946 0958",
        "415-555-0100",
        "+1 (415) 555-0133",
        "+1-415-555-0133",
        "(415)555-0133",
        "+33 1 23 45 67 89",
    ],
)
def test_phone_numbers_in_common_shapes_are_found_exactly(phone: str):
    text = f"Maria's number is {phone}, call after 10."

    matches = detect_phone_numbers(text)

    assert [m["value"] for m in matches] == [phone]
    assert text[matches[0]["start"] : matches[0]["end"]] == phone
    assert matches[0]["type"] == "phone_number"


def test_several_phone_numbers_in_crm_json_are_all_found():
    text = (
        '{"items": [{"id": "con-0001", "phone": "+1 415-555-0133", "close_date": "2026-12-15"},'
        ' {"id": "con-0002", "phone": "(206) 555 0199", "amount": 150000}]}'
    )

    assert [m["value"] for m in detect_phone_numbers(text)] == ["+1 415-555-0133", "(206) 555 0199"]


@pytest.mark.parametrize(
    "text",
    [
        "closes 2026-12-15",
        "updated 2026-12-15T10:30:00Z",
        "updated 2026-12-15 10:30:00",
        "from 2026-01-13 to 2027-01-13",
        "amount 150,000",
        "amount 1,250,000.00",
        "amount 120000",
        '{"amount": 120000, "probability": 60}',
        "opportunity opp-0012",
        "records opp-0012 con-0001 acc-0042 opp-acme-renewal",
        "version 2.10.4",
        "v10.20.30.40",
        '{"version": 3, "stage": "Proposal"}',
        "12/15/2026",
        "Q3 2026 pipeline up 100%",
    ],
)
def test_dates_amounts_record_ids_and_versions_are_not_phone_numbers(text: str):
    assert detect_phone_numbers(text) == []


@pytest.mark.parametrize(
    ("text", "phone"),
    [
        ("Called her on 2026-12-15 (206) 555-0199", "(206) 555-0199"),
        ("call back at 12 415-555-0100", "415-555-0100"),
        ("FY 2026 (206) 555 0199", "(206) 555 0199"),
    ],
)
def test_a_phone_number_right_after_another_number_is_still_found(text: str, phone: str):
    assert [m["value"] for m in detect_phone_numbers(text)] == [phone]


# --- the middleware ---------------------------------------------------------------------------


def _middleware(pii_type: str) -> Any:
    [found] = [m for m in pii_middleware() if m.pii_type == pii_type]
    return found


def test_both_emails_and_phone_numbers_are_redacted_in_input_and_tool_results():
    chain = pii_middleware()

    assert sorted(m.pii_type for m in chain) == ["email", "phone_number"]
    for middleware in chain:
        assert middleware.strategy == "redact"
        assert middleware.apply_to_input
        assert middleware.apply_to_tool_results


def _state(tool_content: Any, question: str = "who is at acme?") -> Any:
    return {
        "messages": [
            HumanMessage(question, id="h1"),
            AIMessage(
                "",
                id="a1",
                tool_calls=[{"name": "list_contacts", "args": {"account_id": "acc-acme"}, "id": "call_1"}],
            ),
            ToolMessage(tool_content, tool_call_id="call_1", name="list_contacts", id="t1"),
        ]
    }


def _redacted(update: dict[str, Any] | None) -> list[BaseMessage]:
    assert update is not None, "the middleware found nothing to redact"
    messages: list[BaseMessage] = update["messages"]
    return messages


async def test_an_email_in_a_tool_result_with_content_blocks_is_redacted():
    blocks = [
        {"type": "text", "text": f'{{"id": "con-0001", "name": "Maria Garcia", "email": "{EMAIL}"}}'},
        {"type": "text", "text": "no contact data here"},
    ]
    state = _state(blocks)

    messages = _redacted(await _middleware("email").abefore_model(state, NO_RUNTIME))

    tool = messages[2]
    assert isinstance(tool, ToolMessage)
    assert tool.id == "t1"  # replaces the original in the checkpointed state
    assert tool.tool_call_id == "call_1"
    assert isinstance(tool.content, list)
    assert len(tool.content) == 2
    first = tool.content[0]
    assert isinstance(first, dict)
    assert first["type"] == "text"
    assert EMAIL not in first["text"]
    assert "[REDACTED_EMAIL]" in first["text"]
    assert "Maria Garcia" in first["text"]
    assert "con-0001" in first["text"]
    assert tool.content[1] == blocks[1]


async def test_a_phone_number_in_a_string_tool_result_is_redacted_but_dates_and_amounts_stay():
    content = f'{{"name": "Maria Garcia", "phone": "{PHONE}", "close_date": "2026-12-15", "amount": 150000}}'

    messages = _redacted(await _middleware("phone_number").abefore_model(_state(content), NO_RUNTIME))

    text = message_text(messages[2])
    assert PHONE not in text
    assert "[REDACTED_PHONE_NUMBER]" in text
    assert "2026-12-15" in text
    assert "150000" in text


async def test_the_reps_own_input_is_redacted_too():
    state = _state("{}", question=f"email {EMAIL} or call {PHONE} about opp-0012")

    after_email = _redacted(await _middleware("email").abefore_model(state, NO_RUNTIME))
    after_phone = _redacted(
        await _middleware("phone_number").abefore_model({"messages": after_email}, NO_RUNTIME)
    )

    question = message_text(after_phone[0])
    assert EMAIL not in question
    assert PHONE not in question
    assert "opp-0012" in question
    assert after_phone[0].id == "h1"


async def test_messages_without_pii_are_left_alone():
    state = _state('{"id": "acc-acme", "name": "Acme Corporation", "amount": 150000}')

    for middleware in pii_middleware():
        assert await middleware.abefore_model(state, NO_RUNTIME) is None
