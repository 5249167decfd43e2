"""Deterministic seed data for the sandbox CRM.

Every random choice comes from ``random.Random(SEED)``; dates are offsets from the
seeding day (UTC) so "closing this quarter" and "recent activity" stay meaningful
whenever the sandbox is reset, while two databases seeded on the same day are
identical. Alex Wilber's book (Acme Corporation, a shared East account) is written
out by hand because tests and the demo script ask about it by name.

The calendar (:func:`seed_calendar`) comes last and draws nothing from the random
stream, so adding meetings changed no CRM record: its meetings are over the days after
the seeding day and pick their CRM attendees from the contacts already inserted.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from sandbox.directory import TENANTS, USERS, User

SEED = 20240611

STAGE_PROBABILITY = {
    "Prospecting": 10,
    "Qualification": 25,
    "Proposal": 50,
    "Negotiation": 75,
    "Closed Won": 100,
    "Closed Lost": 0,
}

INDUSTRIES = (
    "Manufacturing",
    "Retail",
    "Healthcare",
    "Financial Services",
    "Logistics",
    "Energy",
    "Software",
    "Education",
    "Hospitality",
    "Telecommunications",
)
CITIES = {
    "West": ("Seattle", "Portland", "San Francisco", "Denver", "San Diego", "Boise"),
    "East": ("New York", "Boston", "Atlanta", "Philadelphia", "Charlotte", "Pittsburgh"),
    "North": ("Chicago", "Minneapolis", "Detroit", "Milwaukee", "Cleveland"),
    "South": ("Dallas", "Houston", "Austin", "Nashville", "New Orleans"),
}
AREA_CODES = {
    "West": ("206", "503", "415", "303"),
    "East": ("212", "617", "404", "215"),
    "North": ("312", "612", "313", "414"),
    "South": ("214", "713", "512", "615"),
}
NAME_HEADS = (
    "Northwind", "Tailspin", "Litware", "Proseware", "Wingtip", "Lamna", "Trey", "Woodgrove",
    "Adventure", "Blue Yonder", "Coho", "Fourth Coffee", "Graphic", "Humongous", "Lucerne",
    "Margie's", "Relecloud", "Southridge", "Alpine", "Datum", "Bellows", "Cascade", "Granite",
    "Harbor", "Ironwood", "Juniper", "Keystone", "Lakeside", "Meridian", "Oakridge", "Pinnacle",
    "Redwood", "Summit", "Tidewater", "Vertex", "Willow",
)  # fmt: skip
NAME_TAILS = (
    "Traders", "Systems", "Logistics", "Health", "Foods", "Energy", "Labs", "Holdings",
    "Manufacturing", "Outfitters", "Partners", "Works", "Analytics", "Supply", "Group",
)  # fmt: skip
FIRST_NAMES = (
    "Maria", "Kevin", "Sarah", "Tom", "Aisha", "Daniel", "Emily", "Hiro", "Grace", "Luis",
    "Nina", "Omar", "Rachel", "Victor", "Chloe", "Ethan", "Fatima", "Gabriel", "Hannah", "Isaac",
    "Julia", "Marcus", "Olivia", "Pedro", "Quinn", "Rosa", "Steven", "Tara", "Wei", "Yusuf",
)  # fmt: skip
LAST_NAMES = (
    "Gonzalez", "Park", "Chen", "Becker", "Khan", "Novak", "Foster", "Tanaka", "Liu", "Ortega",
    "Petrov", "Haddad", "Stein", "Alvarez", "Dubois", "Murphy", "Rahman", "Silva", "Weber", "Brooks",
    "Nguyen", "Kowalski", "Patel", "Moreau", "Sullivan", "Ibrahim", "Fischer", "Rossi",
)  # fmt: skip
TITLES = (
    "Chief Financial Officer", "VP Operations", "Procurement Manager", "IT Director",
    "Head of Supply Chain", "Operations Manager", "CTO", "Purchasing Lead", "Facilities Director",
)  # fmt: skip
OPPORTUNITY_KINDS = (
    "Renewal", "Expansion", "New Business", "Analytics Add-on", "Support Upgrade",
    "Pilot", "Fleet Rollout", "Integration Services", "Training Package",
)  # fmt: skip
ACTIVITY_SUBJECTS = {
    "call": ("Pricing check-in", "Discovery call", "Budget confirmation", "Follow-up call", "Renewal terms"),
    "meeting": ("Quarterly business review", "Product demo", "Executive sponsor meeting", "Onsite workshop"),
    "email": ("Sent proposal", "Shared case study", "Sent pricing sheet", "Recap of last meeting"),
    "task": ("Prepare quote", "Send security questionnaire", "Update mutual action plan", "Book demo"),
}
ACTIVITY_NOTES = (
    "Customer asked for a revised quote with multi-year discount.",
    "Champion confirmed budget is approved for next quarter.",
    "Legal review pending; procurement wants net-60 terms.",
    "Competitor evaluation underway; emphasise integration story.",
    "Good engagement; next step is a technical deep dive.",
    "Stakeholders aligned; waiting for signature authority.",
    "Requested references from a customer in the same industry.",
    "Timeline slipped two weeks because of an internal reorg.",
)
NEXT_STEPS = (
    "Send revised proposal",
    "Schedule technical deep dive",
    "Confirm budget with CFO",
    "Legal review of MSA",
    "Book executive sponsor call",
    "Share ROI analysis",
)


@dataclass
class SeedData:
    """Rows to insert, one list of tuples per table (column order as in the schema)."""

    accounts: list[tuple[object, ...]] = field(default_factory=list)
    contacts: list[tuple[object, ...]] = field(default_factory=list)
    opportunities: list[tuple[object, ...]] = field(default_factory=list)
    activities: list[tuple[object, ...]] = field(default_factory=list)
    shares: list[tuple[object, ...]] = field(default_factory=list)


class _Builder:
    """Accumulates rows and hands out sequential, stable ids."""

    def __init__(self, today: date) -> None:
        self.rng = random.Random(SEED)
        self.today = today
        self.midnight = datetime.combine(today, time(0, 0), tzinfo=UTC)
        self.data = SeedData()
        self.counters = {"acc": 0, "con": 0, "opp": 0, "act": 0}
        self.used_names: set[str] = set()
        self.used_people: set[tuple[str, str]] = set()

    def next_id(self, prefix: str) -> str:
        self.counters[prefix] += 1
        return f"{prefix}-{self.counters[prefix]:04d}"

    def ts(self, days_ago: int, hour: int = 10, minute: int = 0) -> str:
        # Whole days back from midnight, so seeded events are never in the future.
        moment = self.midnight - timedelta(days=days_ago) + timedelta(hours=hour, minutes=minute)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    def day(self, offset: int) -> str:
        return (self.today + timedelta(days=offset)).isoformat()

    def company_name(self) -> str:
        while True:
            name = f"{self.rng.choice(NAME_HEADS)} {self.rng.choice(NAME_TAILS)}"
            if name not in self.used_names:
                self.used_names.add(name)
                return name

    def person(self) -> tuple[str, str]:
        while True:
            pair = (self.rng.choice(FIRST_NAMES), self.rng.choice(LAST_NAMES))
            if pair not in self.used_people:
                self.used_people.add(pair)
                return pair

    def add_account(
        self,
        tenant_id: str,
        owner: User,
        *,
        account_id: str | None = None,
        name: str | None = None,
        industry: str | None = None,
        city: str | None = None,
        domain: str | None = None,
    ) -> tuple[str, str, str]:
        """Insert an account; returns (id, name, web domain)."""
        territory = owner.territory or "West"
        account_id = account_id or self.next_id("acc")
        name = name or self.company_name()
        self.used_names.add(name)
        domain = domain or re.sub(r"[^a-z0-9]", "", name.lower()) + ".example"
        self.data.accounts.append(
            (
                account_id,
                tenant_id,
                name,
                industry or self.rng.choice(INDUSTRIES),
                territory,
                owner.id,
                city or self.rng.choice(CITIES[territory]),
                f"https://www.{domain}",
                1,
                self.ts(self.rng.randint(20, 200)),
                owner.id,
            )
        )
        return account_id, name, domain

    def add_contact(
        self,
        tenant_id: str,
        account_id: str,
        domain: str,
        territory: str,
        *,
        first: str = "",
        last: str = "",
        title: str = "",
    ) -> None:
        if not first:
            first, last = self.person()
        phone = f"+1 {self.rng.choice(AREA_CODES[territory])}-555-{self.rng.randint(100, 199):04d}"
        self.data.contacts.append(
            (
                self.next_id("con"),
                tenant_id,
                account_id,
                f"{first} {last}",
                title or self.rng.choice(TITLES),
                f"{first.lower()}.{last.lower()}@{domain}",
                phone,
                # Added 30-359 days before the seed day, from the contact's number (not the
                # generator: every other seeded value stays as it was).
                self.ts(30 + (self.counters["con"] * 37) % 330, 9 + self.counters["con"] % 8),
            )
        )

    def add_opportunity(
        self,
        tenant_id: str,
        account_id: str,
        owner: User,
        name: str,
        stage: str,
        close_offset: int,
        amount: float,
        *,
        opportunity_id: str | None = None,
        next_step: str | None = None,
    ) -> str:
        opportunity_id = opportunity_id or self.next_id("opp")
        created_days_ago = max(close_offset * -1 + 30, 30) + self.rng.randint(0, 60)
        modified_days_ago = self.rng.randint(1, 20)
        rate = self.rng.choice((0.05, 0.06, 0.07, 0.08, 0.1))
        self.data.opportunities.append(
            (
                opportunity_id,
                tenant_id,
                account_id,
                name,
                stage,
                float(amount),
                "USD",
                self.day(close_offset),
                STAGE_PROBABILITY[stage],
                next_step if next_step is not None else self.rng.choice(NEXT_STEPS),
                owner.id,
                round(amount * rate, 2),
                1,
                self.ts(created_days_ago),
                self.ts(modified_days_ago, hour=15),
                owner.id,
            )
        )
        return opportunity_id

    def add_activity(
        self,
        tenant_id: str,
        owner: User,
        account_id: str,
        opportunity_id: str | None,
        days_ago: int,
        *,
        kind: str | None = None,
        subject: str | None = None,
        notes: str | None = None,
    ) -> None:
        kind = kind or self.rng.choice(tuple(ACTIVITY_SUBJECTS))
        number = self.counters["act"] + 1
        occurred = self.ts(days_ago, hour=self.rng.randint(8, 17), minute=self.rng.choice((0, 15, 30, 45)))
        self.data.activities.append(
            (
                self.next_id("act"),
                tenant_id,
                f"seed-act-{number:04d}",
                kind,
                subject or self.rng.choice(ACTIVITY_SUBJECTS[kind]),
                notes if notes is not None else self.rng.choice(ACTIVITY_NOTES),
                occurred,
                account_id,
                opportunity_id,
                owner.id,
                occurred,
                None,
                None,
                None,
                1,
            )
        )


def _user(user_id: str) -> User:
    return next(u for u in USERS if u.id == user_id)


def _acme(b: _Builder) -> None:
    """Alex's flagship account: three open deals, one won renewal, fresh activity."""
    alex = _user("u-alex")
    tenant = alex.tenant_id
    acc, _, domain = b.add_account(
        tenant,
        alex,
        account_id="acc-acme",
        name="Acme Corporation",
        industry="Manufacturing",
        city="Seattle",
        domain="acme.example",
    )
    for first, last, title in (
        ("Maria", "Gonzalez", "VP Operations"),
        ("Kevin", "Park", "Procurement Manager"),
        ("Sarah", "Chen", "Chief Financial Officer"),
        ("Tom", "Becker", "IT Director"),
    ):
        b.used_people.add((first, last))
        b.add_contact(tenant, acc, domain, "West", first=first, last=last, title=title)
    renewal = b.add_opportunity(
        tenant, acc, alex, "Acme Corporation — Renewal 2027", "Proposal", 45, 240000,
        opportunity_id="opp-acme-renewal", next_step="Send revised renewal proposal with multi-year option",
    )  # fmt: skip
    expansion = b.add_opportunity(
        tenant, acc, alex, "Acme Corporation — Fleet Expansion", "Qualification", 75, 180000,
        opportunity_id="opp-acme-expansion", next_step="Confirm budget with Sarah Chen (CFO)",
    )  # fmt: skip
    analytics = b.add_opportunity(
        tenant, acc, alex, "Acme Corporation — Analytics Add-on", "Negotiation", 20, 65000,
        opportunity_id="opp-acme-analytics", next_step="Legal review of order form",
    )  # fmt: skip
    b.add_opportunity(
        tenant, acc, alex, "Acme Corporation — Renewal 2026", "Closed Won", -320, 210000,
        opportunity_id="opp-acme-renewal-2026", next_step="",
    )  # fmt: skip
    for days_ago, kind, opp, subject, notes in (
        (2, "call", renewal, "Renewal pricing call with Maria Gonzalez",
         "Maria wants a 3-year option; asked for revised pricing by Friday."),
        (4, "meeting", analytics, "Analytics add-on demo",
         "Kevin's team liked the dashboards; procurement to review the order form."),
        (6, "email", renewal, "Sent renewal proposal", "Proposal v1 sent to Maria and Kevin."),
        (9, "task", expansion, "Send security questionnaire", "IT (Tom Becker) needs it before the pilot."),
        (12, "meeting", None, "Quarterly business review", "Usage up 18% QoQ; exec sponsor engaged."),
    ):  # fmt: skip
        b.add_activity(tenant, alex, acc, opp, days_ago, kind=kind, subject=subject, notes=notes)


