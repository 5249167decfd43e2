"""The sandbox's Dataverse MCP server (``/api/mcp``) over real MCP streamable HTTP."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from sandbox.dataverse.ids import guid_for
from tests.support.dataverse import call_tool, dv_token, east_account_of_diego, knobs, mcp, webapi
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

READ_TOOLS = {"search", "describe", "read_query", "search_data"}
WRITE_TOOLS = {"create_record", "update_record", "delete_record"}


def _tools(sandbox: SandboxProcess, rep: str = "alex") -> dict[str, dict[str, Any]]:
    response = mcp(sandbox, dv_token(sandbox, rep), "tools/list")
    assert response.status_code == 200, response.text
    return {t["name"]: t for t in response.json()["result"]["tools"]}


def _rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    assert not result.get("isError"), result
    rows: list[dict[str, Any]] = result["structuredContent"]["rows"]
    return rows


def _error(result: dict[str, Any]) -> str:
    assert result["isError"] is True, result
    return str(result["content"][0]["text"])


# --- tool surface --------------------------------------------------------------------------------


def test_tools_list_offers_the_current_dataverse_tool_shape(sandbox: SandboxProcess):
    assert set(_tools(sandbox)) == READ_TOOLS | WRITE_TOOLS


def test_read_tools_are_read_only_and_write_tools_carry_no_read_only_hint(sandbox: SandboxProcess):
    tools = _tools(sandbox)

    for name in READ_TOOLS:
        assert tools[name]["annotations"]["readOnlyHint"] is True, name
    for name in WRITE_TOOLS:
        assert not (tools[name].get("annotations") or {}).get("readOnlyHint"), name


def test_write_tools_take_no_version_input(sandbox: SandboxProcess):
    tools = _tools(sandbox)

    for name in WRITE_TOOLS:
        properties = set(tools[name]["inputSchema"]["properties"])
        assert not {p for p in properties if "version" in p or "etag" in p}, (name, properties)


def test_the_tool_rename_knob_renames_and_removes_read_tools_at_run_time(sandbox: SandboxProcess):
    with knobs(sandbox, dataverse_mcp_tool_names={"read_query": "run_sql", "search_data": None}):
        names = set(_tools(sandbox))
        renamed = call_tool(sandbox, "alex", "run_sql", querytext="SELECT TOP 1 name FROM account")
        old_name = call_tool(sandbox, "alex", "read_query", querytext="SELECT TOP 1 name FROM account")
    restored = set(_tools(sandbox))

    assert "run_sql" in names
    assert "read_query" not in names
    assert "search_data" not in names
    assert len(_rows(renamed)) == 1
    assert old_name["isError"] is True
    assert restored == READ_TOOLS | WRITE_TOOLS


def test_describe_gives_a_tsql_style_schema_with_relationships(sandbox: SandboxProcess):
    result = call_tool(sandbox, "alex", "describe", name="opportunity")
    schema = result["structuredContent"]["schema"]

    assert schema.startswith("CREATE TABLE opportunity (")
    assert "opportunityid UNIQUEIDENTIFIER PRIMARY KEY" in schema
    assert "parentaccountid UNIQUEIDENTIFIER REFERENCES account(accountid)" in schema
    assert "new_commission MONEY" in schema


def test_search_finds_tables_by_keyword(sandbox: SandboxProcess):
    result = call_tool(sandbox, "alex", "search", query="sales stage")

    assert result["structuredContent"]["results"][0]["name"] == "opportunity"


# --- auth ----------------------------------------------------------------------------------------


def test_a_request_without_a_valid_token_is_401(sandbox: SandboxProcess):
    assert mcp(sandbox, None, "tools/list").status_code == 401
    assert mcp(sandbox, "not-a-jwt", "tools/list").status_code == 401
    assert (
        mcp(sandbox, sandbox.token("alex"), "tools/list").status_code == 401
    )  # the reference CRM's audience


def test_a_client_app_that_is_not_allowed_gets_403(sandbox: SandboxProcess):
    stranger = str(uuid.uuid4())
    other_app = dv_token(sandbox, "alex", extra_claims={"azp": stranger, "appid": stranger})

    refused = mcp(sandbox, other_app, "tools/list")
    with knobs(sandbox, dataverse_allowed_mcp_clients=[stranger]):
        allowed = mcp(sandbox, other_app, "tools/list")
        product = mcp(sandbox, dv_token(sandbox, "alex"), "tools/list")

    assert refused.status_code == 403
    assert set(refused.json()["error"]) == {"code", "message"}
    assert stranger in refused.json()["error"]["message"]
    assert allowed.status_code == 200
    assert product.status_code == 403  # the list replaces the default, it does not add to it


def test_mcp_calls_count_against_the_same_budget_and_get_429(sandbox: SandboxProcess):
    with knobs(sandbox, dataverse_request_budget=2):
        first = mcp(sandbox, dv_token(sandbox, "lidia"), "tools/list")
        second = webapi(sandbox, "GET", "WhoAmI", rep="lidia")
        third = mcp(sandbox, dv_token(sandbox, "lidia"), "tools/list")

    assert (first.status_code, second.status_code) == (200, 200)
    assert third.status_code == 429
    assert int(third.headers["Retry-After"]) >= 1


# --- row-level and column security --------------------------------------------------------------


def test_read_query_never_shows_a_west_rep_an_east_account(sandbox: SandboxProcess):
    east = east_account_of_diego(sandbox)
    guid = guid_for("account", east["id"])

    by_id = call_tool(
        sandbox, "alex", "read_query", querytext=f"SELECT name FROM account WHERE accountid = '{guid}'"
    )
    joined = call_tool(
        sandbox,
        "alex",
        "read_query",
        querytext=(
            "SELECT o.name FROM opportunity o JOIN account a ON o.parentaccountid = a.accountid "
            f"WHERE a.name = '{east['name']}'"
        ),
    )
    counted = call_tool(
        sandbox,
        "alex",
        "read_query",
        querytext=f"SELECT COUNT(*) AS n FROM opportunity WHERE parentaccountid = '{guid}'",
    )
    globex = call_tool(
        sandbox, "alex", "read_query", querytext="SELECT name FROM account WHERE name = 'Globex Industries'"
    )
    diego = call_tool(
        sandbox, "diego", "read_query", querytext=f"SELECT name FROM account WHERE accountid = '{guid}'"
    )

    assert _rows(by_id) == []
    assert _rows(joined) == []
    assert _rows(counted) == [{"n": 0}]
    assert _rows(globex) == [{"name": "Globex Industries"}]  # shared with alex
    assert _rows(diego) == [{"name": east["name"]}]


def test_search_data_never_finds_an_east_account_for_a_west_rep(sandbox: SandboxProcess):
    east = east_account_of_diego(sandbox)

    alex = call_tool(sandbox, "alex", "search_data", query=east["name"])
    diego = call_tool(sandbox, "diego", "search_data", query=east["name"])

    assert guid_for("account", east["id"]) not in {h["id"] for h in alex["structuredContent"]["results"]}
    assert east["name"] not in json.dumps(alex["structuredContent"])
    assert guid_for("account", east["id"]) in {h["id"] for h in diego["structuredContent"]["results"]}


def test_a_west_rep_cannot_update_or_delete_an_east_record_by_id(sandbox: SandboxProcess):
    east = east_account_of_diego(sandbox)
    deal = next(
        o for o in sandbox.admin("GET", "/admin/export")["opportunities"] if o["account_id"] == east["id"]
    )

    updated = call_tool(
        sandbox,
        "alex",
        "update_record",
        tablename="opportunity",
        recordid=guid_for("opportunity", deal["id"]),
        item={"description": "x"},
    )

    assert "0x80040220" in _error(updated)


def test_commission_reads_null_in_read_query_for_a_rep(sandbox: SandboxProcess):
    query = "SELECT TOP 3 name, new_commission FROM opportunity WHERE new_commission IS NOT NULL"

    rep = call_tool(sandbox, "alex", "read_query", querytext=query)
    manager = call_tool(sandbox, "nestor", "read_query", querytext=query)

    assert _rows(rep) == []
    assert len(_rows(manager)) == 3


# --- read_query ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "SELECT DISTINCT name FROM account",
        "SELECT ownerid, COUNT(*) AS n FROM opportunity GROUP BY ownerid HAVING COUNT(*) > 1",
        "SELECT name FROM account WHERE accountid IN (SELECT parentaccountid FROM opportunity)",
        "SELECT name FROM account ORDER BY name OFFSET 5 ROWS FETCH NEXT 5 ROWS ONLY",
        "SELECT name FROM account UNION SELECT fullname FROM contact",
        "SELECT CASE WHEN estimatedvalue > 1 THEN 1 ELSE 0 END FROM opportunity",
        "SELECT CAST(estimatedvalue AS INT) FROM opportunity",
        "WITH big AS (SELECT name FROM opportunity) SELECT name FROM big",
        "SELECT name FROM opportunity WHERE estimatedclosedate > GETDATE()",
    ],
)
def test_read_query_refuses_sql_outside_the_subset(sandbox: SandboxProcess, query: str):
    result = call_tool(sandbox, "alex", "read_query", querytext=query)

    assert "Unsupported SQL" in _error(result)


def test_read_query_runs_joins_and_aggregates_over_visible_rows(sandbox: SandboxProcess):
    result = call_tool(
        sandbox,
        "alex",
        "read_query",
        querytext=(
            "SELECT a.name AS account, COUNT(*) AS deals, SUM(o.estimatedvalue) AS total "
            "FROM opportunity o JOIN account a ON o.parentaccountid = a.accountid "
            "WHERE a.name = 'Acme Corporation' GROUP BY a.name"
        ),
    )

    # The session's sandbox is shared: other tests change Acme's deals, so the expected sums
    # are read from the CRM's own export at the same moment.
    acme = [
        o for o in sandbox.admin("GET", "/admin/export")["opportunities"] if o["account_id"] == "acc-acme"
    ]
    expected = {
        "account": "Acme Corporation",
        "deals": len(acme),
        "total": float(sum(o["amount"] for o in acme)),
    }
    assert _rows(result) == [expected]


def test_read_query_caps_the_rows_it_returns(sandbox: SandboxProcess):
    result = call_tool(sandbox, "nestor", "read_query", querytext="SELECT name FROM opportunity")

    assert len(_rows(result)) == sandbox.settings.dataverse_mcp_row_cap
    assert result["structuredContent"]["truncated"] is True


# --- writes ---------------------------------------------------------------------------------------


def test_create_record_is_visible_in_the_web_api_and_the_export(sandbox: SandboxProcess):
    key = f"test-{uuid.uuid4().hex}"
    created = call_tool(
        sandbox,
        "alex",
        "create_record",
        tablename="task",
        item={
            "subject": "Prepare QBR deck",
            "new_copilotkey": key,
            "scheduledend": "2030-02-01T17:00:00Z",
            "regardingobjectid_account_task@odata.bind": f"/accounts({guid_for('account', 'acc-acme')})",
        },
    )
    task_id = created["structuredContent"]["id"]

    via_web = webapi(sandbox, "GET", f"tasks({task_id})").json()
    exported = [a for a in sandbox.admin("GET", "/admin/export")["activities"] if a["external_id"] == key]

    assert via_web["subject"] == "Prepare QBR deck"
    assert via_web["scheduledend"] == "2030-02-01T17:00:00Z"
    assert [(a["type"], a["account_id"]) for a in exported] == [("task", "acc-acme")]


def test_update_record_is_last_writer_wins_without_any_version_check(sandbox: SandboxProcess):
    created = call_tool(
        sandbox,
        "alex",
        "create_record",
        tablename="task",
        item={
            "subject": "v0",
            "regardingobjectid_account_task@odata.bind": f"/accounts({guid_for('account', 'acc-acme')})",
        },
    )
    task_id = created["structuredContent"]["id"]
    stale_etag = webapi(sandbox, "GET", f"tasks({task_id})").json()["@odata.etag"]

    first = call_tool(
        sandbox, "alex", "update_record", tablename="task", recordid=task_id, item={"subject": "v1"}
    )
    second = call_tool(
        sandbox, "alex", "update_record", tablename="task", recordid=task_id, item={"subject": "v2"}
    )
    after = webapi(sandbox, "GET", f"tasks({task_id})").json()

    assert not first.get("isError")
    assert not second.get("isError")
    assert after["subject"] == "v2"
    assert after["@odata.etag"] != stale_etag


def test_delete_record_removes_the_row_for_every_surface(sandbox: SandboxProcess):
    created = call_tool(
        sandbox,
        "alex",
        "create_record",
        tablename="phonecall",
        item={
            "subject": "Wrong number",
            "regardingobjectid_account_phonecall@odata.bind": f"/accounts({guid_for('account', 'acc-acme')})",
        },
    )
    call_id = created["structuredContent"]["id"]

    deleted = call_tool(sandbox, "alex", "delete_record", tablename="phonecall", recordid=call_id)

    assert deleted["structuredContent"]["deleted"] is True
    assert webapi(sandbox, "GET", f"phonecalls({call_id})").status_code == 404
