"""The offline model answers only what it has read completely: a read question with a word
that changes its meaning and that it does not understand gets "I can't … yet", the word, and
what it can do, never an answer to the neighbouring question it does understand.

Run against the small CRM of ``test_offline_phrasing`` (searches match inside names), so the
words a record's name holds are told from the words no record holds by the records themselves.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from offline_model.intents import parse_request
from offline_model.limits import unplaced_runs
from offline_model.text import name_runs
from tests.unit.test_offline_model import EXPANSION, RENEWAL, FakeCrm, _ask
from tests.unit.test_offline_phrasing import ACCOUNTS, TODAY, Crm, _run, ask, cited


def _unplaced(question: str) -> list[str]:
    return unplaced_runs(parse_request(question, TODAY).open_runs, known=set())


@pytest.mark.parametrize(
    ("question", "word"),
    [
        ("what is the capital of France", "capital"),
        ("which of my deals are at risk?", "risk"),
        ("what's the weather in Denver?", "weather"),
        ("what changed on my deals since last week?", "changed"),
        ("who won the world cup?", "world cup"),
    ],
)
def test_a_question_with_a_word_it_does_not_understand_gets_an_honest_limit_and_no_records(
    question: str, word: str
) -> None:
    text, _, _ = ask(question)
    assert text.startswith("I can't") or text.startswith("I couldn't read"), text
    assert word in text or text.startswith("I couldn't read")
    assert not cited(text), text


def test_an_unknown_word_beside_a_named_account_is_a_limit_citing_only_that_account() -> None:
    text, _, _ = ask("what is the stock price of Kestrel Aviation?")
    assert text.startswith("I can't answer that yet"), text
    assert '"stock price"' in text
    assert cited(text) == {"acc-kes"}
    assert "USD" not in text


def test_a_pasted_note_is_not_answered_for_a_quarter_or_echoed_as_a_job_title() -> None:
    note = (
        "Notes from the Q1 review with the head of procurement and the finance director: "
        + "they flagged concerns about integration timelines, staffing gaps and vendor consolidation. " * 30
    )
    assert len(note) > 2500
    text, _, _ = ask(note)
    assert text.startswith("I can't answer that yet"), text
    assert len(text.splitlines()[0]) < 300
    assert not cited(text)


@pytest.mark.parametrize(
    "question",
    [
        "what deals do I have open right now?",
        "sohw me the deals I have open currently",
        "waht open deals have I got at the moment",
        "how's kestrel looking?",
        "where does Kestrel Aviation — Renewal stand",
    ],
)
def test_framing_words_and_their_typos_are_read_and_the_question_answered(question: str) -> None:
    text, _, _ = ask(question)
    assert not text.startswith("I can't"), text
    assert cited(text)


def test_a_word_no_record_holds_is_left_unplaced_by_the_parse_and_a_stage_is_placed() -> None:
    assert _unplaced("which of my deals are at risk?") == ["risk"]
    assert _unplaced("which of my deals are in negotiation closing this quarter?") == []


CITY_ACCOUNTS = [
    *ACCOUNTS,
    {"id": "acc-pin", "name": "Pinecrest Outfitters", "industry": "Retail", "city": "Denver", "version": 1},
]


class CityCrm(Crm):
    """The small CRM with a second account in Denver, searched as the sandbox CRM searches:
    inside an account's name, industry or city (``sandbox/crm.py`` ``search_accounts``)."""

    def search_accounts(self, query: str = "", limit: int = 20) -> dict[str, Any]:
        needle = query.lower()
        return self._list(
            [
                a
                for a in CITY_ACCOUNTS
                if any(needle in str(a[k]).lower() for k in ("name", "industry", "city"))
            ]
        )

    def get_account(self, account_id: str) -> dict[str, Any]:
        found = next((a for a in CITY_ACCOUNTS if a["id"] == account_id), None)
        return found or {"error": {"code": "not_found", "message": "no such account"}}


def ask_city(question: str) -> str:
    produced, _ = _run([HumanMessage(question)], CityCrm())
    return produced[-1].text


@pytest.mark.parametrize(
    ("question", "word"),
    [
        ("what's the weather in Denver?", "weather"),
        ("what's the population of Denver?", "population"),
        ("what's Denver's weather like?", "weather"),
    ],
)
def test_a_word_it_cannot_place_beside_a_city_of_several_accounts_is_a_limit_not_which_account(
    question: str, word: str
) -> None:
    # "Denver" is a word of the records (two accounts' city): the word beside it is what the
    # model cannot place, and it is honoured, not dropped for "which Denver account?".
    text = ask_city(question)
    assert text.startswith("I can't answer that yet"), text
    assert f'"{word}"' in text
    assert "Which one" not in text
    assert not cited(text), text


def test_a_city_of_several_accounts_asked_about_alone_still_gets_which_one() -> None:
    text = ask_city("summarise Denver")
    assert text.startswith("Several accounts match 'Denver'"), text
    assert cited(text) == {"acc-kes", "acc-pin"}


def test_a_field_the_records_hold_is_answered_and_one_they_do_not_is_refused_by_name() -> None:
    assert (
        ask_city("what's the industry of Kestrel?")
        == "The industry of Kestrel Aviation [acc-kes] is Aerospace."
    )
    text = ask_city("what's the weather in Kestrel?")
    assert text.startswith("I can't see a weather field on"), text


def test_the_parse_leaves_an_asked_word_unplaced_and_a_possessive_ends_a_name() -> None:
    assert _unplaced("what's the weather in Denver?") == ["weather", "Denver"]
    assert parse_request("what's the weather in Denver?", TODAY).account_queries == ["Denver"]
    assert [r.text for r in name_runs("what's Denver's weather like")] == ["Denver", "weather"]


def test_a_name_the_crm_does_not_have_still_gets_no_account_matching_it() -> None:
    text, _, _ = ask("brief me on Zephyrine Quarry Co")
    assert text.startswith("I found no account matching 'Zephyrine Quarry Co'"), text


# --- answers that focus ---------------------------------------------------------------------------


def test_a_list_of_deals_gives_count_total_weighted_and_flags_a_past_due_close_date() -> None:
    late = {**EXPANSION, "close_date": "2026-04-30"}  # before the pinned today, 2026-05-06
    crm = FakeCrm(list_opportunities={"items": [RENEWAL, late], "next_cursor": None, "total": 2})
    produced, _ = _ask("what deals do I have open", crm)
    head, *lines = produced[-1].text.splitlines()
    assert head == (
        "You have 2 open opportunities worth USD 420,000 in total, USD 210,000 weighted by probability; "
        "1 past its close date:"
    )
    assert [line.endswith("**past due**") for line in lines] == [False, True]


def test_a_refused_field_is_followed_by_no_list_of_deals() -> None:
    text, _, _ = ask("whats the commission on my deals")
    assert text.startswith("I can't see a commission field on your open opportunities"), text
    assert len(text.splitlines()) == 1
    assert "USD" not in text


def test_a_question_about_one_deal_of_an_account_answers_about_that_deal() -> None:
    produced, _ = _ask("how's the Acme renewal looking?")
    text = produced[-1].text
    assert text.startswith("Acme Corporation — Renewal 2027 [opp-acme-renewal]"), text
    assert "opp-acme-expansion" not in text
    assert "[act-0001]" in text  # the call about the renewal


def test_an_account_question_naming_no_deal_still_gets_the_whole_account() -> None:
    produced, _ = _ask("how's Acme looking?")
    assert "**Open opportunities (2)**" in produced[-1].text