def _generic_account(
    b: _Builder,
    tenant_id: str,
    owner: User,
    *,
    account_id: str | None = None,
    name: str | None = None,
    city: str | None = None,
) -> str:
    """An account with 2-4 contacts, 2-4 opportunities and 3-7 activities."""
    territory = owner.territory or "West"
    acc, name, domain = b.add_account(tenant_id, owner, account_id=account_id, name=name, city=city)
    for _ in range(b.rng.randint(2, 4)):
        b.add_contact(tenant_id, acc, domain, territory)
    opp_ids: list[str] = []
    kinds = b.rng.sample(OPPORTUNITY_KINDS, b.rng.randint(2, 4))
    for kind in kinds:
        stage = b.rng.choices(tuple(STAGE_PROBABILITY), weights=(3, 3, 3, 2, 2, 1))[0]
        closed = stage.startswith("Closed")
        offset = b.rng.randint(-150, -5) if closed else b.rng.randint(-10, 150)
        amount = b.rng.randrange(10_000, 400_000, 2_500)
        opp_ids.append(b.add_opportunity(tenant_id, acc, owner, f"{name} — {kind}", stage, offset, amount))
    for _ in range(b.rng.randint(3, 7)):
        opp = b.rng.choice([*opp_ids, None])
        b.add_activity(tenant_id, owner, acc, opp, b.rng.randint(1, 90))
    return acc


