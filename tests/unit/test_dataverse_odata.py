"""OData query options of the sandbox's Dataverse Web API, checked without a server."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.dataverse.errors import DataverseError
from sandbox.dataverse.odata import (
    decode_skiptoken,
    encode_skiptoken,
    filter_and_sort,
    page_size,
    parse_query,
)
from sandbox.dataverse.schema import entities

OPPORTUNITY = entities("new_copilotkey")["opportunity"]
ROWS: list[dict[str, Any]] = [
    {"opportunityid": "1", "name": "Acme Renewal", "estimatedvalue": 100.0, "salesstage": 2, "statecode": 0,
     "_parentaccountid_value": "a1"},
    {"opportunityid": "2", "name": "Globex Pilot", "estimatedvalue": 50.0, "salesstage": 0, "statecode": 0,
     "_parentaccountid_value": "a2"},
    {"opportunityid": "3", "name": "acme expansion", "estimatedvalue": None, "salesstage": 3, "statecode": 1,
     "_parentaccountid_value": "a1"},
]  # fmt: skip


def _ids(params: dict[str, str]) -> list[str]:
    return [r["opportunityid"] for r in filter_and_sort(ROWS, parse_query(params, OPPORTUNITY))]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("contains(name,'ACME')", ["1", "3"]),
        ("startswith(name,'globex')", ["2"]),
        ("estimatedvalue gt 60", ["1"]),
        ("estimatedvalue le 100 and salesstage ne 2", ["2"]),
        ("statecode eq 1 or salesstage eq 0", ["2", "3"]),
        ("not (statecode eq 0)", ["3"]),
        ("estimatedvalue eq null", ["3"]),
        ("name eq 'acme renewal'", ["1"]),
        ("_parentaccountid_value eq 'a1' and (salesstage ge 3 or estimatedvalue lt 200)", ["1", "3"]),
    ],
)
def test_filter_expressions_select_the_matching_rows(expression: str, expected: list[str]):
    assert _ids({"$filter": expression}) == expected


def test_orderby_sorts_nulls_first_ascending_and_keeps_ties_stable():
    assert _ids({"$orderby": "estimatedvalue"}) == ["3", "2", "1"]
    assert _ids({"$orderby": "statecode asc,estimatedvalue desc"}) == ["1", "2", "3"]


@pytest.mark.parametrize(
    "params",
    [
        {"$filter": "nosuch eq 1"},
        {"$filter": "name has 'x'"},
        {"$filter": "contains(name,"},
        {"$select": "name,nosuch"},
        {"$orderby": "name sideways"},
        {"$skip": "2"},
        {"$top": "-1"},
        {"$expand": "nosuchnav"},
        {"$skiptoken": "not-a-token"},
    ],
)
def test_bad_query_options_are_400s(params: dict[str, str]):
    with pytest.raises(DataverseError) as refused:
        parse_query(params, OPPORTUNITY)

    assert refused.value.status == 400


def test_skiptokens_round_trip_and_page_size_is_capped():
    assert decode_skiptoken(encode_skiptoken(25)) == 25
    assert page_size("odata.maxpagesize=10") == 10
    assert page_size('odata.include-annotations="*", odata.maxpagesize=99999') == 5000
    assert page_size(None) is None
