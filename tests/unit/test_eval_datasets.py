"""The stored eval datasets: they load, carry thresholds, and the held-out split differs
from dev in wording and in records, and both carry brief and digest items."""

from __future__ import annotations

from evals.dataset import dataset_path, load_dataset, load_items, load_thresholds, thresholds_path


def test_both_splits_load_and_store_thresholds_beside_them() -> None:
    for split in ("dev", "heldout"):
        path = dataset_path(split)
        items = load_items(path)
        assert items
        assert all(i.split == split for i in items)
        assert thresholds_path(path).is_file()
        bounds = load_thresholds(path).max
        assert bounds.get("leaks") == 0
        assert bounds.get("ungrounded_shown") == 0
        assert bounds.get("raw_tool_call_text") == 0


def test_the_heldout_split_uses_other_templates_and_other_records_than_dev() -> None:
    dev, heldout = load_items(dataset_path("dev")), load_items(dataset_path("heldout"))
    assert not {i.template for i in dev} & {i.template for i in heldout}

    def records(items: list) -> set[str]:
        # A rep's pipeline window spans accounts of both splits; every other item reads its own.
        return {r for i in items if i.kind != "pipeline" for t in i.turns for r in t.expect.records}

    assert not records(dev) & records(heldout)


def test_every_kind_the_issue_lists_is_covered_in_both_splits() -> None:
    wanted = {
        "summary", "lookup.count", "lookup.amount", "lookup.next_step", "lookup.close_date",
        "lookup.contact_by_title", "lookup.last_activity", "pipeline", "empty.account",
        "scope.territory", "scope.tenant", "scope.field", "draft.followup", "propose.update",
        "propose.log", "injection", "multiturn",
    }  # fmt: skip
    for split in ("dev", "heldout"):
        assert wanted <= {i.kind for i in load_items(dataset_path(split))}, split


def test_the_honest_floor_families_are_in_both_splits() -> None:
    # Open deals "right now", the largest deal (the rep's and an account's), commission on it,
    # and a field no record has: the shapes new reps type.
    wanted = {
        "lookup.open_deals", "lookup.largest", "lookup.largest.account", "scope.field.largest", "empty.field",
    }  # fmt: skip
    for split in ("dev", "heldout"):
        assert wanted <= {i.template.split("#")[0] for i in load_items(dataset_path(split))}, split


def test_both_splits_carry_brief_and_digest_items_that_must_be_exact() -> None:
    for split in ("dev", "heldout"):
        path = dataset_path(split)
        briefs = load_dataset(path).briefs
        assert {b.kind for b in briefs} == {"brief", "digest"}, split
        assert all(b.split == split and b.id.startswith(f"{split}-b") for b in briefs)
        assert any(b.expect.briefs for b in briefs if b.kind == "brief"), "a brief with expected citations"
        reasons = {n.reason for b in briefs if b.kind == "brief" for n in b.expect.no_brief}
        assert {"internal", "hidden"} <= reasons, split
        assert any(line.section == "meeting" for b in briefs for line in b.expect.lines), split
        bounds = load_thresholds(path).briefs
        assert bounds.min == {"citation_recall": 1.0}
        assert bounds.max == {"leaks": 0, "unexpected": 0, "unverified": 0, "errors": 0}


def test_a_hidden_accounts_meeting_forbids_ids_no_brief_item_expects() -> None:
    for split in ("dev", "heldout"):
        briefs = load_dataset(dataset_path(split)).briefs
        hidden = [b for b in briefs if any(n.reason == "hidden" for n in b.expect.no_brief)]
        assert hidden, split
        expected = {i for b in briefs for e in b.expect.briefs for i in e.cited} | {
            i for b in briefs for line in b.expect.lines for i in line.cited
        }
        for item in hidden:
            forbidden = set(item.expect.forbidden_ids)
            assert any(i.startswith("acc-") for i in forbidden)
            assert any(i.startswith("con-") for i in forbidden)
            assert not forbidden & expected


def test_answer_items_and_brief_items_load_apart_from_one_file() -> None:
    dataset = load_dataset(dataset_path("heldout"))
    assert load_items(dataset_path("heldout")) == dataset.items
    assert {i.id for i in dataset.items}.isdisjoint({b.id for b in dataset.briefs})