def build(today: date) -> SeedData:
    """All seed rows for a database seeded on ``today`` (pure, deterministic)."""
    b = _Builder(today)
    _acme(b)
    # Accounts per rep; every rep (even one without CRM access) owns a book in their territory.
    book_sizes = {"u-alex": 7, "u-megan": 8, "u-adele": 4, "u-diego": 10, "u-lidia": 9}
    book_sizes |= {"u-priya": 10, "u-sam": 9, "u-jordan": 10}
    for user_id, count in book_sizes.items():
        owner = _user(user_id)
        for _ in range(count):
            _generic_account(b, owner.tenant_id, owner)
    # An East account shared with alex (a co-sell deal); other East accounts stay private to him.
    diego = _user("u-diego")
    globex = _generic_account(
        b, diego.tenant_id, diego, account_id="acc-globex", name="Globex Industries", city="Boston"
    )
    b.data.shares.append((diego.tenant_id, "account", globex, "u-alex"))
    # A North account shared with jordan (South) so Fabrikam exercises sharing too.
    priya = _user("u-priya")
    shared_north = _generic_account(b, priya.tenant_id, priya)
    b.data.shares.append((priya.tenant_id, "account", shared_north, "u-jordan"))
    return b.data


def _insert(conn: sqlite3.Connection, table: str, rows: Sequence[tuple[object, ...]]) -> None:
    if rows:
        marks = ", ".join("?" * len(rows[0]))
        conn.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)


