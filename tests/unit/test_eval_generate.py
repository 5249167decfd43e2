"""The dataset generator's item building (pure): from what reps saw in the CRM to items whose
reference facts are those records, the same every time, split by record."""

from __future__ import annotations

import datetime as dt

from evals.dataset import AmountFact, CountFact, DateFact, Expect, GenerationConfig, TextFact
from evals.generate import Account, Outsider, RepView, World, build_datasets
from evals.phrasing import TEMPLATES

TODAY = dt.date(2030, 3, 10)
CONFIG = GenerationConfig(seed=1, reps=["pat"], outsiders=["sam"], manager="kim", per_kind=2)


def _account(n: int, owner: str = "u-pat") -> Account:
    opps = [
        {
            "id": f"opp-{n}-{k}",
            "name": f"Firm {n} — Deal {k}",
            "stage": "Proposal",
            "amount": 1000.0 * (n + k),
            "close_date": (TODAY + dt.timedelta(days=10 * k + n)).isoformat(),
            "next_step": f"Step {n}.{k}",
            "owner": {"id": owner},
        }
        for k in (1, 2)
    ]
    account = Account(
        {"id": f"acc-{n}", "name": f"Firm {n}", "open_opportunities": 2, "open_pipeline_amount": 7.0 * n},
        opportunities=opps,
        contacts=[
            {"id": f"con-{n}-1", "name": f"Ann {n}", "title": "CFO"},
            {"id": f"con-{n}-2", "name": f"Bob {n}", "title": "CTO"},
        ],
        activities=[
            {"id": f"act-{n}", "occurred_at": (TODAY - dt.timedelta(days=n)).isoformat() + "T10:00:00Z"}
        ],
    )
    return account


def _world() -> World:
    accounts = [_account(n) for n in range(1, 17)]
    view = RepView(
        "pat",
        "u-pat",
        "t1",
        accounts,
        hidden={o["id"]: {"commission": 12.5} for a in accounts for o in a.open},
    )
    view.pipeline = {30: accounts[0].open, 45: accounts[1].open, 75: accounts[2].open}
    outsiders = [Outsider("sam", "t1" if n % 2 else "t2", _account(100 + n, owner="u-sam")) for n in range(8)]
    return World(TODAY, [view], outsiders)


def test_the_same_reads_build_the_same_datasets() -> None:
    assert build_datasets(_world(), CONFIG) == build_datasets(_world(), CONFIG)


def test_reference_facts_are_the_records_the_rep_saw() -> None:
    world = _world()
    by_id = {a.id: a for a in world.reps[0].accounts}
    for items in build_datasets(world, CONFIG).values():
        for item in items:
            expect = item.turns[0].expect
            if item.kind == "summary":
                account = by_id[expect.records[0]]
                assert CountFact(count=2) in expect.facts
                assert AmountFact(amount=account.data["open_pipeline_amount"]) in expect.facts
                assert account.name in item.turns[0].text
            if item.kind == "lookup.next_step":
                (opp_id,) = expect.records
                opp = next(o for a in by_id.values() for o in a.opportunities if o["id"] == opp_id)
                assert expect.facts == [TextFact(text=opp["next_step"])]


def test_out_of_scope_items_forbid_the_outsiders_records_and_the_hidden_field() -> None:
    world = _world()
    datasets = build_datasets(world, CONFIG)
    outsider_ids = {o.account.id for o in world.outsiders}
    for items in datasets.values():
        for item in items:
            expect = item.turns[0].expect
            if item.kind in ("scope.territory", "scope.tenant"):
                assert expect.nothing_found
                assert expect.forbidden_ids[0] in outsider_ids
            if item.kind == "scope.field":
                assert expect.forbidden_amounts == [12.5]
    kinds = {i.kind for items in datasets.values() for i in items}
    assert {"scope.territory", "scope.tenant", "scope.field", "injection", "multiturn"} <= kinds


def test_each_account_belongs_to_one_split() -> None:
    datasets = build_datasets(_world(), CONFIG)

    def accounts(split: str) -> set[str]:
        return {
            r.split("-")[1]
            for item in datasets[split]  # type: ignore[index]
            if item.kind != "pipeline"
            for turn in item.turns
            for r in turn.expect.records
        }

    assert accounts("dev")
    assert accounts("heldout")
    assert not accounts("dev") & accounts("heldout")


