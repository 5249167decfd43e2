"""The stored eval datasets: they load, carry thresholds, and the held-out split differs
from dev in wording and in records."""

from __future__ import annotations

from evals.dataset import dataset_path, load_items, load_thresholds, thresholds_path


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