def seed(conn: sqlite3.Connection, today: date | None = None) -> None:
    """Insert tenants, users and the CRM records into an empty schema (caller owns the transaction)."""
    data = build(today or datetime.now(UTC).date())
    _insert(conn, "tenants", [(t.id, t.name, t.domain) for t in TENANTS])
    _insert(
        conn,
        "users",
        [(u.id, u.tenant_id, u.handle, u.name, u.email, u.role, u.territory, u.manager_id) for u in USERS],
    )
    _insert(conn, "accounts", data.accounts)
    _insert(conn, "contacts", data.contacts)
    _insert(conn, "opportunities", data.opportunities)
    _insert(conn, "activities", data.activities)
    _insert(conn, "shares", data.shares)
    seed_history(conn, today)
    seed_calendar(conn, today)


# --- the records' change history (what a CRM's audit keeps) -----------------------------


OPEN = ("Prospecting", "Qualification", "Proposal", "Negotiation")
ACME_HISTORY: dict[str, tuple[tuple[int, str, str, object, object], ...]] = {
    # days ago (at 11:00 UTC), who, field, old, new; the newest value is the record's own.
    "opp-acme-renewal": ((6, "u-alex", "stage", "Qualification", "Proposal"),),
    "opp-acme-analytics": ((4, "u-alex", "stage", "Proposal", "Negotiation"),),
    "opp-acme-expansion": (
        (40, "u-alex", "close_date", -45, -20),
        (10, "u-nestor", "close_date", -20, 0),
    ),
}
"""Alex's flagship deals, by hand: the renewal and the add-on moved a stage this week; the
expansion's close date was pushed twice (close-date offsets relative to its close date now)."""


