"""The brief and digest items (pure): from what the reps' calendars and CRM reads hold to the ids
a brief or a digest must cite and the ids it must never cite.

The expectations follow the documented rules (docs/BRIEFS.md), applied here to the generator's
own reads, not by calling the product: a meeting gets a brief when an external attendee (not of
the rep's email domain) is a contact of an account the rep sees; the brief cites, per such
account, the account, the attending contacts, its open deals, its three newest activities and
the "Next steps" chunk of each open deal's stage playbook the rep may read. A meeting with only
colleagues, or whose external attendees are contacts of accounts the rep may not see (an
outsider's), gets none, and nothing of the hidden account may be cited. A digest lists the day's
customer meetings (accounts and contacts), the rep's open deals closing within 14 days with no
activity in 14 days, and the rep's open deals whose close date has passed; the eval runs brief
items on a fresh database, so no proposal waits.

Each split gets every other customer meeting and every other colleagues-only meeting (the other
split the rest), each in a window of its own size; the hidden account's meeting is in both,
alone in its window in dev and among the whole day's meetings in held-out. Digests alternate
the seeded days between the splits per rep.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from copilot.briefs.types import Meeting
from evals.dataset import (
    SPLITS,
    BriefCase,
    BriefExpect,
    BriefKind,
    ExpectedBrief,
    ExpectedLine,
    Moment,
    NoBrief,
    NoBriefReason,
    Split,
)

if TYPE_CHECKING:
    from evals.generate import Account, RepView, World

LAST_ACTIVITIES = 3
HORIZON_DAYS = 14
WINDOWS: dict[Split, tuple[int, int]] = {"dev": (45, 60), "heldout": (10, 15)}
"""Per split: how many minutes before a meeting the brief run is, and its lead time."""
DIGEST_TIMES: dict[Split, str] = {"dev": "07:30", "heldout": "12:00"}
DAY_MINUTES = 24 * 60


@dataclass(frozen=True)
class _Seen:
    """One meeting as one rep sees it: the visible contacts per account, or why there is no brief."""

    meeting: Meeting
    contacts: list[tuple[Account, list[dict[str, object]]]]
    reason: NoBriefReason | None
    hidden_ids: list[str]


def _domain(address: str) -> str:
    return address.rpartition("@")[2].strip().lower()


def _external(meeting: Meeting, own: str) -> list[str]:
    people = [*meeting.attendees, *([meeting.organizer] if meeting.organizer else [])]
    found: list[str] = []
    for person in people:
        address = person.address.strip().lower()
        if address and _domain(address) != own and address not in found:
            found.append(address)
    return found


def _record_ids(account: Account) -> list[str]:
    """An account's id and every record of it that was read (contacts, deals, activities)."""
    rows = [*account.contacts, *account.opportunities, *account.activities]
    return [account.id, *(str(r["id"]) for r in rows)]


def _seen(world: World, view: RepView, meeting: Meeting) -> _Seen:
    directory = {str(c.get("email") or "").strip().lower(): (a, c) for a in view.accounts for c in a.contacts}
    external = _external(meeting, _domain(view.email))
    grouped: dict[str, tuple[Account, list[dict[str, object]]]] = {}
    for address in external:
        if address in directory:
            account, contact = directory[address]
            grouped.setdefault(account.id, (account, []))[1].append(contact)
    if grouped:
        return _Seen(meeting, list(grouped.values()), None, [])
    hidden = [
        o.account
        for o in world.outsiders
        if any(str(c.get("email") or "").strip().lower() in external for c in o.account.contacts)
    ]
    reason: NoBriefReason = "internal" if not external else "hidden" if hidden else "no_contact"
    return _Seen(meeting, [], reason, [i for a in hidden for i in _record_ids(a)])


def _brief_cites(view: RepView, seen: _Seen) -> list[str]:
    cited: list[str] = []
    for account, contacts in seen.contacts:
        cited += [account.id, *(str(c["id"]) for c in contacts)]
        cited += [str(o["id"]) for o in account.open]
        cited += [str(a["id"]) for a in account.activities[:LAST_ACTIVITIES]]
        stages = dict.fromkeys(str(o.get("stage")) for o in account.open)
        cited += [view.playbooks[s] for s in stages if s in view.playbooks]
    return list(dict.fromkeys(cited))


def _midnight(world: World, day: int) -> dt.datetime:
    return dt.datetime.combine(world.today + dt.timedelta(days=day), dt.time(0, 0), tzinfo=dt.UTC)


def _moment(world: World, at: dt.datetime) -> Moment:
    return Moment(day_offset=(at.date() - world.today).days, time=f"{at:%H:%M}")


def _no_brief(seen: _Seen) -> NoBrief:
    assert seen.reason is not None
    return NoBrief(meeting_id=seen.meeting.id, subject=seen.meeting.subject, reason=seen.reason)


