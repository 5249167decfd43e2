"""The generator's brief and digest items (pure): from a rep's calendar and CRM reads to the ids a
brief or a digest must cite and must never cite, split between dev and held-out."""

from __future__ import annotations

import datetime as dt

from copilot.briefs.types import Attendee, Meeting
from evals.brief_items import build_brief_items
from evals.dataset import BriefCase
from evals.generate import Account, Outsider, RepView, World

TODAY = dt.date(2030, 3, 10)


def _at(day: int, hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime.combine(TODAY + dt.timedelta(days=day), dt.time(hour, minute), tzinfo=dt.UTC)


def _meeting(number: int, subject: str, day: int, hour: int, *addresses: str) -> Meeting:
    return Meeting(
        id=f"evt-{number}",
        subject=subject,
        start=_at(day, hour),
        end=_at(day, hour, 30),
        organizer=Attendee(address="pat@t.example"),
        attendees=tuple(Attendee(address=a) for a in addresses),
    )


def _world() -> World:
    firm = Account(
        {"id": "acc-1", "name": "Firm One"},
        opportunities=[
            {"id": "opp-1", "stage": "Proposal", "close_date": (TODAY + dt.timedelta(days=5)).isoformat()},
            {"id": "opp-2", "stage": "Closed Won", "close_date": TODAY.isoformat()},
        ],
        contacts=[
            {"id": "con-1", "email": "ann@firm.example"},
            {"id": "con-2", "email": "bob@firm.example"},
        ],
        activities=[{"id": f"act-{n}"} for n in range(1, 6)],
    )
    hidden = Account(
        {"id": "acc-9", "name": "Hidden"},
        opportunities=[{"id": "opp-9"}],
        contacts=[{"id": "con-9", "email": "eve@hidden.example"}],
        activities=[{"id": "act-9"}],
    )
    meetings = [
        _meeting(1, "Pricing", 1, 15, "Ann@Firm.example", "pat@t.example", "guest@partner.example"),
        _meeting(2, "Team sync", 1, 9, "kim@t.example"),
        _meeting(3, "Intro", 2, 14, "eve@hidden.example"),
        _meeting(4, "Follow-up", 2, 16, "bob@firm.example"),
    ]
    view = RepView(
        "pat",
        "u-pat",
        "t1",
        [firm],
        open_deals=[
            {"id": "opp-1", "close_date": (TODAY + dt.timedelta(days=5)).isoformat()},
            {"id": "opp-3", "close_date": (TODAY - dt.timedelta(days=2)).isoformat()},
            {"id": "opp-4", "close_date": (TODAY + dt.timedelta(days=9)).isoformat()},
        ],
        playbooks={"Proposal": "kb-proposal-1"},
        unreadable_chunks=["kb-secret-0"],
        email="pat@t.example",
        meetings=meetings,
        deal_activity={"opp-1": [], "opp-4": [(TODAY - dt.timedelta(days=3)).isoformat() + "T10:00:00Z"]},
    )
    return World(TODAY, [view], [Outsider("sam", "t1", hidden)])


def _items() -> list[BriefCase]:
    built = build_brief_items(_world())
    return [*built["dev"], *built["heldout"]]


def test_the_same_reads_build_the_same_brief_items() -> None:
    assert build_brief_items(_world()) == build_brief_items(_world())


def test_a_customer_meeting_expects_its_account_attending_contacts_open_deals_three_activities_and_playbook() -> (
    None
):
    (pricing,) = [b for i in _items() for b in i.expect.briefs if b.meeting_id == "evt-1"]
    assert pricing.cited == ["acc-1", "con-1", "opp-1", "act-1", "act-2", "act-3", "kb-proposal-1"]


def test_a_colleagues_only_meeting_and_a_hidden_accounts_meeting_expect_no_brief_and_forbid_its_ids() -> None:
    items = _items()
    internal = [i for i in items if any(n.meeting_id == "evt-2" for n in i.expect.no_brief)]
    assert internal
    assert all(n.reason == "internal" for i in internal for n in i.expect.no_brief if n.meeting_id == "evt-2")
    hidden = [
        i for i in items if i.kind == "brief" and any(n.meeting_id == "evt-3" for n in i.expect.no_brief)
    ]
    assert {i.split for i in hidden} == {"dev", "heldout"}, "the hidden account's meeting is in both splits"
    for item in hidden:
        assert {"acc-9", "con-9", "opp-9", "act-9", "kb-secret-0"} <= set(item.expect.forbidden_ids)
        assert not {"acc-9", "con-9"} & {c for b in item.expect.briefs for c in b.cited}
    day_wide = [i for i in hidden if i.split == "heldout"]
    assert [b.meeting_id for i in day_wide for b in i.expect.briefs] == ["evt-4"]


def test_customer_meetings_alternate_between_the_splits_each_in_its_own_window() -> None:
    built = build_brief_items(_world())
    dev = [b.meeting_id for i in built["dev"] for b in i.expect.briefs if i.lead_minutes == 60]
    heldout = [b.meeting_id for i in built["heldout"] for b in i.expect.briefs if i.lead_minutes == 15]
    assert sorted(dev + heldout) == ["evt-1", "evt-4"]
    assert not set(dev) & set(heldout)
    first = next(i for i in built["dev"] if any(b.meeting_id == "evt-1" for b in i.expect.briefs))
    assert (first.at.day_offset, first.at.time) == (1, "14:15")


def test_a_digest_expects_the_days_customer_meetings_quiet_deals_closing_soon_and_passed_close_dates() -> (
    None
):
    digests = {(i.split, i.at.day_offset): i for i in _items() if i.kind == "digest"}
    assert sorted(digests) == [("dev", 0), ("dev", 2), ("heldout", 1)]
    day1 = digests[("heldout", 1)].expect
    assert [(line.section, line.cited) for line in day1.lines] == [
        ("meeting", ["acc-1", "con-1"]),
        ("closing_quiet", ["opp-1"]),
        ("overdue", ["opp-3"]),
    ], "opp-4 had an activity three days ago: not quiet"
    assert [(n.meeting_id, n.reason) for n in day1.no_brief] == [("evt-2", "internal")]
    day2 = digests[("dev", 2)].expect
    assert ("meeting", ["acc-1", "con-2"]) in [(line.section, line.cited) for line in day2.lines]
    assert {"acc-9", "con-9"} <= set(day2.forbidden_ids)
