"""Parsing the delegation chat commands (pure)."""

from __future__ import annotations

import datetime as dt

import pytest

from bot.delegation_commands import (
    Delegate,
    Revoke,
    ShowDelegations,
    Unparsed,
    parse_delegation_command,
    parse_until,
)

TODAY = dt.date(2026, 12, 2)


@pytest.mark.parametrize(
    ("text", "who", "until"),
    [
        (
            "delegate approvals to megan@contoso.example until 2026-12-24",
            "megan@contoso.example",
            "2026-12-24",
        ),
        ("Delegate my approvals to Megan Bowen until Dec 24", "Megan Bowen", "2026-12-24"),
        (
            "delegate approvals to <megan@contoso.example> until 24 December 2026.",
            "megan@contoso.example",
            "2026-12-24",
        ),
        ("delegate approval to nestor until tomorrow", "nestor", "2026-12-03"),
        ("delegate approvals to nestor until in 2 weeks", "nestor", "2026-12-16"),
        ("delegate approvals to nestor until Jan 5", "nestor", "2027-01-05"),
    ],
)
def test_a_delegation_names_the_colleague_and_the_last_day(text: str, who: str, until: str) -> None:
    assert parse_delegation_command(text, today=TODAY) == Delegate(who, dt.date.fromisoformat(until))


def test_a_numeric_date_is_read_in_the_reps_locale() -> None:
    assert parse_until("24.12.2026", today=TODAY, locale="de-DE") == dt.date(2026, 12, 24)
    assert parse_until("12/24/2026", today=TODAY, locale="en-US") == dt.date(2026, 12, 24)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("revoke delegation", Revoke(None)),
        ("Revoke delegations", Revoke(None)),
        ("stop delegation to megan@contoso.example", Revoke("megan@contoso.example")),
        ("my delegations", ShowDelegations()),
    ],
)
def test_revoke_and_list_commands(text: str, expected: object) -> None:
    assert parse_delegation_command(text, today=TODAY) == expected


def test_a_delegation_without_a_readable_date_says_how_to_phrase_it() -> None:
    missing = parse_delegation_command("delegate approvals to megan", today=TODAY)
    unreadable = parse_delegation_command("delegate approvals to megan until someday", today=TODAY)
    impossible = parse_delegation_command("delegate approvals to megan until Feb 30", today=TODAY)
    assert isinstance(missing, Unparsed)
    assert "until when" in missing.message
    assert isinstance(unreadable, Unparsed)
    assert "'someday'" in unreadable.message
    assert isinstance(impossible, Unparsed)


@pytest.mark.parametrize(
    "text", ["my approvals", "what are my delegated deals?", "summarise Acme", "delegate"]
)
def test_other_messages_are_not_delegation_commands(text: str) -> None:
    assert parse_delegation_command(text, today=TODAY) is None