def _bucket(record_id: str) -> int:
    """A stable choice per record, drawn from its id (never from the seed's random stream)."""
    return int(hashlib.sha256(record_id.encode()).hexdigest()[:8], 16) % 10


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def seed_history(conn: sqlite3.Connection, today: date | None = None) -> None:
    """Each opportunity's kept versions, consistent with its values now: its creation, then the
    changes that led to them. Draws nothing from the random stream (the CRM records stay as they
    were). Alex's flagship deals are written by hand (:data:`ACME_HISTORY`); of the others, open
    deals moved into their stage when they were last modified, and by the id's bucket some had
    their close date pushed later twice (0), their amount lowered (1), or have sat in the stage
    they were created in (2); closed deals moved from Negotiation on their close date."""
    midnight = datetime.combine(today or datetime.now(UTC).date(), time(0, 0), tzinfo=UTC)
    history: list[tuple[object, ...]] = []
    for row in conn.execute("SELECT * FROM opportunities ORDER BY id").fetchall():
        created, modified = _moment(row["created_at"]), _moment(row["modified_at"])
        middle = created + (modified - created) / 2
        owner, stage = row["owner_id"], row["stage"]
        close, amount = date.fromisoformat(row["close_date"]), float(row["amount"])
        start = {"stage": stage, "amount": amount, "close_date": close.isoformat()}
        moves: list[tuple[datetime, str, dict[str, list[object]]]] = []
        bucket, closed = _bucket(row["id"]), stage not in OPEN
        if row["id"] in ACME_HISTORY:
            for days_ago, by, name, old, new in ACME_HISTORY[row["id"]]:
                if name == "close_date":
                    assert isinstance(old, int)
                    assert isinstance(new, int)
                    old, new = (
                        (close + timedelta(days=old)).isoformat(),
                        (close + timedelta(days=new)).isoformat(),
                    )
                if not any(name in m[2] for m in moves):
                    start[name] = old  # the value it was created with
                at = max(
                    midnight - timedelta(days=days_ago) + timedelta(hours=11), created + timedelta(hours=1)
                )
                moves.append((at, by, {name: [old, new]}))
        elif closed:
            start["stage"] = "Negotiation"
            at = datetime.combine(close, time(15, 0), tzinfo=UTC)  # it closed on its close date
            moves.append((max(at, created + timedelta(hours=1)), owner, {"stage": ["Negotiation", stage]}))
        else:
            if bucket == 0:
                pushed = (close - timedelta(days=14)).isoformat()
                start["close_date"] = (close - timedelta(days=30)).isoformat()
                moves.append((middle, owner, {"close_date": [start["close_date"], pushed]}))
                moves.append((modified, owner, {"close_date": [pushed, close.isoformat()]}))
            if bucket == 1:
                start["amount"] = round(amount * 1.25, 2)
                moves.append((middle, owner, {"amount": [start["amount"], amount]}))
            if bucket != 2 and stage != "Prospecting":
                start["stage"] = OPEN[OPEN.index(stage) - 1]
                moves.append((modified, owner, {"stage": [start["stage"], stage]}))
        created_values: dict[str, list[object]] = {"name": [None, row["name"]]}
        created_values |= {k: [None, v] for k, v in start.items()}
        history.append(_history_row(row, created, owner, "create", created_values))
        for at, by, changes in sorted(moves, key=lambda m: m[0]):
            history.append(_history_row(row, at, by, "update", changes))
    _insert(
        conn,
        "record_history (tenant_id, record_type, record_id, version, changed_at, changed_by,"
        " operation, changes)",
        history,
    )


def _history_row(
    row: dict[str, object], at: datetime, by: str, operation: str, changes: dict[str, list[object]]
) -> tuple[object, ...]:
    return (row["tenant_id"], "opportunity", row["id"], None, _stamp(at), by, operation, json.dumps(changes))


# --- the calendar (Graph-shaped meetings, see sandbox/calendar.py) ---------------------