def _two_reps() -> World:
    world = _world()
    pat = world.reps[0]
    pat.open_deals = [o for a in pat.accounts[:3] for o in a.open]
    # Lee's two largest deals tie: "my biggest deal" has one amount and no one name.
    lee_deals = [{**o, "amount": 9000.0, "owner": {"id": "u-lee"}} for o in pat.accounts[3].open]
    lee = RepView("lee", "u-lee", "t1", pat.accounts, open_deals=lee_deals)
    lee.hidden = {o["id"]: {"commission": 450.0} for o in lee_deals}
    return World(world.today, [pat, lee], world.outsiders)


def test_a_reps_own_book_is_asked_in_one_split_per_rep_and_names_no_reference_records() -> None:
    datasets = build_datasets(
        _two_reps(), GenerationConfig(**{**CONFIG.model_dump(), "reps": ["pat", "lee"]})
    )
    book = {"lookup.open_deals", "lookup.largest", "scope.field.largest"}
    for split, rep in (("dev", "pat"), ("heldout", "lee")):
        items = [i for i in datasets[split] if i.template.split("#")[0] in book]  # type: ignore[index]
        assert {i.template.split("#")[0] for i in items} == book
        assert {i.rep for i in items} == {rep}
        assert all(not turn.expect.records for i in items for turn in i.turns)


def test_the_largest_deal_is_expected_by_amount_and_by_name_only_when_one_deal_has_it() -> None:
    datasets = build_datasets(
        _two_reps(), GenerationConfig(**{**CONFIG.model_dump(), "reps": ["pat", "lee"]})
    )

    def expect(split: str, template: str) -> Expect:
        [item] = [i for i in datasets[split] if i.template.startswith(template + "#")]  # type: ignore[index]
        return item.turns[0].expect

    top = max((o for a in _world().reps[0].accounts[:3] for o in a.open), key=lambda o: o["amount"])
    assert expect("dev", "lookup.largest").facts == [
        AmountFact(amount=top["amount"]),
        TextFact(text=top["name"]),
    ]
    assert expect("heldout", "lookup.largest").facts == [AmountFact(amount=9000.0)]
    field = expect("heldout", "scope.field.largest")
    assert field.nothing_found
    assert field.forbidden_amounts == [450.0, 450.0]


def _capture_world() -> World:
    """The world with names a rep dictates: title-case people, deals with words of their own."""
    world = _world()
    for n, account in enumerate(world.reps[0].accounts):
        surname = "Kowal" + "abcdefghijklmnopq"[n]
        for first, contact in zip(("Ann", "Bob"), account.contacts, strict=True):
            contact["name"] = f"{first} {surname}"
            contact["account"] = {"id": account.id}
        for tail, opp in zip(("Fleet Rollout", "Support Upgrade"), account.opportunities, strict=True):
            opp["name"] = f"{account.name} — {tail}"
    return world


def test_capture_items_come_last_in_both_splits_with_each_splits_own_templates() -> None:
    world = _capture_world()
    datasets = build_datasets(world, CONFIG)
    accounts = {a.id: a for a in world.reps[0].accounts}
    keys = ("propose.capture.call", "propose.capture.meeting", "propose.capture.reminder")
    for key in keys:
        assert not set(TEMPLATES[key]["dev"]) & set(TEMPLATES[key]["heldout"])
    used: dict[str, set[str]] = {}
    for split, items in datasets.items():
        kinds = [i.kind for i in items]
        captures = [i for i in items if i.kind == "propose.capture"]
        assert captures, split
        # Appended after every other item: the earlier items keep their ids.
        assert kinds[len(kinds) - len(captures) :] == ["propose.capture"] * len(captures)
        used[split] = {i.template for i in captures}
        assert all(t.split("#")[1].startswith(split) for t in used[split])
        dictated = [i for i in captures if not i.template.startswith("propose.capture.reminder")]
        reminders = [i for i in captures if i.template.startswith("propose.capture.reminder")]
        assert dictated
        assert reminders
        for item in dictated:
            activity, task = item.turns[0].expect.proposals
            opp = activity.fields["opportunity_id"]
            account = next(a for a in accounts.values() if any(o["id"] == opp for o in a.open))
            assert activity.fields["type"] in ("call", "meeting")
            assert activity.fields["contact_ids"] in [[c["id"]] for c in account.contacts]
            assert task.fields["type"] == "task"
            assert task.fields["opportunity_id"] == opp
            assert isinstance(task.fields["due_date"], DateFact)
            assert "{date+" in item.turns[0].text
        for item in reminders:
            (task,) = item.turns[0].expect.proposals
            account = accounts[str(task.fields["account_id"])]
            assert task.fields["contact_ids"] in [[c["id"]] for c in account.contacts]
            assert isinstance(task.fields["due_date"], DateFact)
    assert not used["dev"] & used["heldout"]
