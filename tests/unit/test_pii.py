"""Contact emails and phone numbers are redacted before the model sees them; CRM data is not."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents.middleware import PIIMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from copilot.agent import build_agent
from copilot.citations import message_text
from copilot.middleware.pii import pii_middleware
from copilot.middleware.resilience import CircuitBreaker
from copilot.redaction import detect_phone_numbers, redact_pii
from copilot.settings import Settings
from offline_model.model import OfflineChatModel

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


@pytest.mark.parametrize(
    "phone",
    [
        # national formats of the home region (US) and of other common regions
        "2065550123",
        "(206) 555-0199",
        "206 555 0123",
        "1-206-555-0123",
        "020 7946 0958",
        "(020) 7946 0958",
        "030 1234567",
        "030/1234567",
        "01 23 45 67 89",
        "01.23.45.67.89",
        "(02) 9876 5432",
        "0412 345 678",
        "098765 43210",
        # international, with + or an international dialling prefix
        "+442079460958",
        "+44 (0)20 7946 0958",
        "+44 207 946 0958",
        "+49 30 1234567",
        "0049 30 1234567",
        "0044 20 7946 0958",
        "011 44 20 7946 0958",
        "+91 98765 43210",
        "+61 2 9876 5432",
        # extensions
        "+1 206 555 0123 ext. 42",
        "206-555-0123 x123",
        "(206) 555-0199 extension 7",
        "+44 20 7946 0958 ext 12",
        # vanity and toll-free
        "1-800-FLOWERS",
        "1-800-Flowers",
        "+1 800 356 9377",
        "1-888-GET-HELP",
        "1 (800) CONTACTS",
        # 7-digit local NANP, and NANP shapes with fictional area codes
        "555-0144",
        "867-5309",
        "(555) 555-0100",
    ],
)
def test_national_international_extension_and_vanity_formats_are_found_exactly(phone: str):
    text = f"Maria's number is {phone}, call after 10."

    assert [m["value"] for m in detect_phone_numbers(text)] == [phone]


@pytest.mark.parametrize("region", ["US", "GB", "DE", "FR", "IN", "AU", "JP", "BR"])
@pytest.mark.parametrize("phone", ["+44 20 7946 0958", "0049 30 1234567", "+1 206 555 0123", "020 7946 0958"])
def test_international_and_common_national_numbers_are_found_whatever_the_home_region(
    region: str, phone: str
):
    assert [m["value"] for m in detect_phone_numbers(f"tel {phone}.", region)] == [phone]


@pytest.mark.parametrize(
    ("region", "phone"), [("GB", "07700 900123"), ("DE", "089 1234567"), ("FR", "06 12 34 56 78")]
)
def test_the_home_region_reads_its_own_national_formats(region: str, phone: str):
    assert [m["value"] for m in detect_phone_numbers(f"mobile {phone}", region)] == [phone]


@pytest.mark.parametrize(
    "text",
    [
        "meeting at 10:30",
        "meeting at 10:30:00 on 2026-12-15",
        "15/12/2026 10:30",
        "deal worth $120,000",
        "amount 120000.50",
        '{"amount": 2345678.50, "discount": 0.125}',
        "€1.250.000 pipeline",
        "audit #1048576",
        '{"audit_id": 1048576, "status": "executed"}',
        "in 2026 150000 was booked",
        "FY2026 and FY 2027",
        "3 open opportunities",
        "12 contacts, 4 accounts, 250 activities",
        "up 12.5% to 48%",
        "1 Microsoft Way, Redmond, WA 98052",
        "1 Microsoft Way, Redmond, WA 98052-6399",
        "10 Downing Street, London SW1A 2AA",
        "invoice 0012345 and order 01234567",
        "records opp-acme-renewal acc-acme con-0001 opp-1234567",
        "build 10.0.19045.3930",
        "toll-free 800 numbers and the 800-pound gorilla",
        "1855 Microsoft Way, 1855 MICROSOFT WAY",
        "800 BROADWAY, 1 800 Broadway",
        "won 250 2025 deals",
    ],
)
def test_times_amounts_audit_numbers_years_counts_and_addresses_are_not_phone_numbers(text: str):
    assert detect_phone_numbers(text) == []


def test_numbers_in_crm_json_of_several_regions_are_all_found_and_the_rest_stays():
    text = (
        '[{"id": "con-1", "phone": "020 7946 0958", "updated": "2026-12-15T10:30:00Z"},'
        ' {"id": "con-2", "phone": "+49 30 1234567", "amount": 120000},'
        ' {"id": "con-3", "phone": "2065550123", "close_date": "2026-12-15"}]'
    )

    found = detect_phone_numbers(text)

    assert [m["value"] for m in found] == ["020 7946 0958", "+49 30 1234567", "2065550123"]
    assert all(text[m["start"] : m["end"]] == m["value"] for m in found)


def test_the_configured_region_is_used_and_an_unknown_one_is_refused():
    [_, phone] = pii_middleware("gb").parts

    assert [m["value"] for m in phone.detector("ring 07700 900123")] == ["07700 900123"]
    with pytest.raises(ValueError, match="phone region"):
        pii_middleware("XX")


# --- the middleware ---------------------------------------------------------------------------


def test_both_emails_and_phone_numbers_are_redacted_in_input_and_tool_results():
    middleware = pii_middleware()

    assert [part.pii_type for part in middleware.parts] == ["email", "phone_number"]  # emails first
    for configured in (middleware, *middleware.parts):
        assert configured.strategy == "redact"
        assert configured.apply_to_input
        assert configured.apply_to_tool_results
        assert not configured.apply_to_output


def _agent_nodes() -> list[str]:
    agent = build_agent(
        settings=Settings(),
        model=OfflineChatModel(),
        fallbacks=[],
        crm_read_tools=[],
        checkpointer=None,
        store=None,
        breaker=CircuitBreaker(5, 30),
    )
    return list(agent.get_graph().nodes)


def test_the_agent_redacts_pii_in_one_graph_step_before_the_model_and_none_after_it():
    pii_nodes = [node for node in _agent_nodes() if "PII" in node]

    assert pii_nodes == [f"{pii_middleware().name}.before_model"]


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

    messages = _redacted(await pii_middleware().abefore_model(state, NO_RUNTIME))

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

    messages = _redacted(await pii_middleware().abefore_model(_state(content), NO_RUNTIME))

    text = message_text(messages[2])
    assert PHONE not in text
    assert "[REDACTED_PHONE_NUMBER]" in text
    assert "2026-12-15" in text
    assert "150000" in text


async def test_a_national_number_of_another_region_in_a_tool_result_is_redacted():
    content = '{"id": "con-1", "name": "Oliver Smith", "phone": "020 7946 0958", "close_date": "2026-12-15"}'
    messages = _redacted(await pii_middleware("US").abefore_model(_state(content), NO_RUNTIME))

    text = message_text(messages[2])
    assert "7946" not in text
    assert '"phone": "[REDACTED_PHONE_NUMBER]"' in text
    assert "2026-12-15" in text


async def test_the_reps_own_input_is_redacted_too():
    state = _state("{}", question=f"email {EMAIL} or call {PHONE} about opp-0012")

    messages = _redacted(await pii_middleware().abefore_model(state, NO_RUNTIME))

    question = message_text(messages[0])
    assert EMAIL not in question
    assert PHONE not in question
    assert "opp-0012" in question
    assert messages[0].id == "h1"


def test_an_email_and_a_phone_number_in_one_tool_result_and_one_question_are_both_redacted_in_one_step():
    content = f'{{"id": "con-0001", "name": "Maria Garcia", "email": "{EMAIL}", "phone": "{PHONE}"}}'
    state = _state(content, question=f"is {EMAIL} still on {PHONE}?")

    messages = _redacted(pii_middleware().before_model(state, NO_RUNTIME))

    assert message_text(messages[0]) == "is [REDACTED_EMAIL] still on [REDACTED_PHONE_NUMBER]?"
    assert message_text(messages[2]) == (
        '{"id": "con-0001", "name": "Maria Garcia", "email": "[REDACTED_EMAIL]",'
        ' "phone": "[REDACTED_PHONE_NUMBER]"}'
    )
    # Already redacted: the next model call of the run finds nothing left to change.
    next_call: Any = {"messages": messages}
    assert pii_middleware().before_model(next_call, NO_RUNTIME) is None


# The first two come out differently with phone numbers redacted first, or with both types
# detected in the original text at once: an address's digits are a phone number on their own.
_ORDER_SENSITIVE = [
    f"reach 4155550133@acme.example or {PHONE}",
    "maria.2065550123@acme.example",
    f"{EMAIL}, +44 20 7946 0958 and 020 7946 0958",
]


@pytest.mark.parametrize("text", _ORDER_SENSITIVE)
async def test_the_one_step_redacts_exactly_as_langchains_email_then_phone_middlewares_did(text: str):
    state = _state([{"type": "text", "text": text}, {"type": "image", "url": "x"}], question=text)
    separate = [
        PIIMiddleware[Any, Any]("email", strategy="redact", apply_to_input=True, apply_to_tool_results=True),
        PIIMiddleware[Any, Any](
            "phone_number",
            detector=detect_phone_numbers,
            strategy="redact",
            apply_to_input=True,
            apply_to_tool_results=True,
        ),
    ]
    expected: list[BaseMessage] = state["messages"]
    for middleware in separate:  # one graph step each, as the agent ran them before
        step: Any = {"messages": expected}
        update = await middleware.abefore_model(step, NO_RUNTIME)
        expected = update["messages"] if update else expected

    messages = _redacted(await pii_middleware().abefore_model(state, NO_RUNTIME))

    assert [m.content for m in messages] == [m.content for m in expected]
    assert message_text(messages[0]) == redact_pii(text)  # traces see what the model sees


_MIXED = [
    *_ORDER_SENSITIVE,
    f"{EMAIL} and bob@acme.example, +1 415-555-0133 ext. 12, (206) 555 0199 or 1-800-FLOWERS",
    "020 7946 0958; +49 30 1234567; 555-0144; 2026-12-15 at 10:30, 150000 USD",
    "no contact data here",
    "",
    'josé.garcía@bücher.example, 用户@例子.中国, ?email=jos%C3%A9%40xn--bcher-kva.example, "jos\\u00e9@acme.example"',
]


@pytest.mark.parametrize("text", _MIXED)
@pytest.mark.parametrize("region", ["US", "GB"])
def test_traces_are_masked_exactly_as_the_model_input_is_redacted(text: str, region: str):
    state: Any = {"messages": [HumanMessage([{"type": "text", "text": text}], id="h1")]}

    update = pii_middleware(region).before_model(state, NO_RUNTIME)

    redacted = update["messages"][0] if update else state["messages"][0]
    assert message_text(redacted) == redact_pii(text, region)


def test_a_streamed_tool_result_is_redacted_for_both_types_in_order():
    written = f"{EMAIL} or {PHONE}"
    event: Any = {
        "method": "tools",
        "params": {"data": {"event": "tool-finished", "tool_call_id": "call_1", "output": written}},
    }

    for factory in pii_middleware().transformers:
        assert factory(()).process(event)  # the root scope

    assert event["params"]["data"]["output"] == redact_pii(written)
    assert event["params"]["data"]["output"] == "[REDACTED_EMAIL] or [REDACTED_PHONE_NUMBER]"


async def test_messages_without_pii_are_left_alone():
    state = _state('{"id": "acc-acme", "name": "Acme Corporation", "amount": 150000}')

    assert await pii_middleware().abefore_model(state, NO_RUNTIME) is None
    assert pii_middleware().before_model(state, NO_RUNTIME) is None