@dataclass(frozen=True)
class _Meeting:
    organizer: str
    """A user id."""
    subject: str
    day: int
    """Days after the seeding day."""
    start: tuple[int, int]
    """(hour, minute) UTC."""
    minutes: int
    online: bool
    attendees: tuple[dict[str, str], ...]


def _person_attendee(user_id: str, kind: str = "required") -> dict[str, str]:
    user = _user(user_id)
    return {"name": user.name, "address": user.email, "type": kind}


def _contact_attendees(conn: sqlite3.Connection, account_sql: str, count: int) -> tuple[dict[str, str], ...]:
    """The first ``count`` contacts (by id) of the first account (by id) ``account_sql`` selects."""
    account = conn.execute(account_sql + " ORDER BY id LIMIT 1").fetchone()
    if account is None:
        return ()
    rows = conn.execute(
        "SELECT name, email FROM contacts WHERE account_id = ? ORDER BY id LIMIT ?", (account["id"], count)
    ).fetchall()
    return tuple({"name": r["name"], "address": r["email"], "type": "required"} for r in rows)


def calendar_meetings(conn: sqlite3.Connection) -> list[_Meeting]:
    """The seeded meetings: CRM contacts as attendees, internal-only ones, and one whose only
    external attendee is a contact of an East account alex may not see."""
    acme = _contact_attendees(conn, "SELECT id FROM accounts WHERE id = 'acc-acme'", 4)
    globex = _contact_attendees(conn, "SELECT id FROM accounts WHERE id = 'acc-globex'", 2)
    # Diego's own East accounts (not Globex, which is shared with alex) are hidden from alex.
    hidden = _contact_attendees(
        conn, "SELECT id FROM accounts WHERE owner_id = 'u-diego' AND id != 'acc-globex'", 1
    )
    megan_book = _contact_attendees(conn, "SELECT id FROM accounts WHERE owner_id = 'u-megan'", 1)
    jordan_book = _contact_attendees(conn, "SELECT id FROM accounts WHERE owner_id = 'u-jordan'", 1)
    partner = {"name": "Pat Rivera", "address": "pat.rivera@partnerco.example", "type": "optional"}
    p = _person_attendee
    return [
        _Meeting("u-alex", "Acme analytics add-on: order form", 0, (17, 0), 30, True, (*acme[1:2], acme[3])),
        _Meeting("u-alex", "West pipeline review", 1, (9, 0), 30, True, (p("u-megan"), p("u-nestor"))),
        _Meeting(
            "u-alex", "Acme renewal pricing review", 1, (15, 0), 45, True,
            (*acme[0:2], p("u-nestor", "optional")),
        ),
        _Meeting("u-diego", "Globex co-sell sync", 1, (18, 0), 30, True, (*globex[:1], p("u-alex"))),
        _Meeting("u-megan", "Account check-in", 1, (11, 0), 30, False, megan_book),
        _Meeting("u-alex", "Introduction call", 2, (14, 0), 30, True, (*hidden, p("u-lidia", "optional"))),
        _Meeting("u-alex", "Fleet rollout workshop", 2, (16, 0), 60, False, (*megan_book, partner)),
        _Meeting("u-diego", "Globex QBR prep", 2, (13, 0), 45, True, globex[1:2]),
        _Meeting("u-lidia", "East territory planning", 2, (10, 0), 60, True, (p("u-diego"),)),
        _Meeting("u-nestor", "1:1 Alex / Nestor", 3, (10, 0), 30, True, (p("u-alex"),)),
        _Meeting("u-jordan", "Renewal kickoff", 1, (15, 0), 30, True, jordan_book),
    ]  # fmt: skip


def seed_calendar(conn: sqlite3.Connection, today: date | None = None) -> None:
    """Insert the seeded meetings, at fixed hours (UTC) on the days after ``today``."""
    midnight = datetime.combine(today or datetime.now(UTC).date(), time(0, 0), tzinfo=UTC)
    rows: list[tuple[object, ...]] = []
    for number, meeting in enumerate(calendar_meetings(conn), start=1):
        start = midnight + timedelta(days=meeting.day, hours=meeting.start[0], minutes=meeting.start[1])
        end = start + timedelta(minutes=meeting.minutes)
        rows.append(
            (
                f"evt-{number:04d}",
                _user(meeting.organizer).tenant_id,
                meeting.organizer,
                meeting.subject,
                start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                end.strftime("%Y-%m-%dT%H:%M:%SZ"),
                int(meeting.online),
                json.dumps(list(meeting.attendees)),
            )
        )
    _insert(conn, "events", rows)
