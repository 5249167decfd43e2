"""Which of the rep's live delegations a name means (pure): by full name, first name or its start."""

from __future__ import annotations

import datetime as dt

from copilot.delegation import Delegation
from copilot.writes.delegation import grants_named

NOW = dt.datetime(2026, 12, 9, 15, tzinfo=dt.UTC)


def _grant(i: int, name: str) -> Delegation:
    return Delegation(i, "t", "u-alex", "Alex Wilber", f"aad-{i}", name, NOW, NOW + dt.timedelta(days=2))


GRANTS = [_grant(1, "Megan Bowen"), _grant(2, "Megan Smith"), _grant(3, "Diego Siciliani")]


def test_a_first_name_matches_every_delegate_of_that_name() -> None:
    assert [g.id for g in grants_named(GRANTS, "megan")] == [1, 2]


def test_a_full_name_or_its_start_matches_one() -> None:
    assert [g.id for g in grants_named(GRANTS, "Megan Bowen")] == [1]
    assert [g.id for g in grants_named(GRANTS, "megan b")] == [1]
    assert [g.id for g in grants_named(GRANTS, "Diego")] == [3]


def test_no_name_means_every_live_delegation_and_an_unknown_name_none() -> None:
    assert len(grants_named(GRANTS, None)) == 3
    assert len(grants_named(GRANTS, "  ")) == 3
    assert grants_named(GRANTS, "Lidia") == []
