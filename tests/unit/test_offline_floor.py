"""The offline model's honest floor: a word of the question is not a record name unless a
visible record's name matches it; superlatives pick the deal by amount; a field the records
do not show is said to be not visible; a question it cannot read is said to be unread, with
examples the bound tools answer.

Run against the small CRM of ``test_offline_phrasing`` (searches match inside names, as
the sandbox's do), so every answer is checked against its records.
"""

from __future__ import annotations

import json
import re

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from offline_model import OfflineChatModel
from tests.unit.test_offline_phrasing import TODAY, Crm, ask, cited


def _ids_read(crm: Crm) -> set[str]:
    """Every record id the CRM's answers to this question contained."""
    answers = [getattr(crm, name)(**args) for name, args in list(crm.calls)]
    return set(re.findall(r'"((?:acc|opp|con|act)-[a-z0-9-]+)"', json.dumps(answers)))


# --- words are not names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question",
    [
        "What deals do I have open right now?",
        "which opportunities do I have open at the moment?",
        "WHAT DEALS DO I HAVE OPEN RIGHT NOW",
    ],
)
def test_an_ordinary_word_in_a_question_about_open_deals_is_not_taken_for_an_account(question: str) -> None:
    text, _, _ = ask(question)
    assert text.startswith("You have 3 open opportunities"), text
    assert {"opp-kes-ren", "opp-kes-pil", "opp-brw-exp"} <= cited(text)
    assert "account" not in text.split(":")[0]


def test_a_lower_case_word_the_crm_finds_only_inside_other_names_names_none_of_them() -> None:
    # The CRM's search finds "right" inside "Brightwater" and "Brightline": not a match of the word.
    text, _, crm = ask("what deals do I have open right now")
    assert ("search_accounts", {"query": "right"}) in crm.calls
    assert "Several accounts" not in text
    assert text.startswith("You have 3 open opportunities")


@pytest.mark.parametrize(
    "question",
    ["What is the commission on my biggest deal?", "whats the commission on my deals", "blah blah"],
)
def test_no_answer_says_no_account_matches_a_word_that_was_never_typed_as_a_name(question: str) -> None:
    text, _, _ = ask(question)
    assert "no account matching" not in text
    assert "Several accounts" not in text


def test_a_lower_case_word_after_summarise_that_no_visible_account_has_asks_which_account() -> None:
    text, _, _ = ask("summarise zorg")
    assert text == "Which account do you mean? Tell me its name."


def test_a_lower_case_name_that_begins_a_visible_accounts_name_is_that_account() -> None:
    text, _, _ = ask("what are the open deals at kestrel right now?")
    assert text.startswith("Kestrel Aviation [acc-kes] has 2 open opportunities"), text


# --- superlatives -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question",
    ["what's my biggest deal?", "which of my open deals is the largest?", "My most valuable opportunity"],
)
def test_the_reps_biggest_deal_is_their_largest_open_opportunity_by_amount_cited(question: str) -> None:
    text, _, crm = ask(question)
    assert text.startswith(
        "Your largest open opportunity is Brightwater Foods — Cold Chain Expansion [opp-brw-exp]"
    )
    assert "USD 410,000" in text
    assert cited(text) == {"opp-brw-exp", "acc-brw"}
    assert crm.calls == [("list_opportunities", {"owner": "me"})]


@pytest.mark.parametrize(
    "question", ["the largest Kestrel opportunity", "what's the biggest open deal at kestrel?"]
)
def test_the_largest_opportunity_at_a_named_account_is_picked_from_that_accounts_deals(question: str) -> None:
    text, _, _ = ask(question)
    assert text.startswith(
        "The largest open opportunity at Kestrel Aviation [acc-kes] is Kestrel Aviation — Renewal [opp-kes-ren]"
    ), text
    assert "opp-brw-exp" not in text


def test_the_smallest_deal_is_the_least_by_amount() -> None:
    text, _, _ = ask("what's my smallest deal")
    assert "Hangar Sensors Pilot [opp-kes-pil]" in text.split("\n")[0]


def test_a_field_asked_of_the_biggest_deal_is_that_deals_value() -> None:
    text, _, _ = ask("when does my biggest deal close?")
    assert text == (
        "Your largest open opportunity: Brightwater Foods — Cold Chain Expansion [opp-brw-exp] "
        "is expected to close on 2026-05-29."
    )


# --- fields the records do not show ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "deal"),
    [
        ("What is the commission on my biggest deal?", "opp-brw-exp"),
        ("what's my commission on the kestrel renewal?", "opp-kes-ren"),
        ("how much commission do I earn on Brightwater Foods — Cold Chain Expansion", "opp-brw-exp"),
    ],
)
def test_a_field_no_record_shows_is_said_to_be_not_visible_citing_only_the_deal_read(
    question: str, deal: str
) -> None:
    text, _, crm = ask(question)
    first = text.split("\n")[0]
    assert first.startswith("I can't see a commission field on "), text
    assert first.endswith("it isn't in the CRM data visible to you.")
    assert cited(first) == {deal}
    assert cited(text) <= _ids_read(crm)


def test_a_field_a_record_has_is_read_from_the_record_itself() -> None:
    text, _, _ = ask("what is the industry of Kestrel?")
    assert text == "The industry of Kestrel Aviation [acc-kes] is Aerospace."


# --- the floor ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("question", ["blah blah", "hello there", "qwerty?"])
def test_a_question_with_nothing_readable_says_so_with_two_to_four_example_questions(question: str) -> None:
    text, produced, _ = ask(question)
    lines = text.split("\n")
    assert lines[0].startswith("I couldn't read that question.")
    assert 2 <= len(lines[1:]) <= 4
    assert all(line.startswith("- ") for line in lines[1:])
    assert not cited(text)
    assert not produced[-1].tool_calls


def test_every_example_the_floor_offers_is_a_question_the_model_reads() -> None:
    text, _, _ = ask("hello there")
    for line in text.split("\n")[1:]:
        quoted = re.search(r'"([^"]+)"', line)
        assert quoted is not None, line
        # "Summarise" and an account's name: a name the rep can see completes it.
        question = quoted.group(1) + (" Kestrel Aviation" if "account's name" in line else "")
        answer, _, _ = ask(question)
        assert not answer.startswith("I couldn't read"), (question, answer)


def test_the_floor_offers_only_examples_that_the_bound_tools_answer() -> None:
    tools = [t for t in Crm().tools() if t.name in {"search_accounts", "get_account", "list_activities"}]
    reply = OfflineChatModel(today=TODAY).bind_tools(tools).invoke([HumanMessage("hello there")])
    assert isinstance(reply, AIMessage)
    assert "deal" not in reply.text
    assert "pipeline" not in reply.text
    assert reply.text.startswith("I couldn't read that question.")


def test_asking_for_help_still_lists_what_the_copilot_can_do() -> None:
    text, _, _ = ask("help")
    assert text.startswith("I can help with your CRM. For example, I can:")
