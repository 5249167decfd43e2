"""The layers' data maps are validated data: plain SQL names only, nothing unknown."""

from __future__ import annotations

import pytest
from psycopg import sql
from pydantic import ValidationError

from copilot.errors import MigrationError
from copilot.persistence.data_map import LayerDataMap, MappedTable, load_data_maps, rep_params, rep_predicate


def test_every_layer_ships_a_data_map_with_its_own_group():
    maps = load_data_maps()
    assert [m.group for m in maps] == ["copilot", "teams", "functions"]
    tables = [t.table for m in maps for t in m.tables]
    assert len(tables) == len(set(tables)), "a table belongs to one group"
    assert "audit_log" in maps[0].not_rep_data, "the audit log is kept, and the map says why"
    assert [t.table for m in maps for t in m.tables if t.expires] == ["user_tokens", "sign_in_prompts"]


@pytest.mark.parametrize(
    "table",
    [
        {
            "table": "x; DROP TABLE audit_log",
            "holds": "h",
            "match": [{"kind": "thread", "thread": "thread_id"}],
        },
        {"table": "x", "holds": "h", "match": [{"kind": "rep", "tenant": "t", "rep": 'a" OR 1=1 --'}]},
        {"table": "x", "holds": "h", "match": []},
        {"table": "x", "holds": "h", "match": [{"kind": "thread", "thread": "t"}], "where": "1=1"},
        {"table": "x", "holds": "", "match": [{"kind": "thread", "thread": "t"}]},
    ],
)
def test_a_map_entry_that_is_not_plain_names_is_refused(table):
    with pytest.raises(ValidationError):
        LayerDataMap.model_validate({"group": "g", "tables": [table]})


def test_a_layer_without_a_data_map_is_refused():
    with pytest.raises(MigrationError, match="not installed"):
        load_data_maps(("copilot.persistence", "no_such_layer"))
    with pytest.raises(MigrationError, match=r"ships no sql/data_map\.json"):
        load_data_maps(("copilot",))


def test_the_predicate_matches_any_of_the_rep_or_thread_columns_and_the_tenant_when_given():
    table = MappedTable.model_validate(
        {
            "table": "answers",
            "holds": "h",
            "match": [
                {"kind": "rep", "tenant": "tenant_id", "rep": "aad_object_id"},
                {"kind": "thread", "thread": "thread_id"},
            ],
        }
    )
    text = sql.SQL("{}").format(rep_predicate(table, tenant="t")).as_string(None)
    assert text == (
        '("aad_object_id" = %(rep)s AND "tenant_id" = %(tenant)s) OR "thread_id" IN '
        "(SELECT thread_id FROM threads WHERE owner_aad_id = %(rep)s AND tenant_id = %(tenant)s)"
    )
    assert "tenant" not in sql.SQL("{}").format(rep_predicate(table, tenant=None)).as_string(None)
    assert rep_params("r", None) == {"rep": "r"}
    assert rep_params("r", "t") == {"rep": "r", "tenant": "t"}