def _brief_expect(world: World, view: RepView, at: dt.datetime, lead: int) -> BriefExpect:
    """What a brief run of ``view``'s rep at ``at`` must make: a brief per customer meeting
    starting in ``[at, at + lead)``, none for the others, no id of a hidden account."""
    until = at + dt.timedelta(minutes=lead)
    window = [_seen(world, view, m) for m in view.meetings if at <= m.start < until]
    return BriefExpect(
        briefs=[
            ExpectedBrief(meeting_id=s.meeting.id, subject=s.meeting.subject, cited=_brief_cites(view, s))
            for s in window
            if s.reason is None
        ],
        no_brief=[_no_brief(s) for s in window if s.reason is not None],
        forbidden_ids=list(
            dict.fromkeys([*(i for s in window for i in s.hidden_ids), *view.unreadable_chunks])
        ),
    )


def _instant(text: str) -> dt.datetime:
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment


def _digest_expect(world: World, view: RepView, at: dt.datetime) -> BriefExpect:
    """What ``view``'s rep's digest at ``at`` must list (every line) and must not cite."""
    start = _midnight(world, (at.date() - world.today).days)
    day = start.date()
    today = [_seen(world, view, m) for m in view.meetings if start <= m.start < start + dt.timedelta(days=1)]
    lines = [
        ExpectedLine(
            section="meeting",
            cited=[*(a.id for a, _ in s.contacts), *(str(c["id"]) for _, cs in s.contacts for c in cs)],
        )
        for s in today
        if s.reason is None
    ]
    closes = {str(d["id"]): dt.date.fromisoformat(str(d["close_date"])[:10]) for d in view.open_deals}
    since = at - dt.timedelta(days=HORIZON_DAYS)

    def quiet(deal_id: str) -> bool:
        return not any(since <= _instant(t) <= at for t in view.deal_activity.get(deal_id, []))

    soon = sorted(
        (c, i) for i, c in closes.items() if day <= c <= day + dt.timedelta(days=HORIZON_DAYS) and quiet(i)
    )
    lines += [ExpectedLine(section="closing_quiet", cited=[i]) for _, i in soon]
    lines += [
        ExpectedLine(section="overdue", cited=[i])
        for c, i in sorted((c, i) for i, c in closes.items())
        if c < day
    ]
    return BriefExpect(
        lines=lines,
        no_brief=[_no_brief(s) for s in today if s.reason is not None],
        forbidden_ids=list(dict.fromkeys(i for s in today for i in s.hidden_ids)),
    )


class _Cases:
    def __init__(self, split: Split):
        self.split = split
        self.cases: list[BriefCase] = []

    def add(
        self, kind: BriefKind, rep: str, at: Moment, expect: BriefExpect, lead: int | None = None
    ) -> None:
        self.cases.append(
            BriefCase(
                id=f"{self.split}-b{len(self.cases) + 1:02d}",
                split=self.split,
                kind=kind,
                rep=rep,
                at=at,
                lead_minutes=lead,
                expect=expect,
            )
        )


def _alternate(pairs: Sequence[tuple[RepView, _Seen]], split: Split) -> list[tuple[RepView, _Seen]]:
    ordered = sorted(pairs, key=lambda p: (p[1].meeting.start, p[0].handle, p[1].meeting.id))
    return [p for index, p in enumerate(ordered) if index % len(SPLITS) == SPLITS.index(split)]


def build_brief_items(world: World) -> dict[Split, list[BriefCase]]:
    """Both splits' brief and digest items (pure: same world, same items)."""
    seen = [(view, _seen(world, view, m)) for view in world.reps for m in view.meetings]
    last_day = max(((m.start.date() - world.today).days for v in world.reps for m in v.meetings), default=-1)
    result: dict[Split, list[BriefCase]] = {}
    for split in SPLITS:
        out = _Cases(split)
        before, lead = WINDOWS[split]
        tight = [
            *_alternate([p for p in seen if p[1].reason is None], split),
            *_alternate([p for p in seen if p[1].reason in ("internal", "no_contact")], split),
            *(p for p in seen if p[1].reason == "hidden" and split == "dev"),
        ]
        for view, meeting in tight:
            at = meeting.meeting.start - dt.timedelta(minutes=before)
            out.add("brief", view.handle, _moment(world, at), _brief_expect(world, view, at, lead), lead)
        for view, meeting in (p for p in seen if p[1].reason == "hidden" and split == "heldout"):
            at = _midnight(world, (meeting.meeting.start.date() - world.today).days)
            out.add(
                "brief",
                view.handle,
                _moment(world, at),
                _brief_expect(world, view, at, DAY_MINUTES),
                DAY_MINUTES,
            )
        hour, minute = (int(p) for p in DIGEST_TIMES[split].split(":"))
        for index, view in enumerate(world.reps):
            for day in range(last_day + 1):
                if (index + day) % len(SPLITS) != SPLITS.index(split):
                    continue
                at = _midnight(world, day) + dt.timedelta(hours=hour, minutes=minute)
                out.add("digest", view.handle, _moment(world, at), _digest_expect(world, view, at))
        result[split] = out.cases
    return result
