"""The sandbox's Dataverse Web API (``/api/data/v9.2/``) over real HTTP, against the real sandbox."""

from __future__ import annotations

import ssl
import uuid
from typing import Any

import httpx
import jwt
import pytest

from sandbox.crm import OPEN_STAGES
from sandbox.dataverse.ids import guid_for
from sandbox.directory import CONTOSO, find_user
from sandbox.identity.tokens import issue_token
from tests.support.dataverse import east_account_of_diego, knobs, user_guid, webapi
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration


def _alex_open_deal(sandbox: SandboxProcess) -> dict[str, Any]:
    """An open deal alex owns that the demo's Acme questions do not ask about."""
    state = sandbox.admin("GET", "/admin/export")
    deal: dict[str, Any] = next(
        o
        for o in state["opportunities"]
        if o["owner_id"] == "u-alex" and not o["id"].startswith("opp-acme") and o["stage"] in OPEN_STAGES
    )
    return deal


def _acme_renewal(sandbox: SandboxProcess) -> str:
    return guid_for("opportunity", "opp-acme-renewal")


def _key() -> str:
    return f"test-{uuid.uuid4().hex}"


def _phonecall_body(subject: str, opportunity_guid: str) -> dict[str, Any]:
    return {
        "subject": subject,
        "regardingobjectid_opportunity_phonecall@odata.bind": f"/opportunities({opportunity_guid})",
    }


# --- reads -----------------------------------------------------------------------------------


def test_every_row_carries_a_weak_etag_and_lookups_read_back_as_value_columns(sandbox: SandboxProcess):
    response = webapi(sandbox, "GET", "opportunities?$top=5")

    assert response.status_code == 200
    rows = response.json()["value"]
    assert len(rows) == 5
    for row in rows:
        assert row["@odata.etag"].startswith('W/"')
        assert uuid.UUID(row["opportunityid"])
        assert uuid.UUID(row["_parentaccountid_value"])
        assert "parentaccountid" not in row


def test_select_filter_orderby_and_expand_shape_the_result(sandbox: SandboxProcess):
    response = webapi(
        sandbox,
        "GET",
        "opportunities?$select=name,estimatedvalue&$filter=contains(name,'acme') and statecode eq 0"
        "&$orderby=estimatedvalue desc&$expand=parentaccountid($select=name)",
    )

    assert response.status_code == 200, response.text
    rows = response.json()["value"]
    assert [r["name"] for r in rows] == [
        "Acme Corporation — Renewal 2027",
        "Acme Corporation — Fleet Expansion",
        "Acme Corporation — Analytics Add-on",
    ]
    assert {r["parentaccountid"]["name"] for r in rows} == {"Acme Corporation"}
    assert set(rows[0]) == {"@odata.etag", "opportunityid", "name", "estimatedvalue", "parentaccountid"}


def test_maxpagesize_pages_through_every_row_with_an_opaque_next_link(sandbox: SandboxProcess):
    everything = webapi(sandbox, "GET", "accounts?$select=name").json()["value"]
    seen: list[str] = []
    url = "accounts?$select=name&$top=1"  # $top is ignored when a page size is asked for
    links = 0
    while url:
        page = webapi(sandbox, "GET", url, headers={"Prefer": "odata.maxpagesize=4"}).json()
        assert len(page["value"]) <= 4
        seen += [r["accountid"] for r in page["value"]]
        url = page.get("@odata.nextLink", "")
        links += bool(url)
        assert "$skip=" not in url

    assert seen == [r["accountid"] for r in everything]
    assert links == (len(everything) - 1) // 4


def test_a_conditional_get_with_the_current_etag_is_304(sandbox: SandboxProcess):
    path = f"opportunities({_acme_renewal(sandbox)})"
    current = webapi(sandbox, "GET", path)

    again = webapi(sandbox, "GET", path, headers={"If-None-Match": current.json()["@odata.etag"]})
    stale = webapi(sandbox, "GET", path, headers={"If-None-Match": 'W/"0"'})

    assert again.status_code == 304
    assert stale.status_code == 200


def test_an_unknown_guid_is_404_with_object_does_not_exist(sandbox: SandboxProcess):
    missing = str(uuid.uuid4())
    response = webapi(sandbox, "GET", f"accounts({missing})")

    assert response.status_code == 404
    assert response.json() == {
        "error": {"code": "0x80040217", "message": f"account With Id = {missing} Does Not Exist"}
    }


def test_an_unknown_filter_column_is_a_400_in_dataverse_error_shape(sandbox: SandboxProcess):
    response = webapi(sandbox, "GET", "accounts?$filter=nosuchcolumn eq 1")

    assert response.status_code == 400
    assert set(response.json()["error"]) == {"code", "message"}
    assert "nosuchcolumn" in response.json()["error"]["message"]


# --- concurrency and upsert ------------------------------------------------------------------


def test_a_stale_if_match_gets_412_and_leaves_the_row_unchanged(sandbox: SandboxProcess):
    deal = _alex_open_deal(sandbox)
    path = f"opportunities({guid_for('opportunity', deal['id'])})"
    read = webapi(sandbox, "GET", path).json()
    try:
        first = webapi(
            sandbox, "PATCH", path, headers={"If-Match": read["@odata.etag"]}, json={"description": "First"}
        )
        second = webapi(
            sandbox, "PATCH", path, headers={"If-Match": read["@odata.etag"]}, json={"description": "Second"}
        )
        after = webapi(sandbox, "GET", path).json()
    finally:
        webapi(sandbox, "PATCH", path, json={"description": deal["next_step"]})

    assert first.status_code == 204
    assert second.status_code == 412
    assert second.json() == {
        "error": {
            "code": "0x80060882",
            "message": "The version of the existing record doesn't match the RowVersion property provided.",
        }
    }
    assert after["description"] == "First"
    assert after["@odata.etag"] != read["@odata.etag"]


def test_every_write_bumps_the_etag_and_the_reference_crm_sees_the_same_version(sandbox: SandboxProcess):
    deal = _alex_open_deal(sandbox)
    path = f"opportunities({guid_for('opportunity', deal['id'])})"
    before = webapi(sandbox, "GET", path).json()
    try:
        refused = webapi(sandbox, "PATCH", path, json={"closeprobability": 0})  # managers only
        changed = webapi(
            sandbox,
            "PATCH",
            path,
            headers={"Prefer": "return=representation"},
            json={"description": "changed"},
        )
    finally:
        restored = webapi(sandbox, "PATCH", path, json={"description": deal["next_step"]})
    reference = sandbox.call("alex", "get_opportunity", opportunity_id=deal["id"])["structuredContent"]

    assert refused.status_code == 403
    assert changed.status_code == 200
    assert changed.json()["@odata.etag"] == f'W/"{before["versionnumber"] + 1}"'
    assert restored.headers["ETag"] == f'W/"{before["versionnumber"] + 2}"'
    assert reference["version"] == before["versionnumber"] + 2


def test_upsert_by_alternate_key_creates_once_then_updates(sandbox: SandboxProcess):
    key = _key()
    path = f"phonecalls(new_copilotkey='{key}')"
    prefer = {"Prefer": "return=representation"}

    created = webapi(
        sandbox, "PATCH", path, headers=prefer, json=_phonecall_body("Pricing call", _acme_renewal(sandbox))
    )
    updated = webapi(
        sandbox,
        "PATCH",
        path,
        headers=prefer,
        json={"subject": "Pricing call (notes)", "new_copilotkey": "x"},
    )
    rows = [a for a in sandbox.admin("GET", "/admin/export")["activities"] if a["external_id"] == key]

    assert created.status_code == 201, created.text
    assert updated.status_code == 200, updated.text
    assert created.json()["activityid"] == updated.json()["activityid"]
    assert updated.json()["new_copilotkey"] == key  # key values in the body are ignored on update
    assert len(rows) == 1
    assert rows[0]["subject"] == "Pricing call (notes)"
    assert rows[0]["opportunity_id"] == "opp-acme-renewal"


def test_an_upsert_without_return_representation_answers_204_with_the_entity_id(sandbox: SandboxProcess):
    key = _key()
    response = webapi(
        sandbox,
        "PATCH",
        f"phonecalls(new_copilotkey='{key}')",
        json=_phonecall_body("Call", _acme_renewal(sandbox)),
    )

    assert response.status_code == 204
    entity_id = response.headers["OData-EntityId"]
    fetched = webapi(sandbox, "GET", entity_id)
    assert fetched.status_code == 200
    assert fetched.json()["new_copilotkey"] == key


def test_if_none_match_star_refuses_an_existing_key_with_412(sandbox: SandboxProcess):
    key = _key()
    path = f"phonecalls(new_copilotkey='{key}')"
    body = _phonecall_body("Create only", _acme_renewal(sandbox))

    first = webapi(sandbox, "PATCH", path, headers={"If-None-Match": "*"}, json=body)
    second = webapi(sandbox, "PATCH", path, headers={"If-None-Match": "*"}, json=body)

    assert first.status_code == 204
    assert second.status_code == 412
    assert second.json()["error"]["message"] == "A record with matching key values already exists."
    assert (
        len([a for a in sandbox.admin("GET", "/admin/export")["activities"] if a["external_id"] == key]) == 1
    )


def test_if_match_star_on_a_missing_key_is_404_and_creates_nothing(sandbox: SandboxProcess):
    key = _key()
    response = webapi(
        sandbox,
        "PATCH",
        f"phonecalls(new_copilotkey='{key}')",
        headers={"If-Match": "*"},
        json=_phonecall_body("Update only", _acme_renewal(sandbox)),
    )

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "0x80040217"
    assert not [a for a in sandbox.admin("GET", "/admin/export")["activities"] if a["external_id"] == key]


def test_a_post_answers_204_with_odata_entity_id_or_201_with_the_row(sandbox: SandboxProcess):
    plain = webapi(sandbox, "POST", "tasks", json={"subject": "Send quote", **_task_regarding(sandbox)})
    represented = webapi(
        sandbox,
        "POST",
        "tasks?$select=subject,scheduledend",
        headers={"Prefer": "return=representation"},
        json={"subject": "Book demo", "scheduledend": "2030-01-15T17:00:00Z", **_task_regarding(sandbox)},
    )

    assert plain.status_code == 204
    assert "/api/data/v9.2/tasks(" in plain.headers["OData-EntityId"]
    assert represented.status_code == 201
    assert represented.json()["scheduledend"] == "2030-01-15T17:00:00Z"


def _task_regarding(sandbox: SandboxProcess) -> dict[str, str]:
    return {"regardingobjectid_opportunity_task@odata.bind": f"/opportunities({_acme_renewal(sandbox)})"}


def test_activity_parties_bind_contacts_with_their_participation_type(sandbox: SandboxProcess):
    contact = next(
        c for c in sandbox.admin("GET", "/admin/export")["contacts"] if c["account_id"] == "acc-acme"
    )
    key = _key()
    response = webapi(
        sandbox,
        "PATCH",
        f"phonecalls(new_copilotkey='{key}')",
        headers={"Prefer": "return=representation"},
        json={
            **_phonecall_body("Call Maria", _acme_renewal(sandbox)),
            "phonecall_activity_parties": [
                {
                    "partyid_systemuser@odata.bind": f"/systemusers({user_guid('alex')})",
                    "participationtypemask": 1,
                },
                {
                    "partyid_contact@odata.bind": f"/contacts({guid_for('contact', contact['id'])})",
                    "participationtypemask": 2,
                },
            ],
        },
    )
    bad_mask = webapi(
        sandbox,
        "POST",
        "phonecalls",
        json={
            **_phonecall_body("Call", _acme_renewal(sandbox)),
            "phonecall_activity_parties": [
                {
                    "partyid_contact@odata.bind": f"/contacts({guid_for('contact', contact['id'])})",
                    "participationtypemask": 5,
                }
            ],
        },
    )

    assert response.status_code == 201, response.text
    activity_id = next(
        a["id"] for a in sandbox.admin("GET", "/admin/export")["activities"] if a["external_id"] == key
    )
    parties = [
        p
        for p in sandbox.admin("GET", "/admin/export")["activity_parties"]
        if p["activity_id"] == activity_id
    ]
    assert {(p["participation_type"], p["party_type"], p["party_id"]) for p in parties} == {
        (1, "systemuser", "u-alex"),
        (2, "contact", contact["id"]),
    }
    assert bad_mask.status_code == 400
    expanded = webapi(
        sandbox, "GET", f"phonecalls(new_copilotkey='{key}')?$expand=phonecall_activity_parties"
    ).json()["phonecall_activity_parties"]
    assert {(p["participationtypemask"], p["_partyid_value"]) for p in expanded} == {
        (1, user_guid("alex")),
        (2, guid_for("contact", contact["id"])),
    }


def test_activitypointers_expand_their_parties_as_activityparty_rows_with_the_partys_table(
    sandbox: SandboxProcess,
):
    contact = next(
        c for c in sandbox.admin("GET", "/admin/export")["contacts"] if c["account_id"] == "acc-acme"
    )
    body = {
        **_phonecall_body("Call with a party", _acme_renewal(sandbox)),
        "phonecall_activity_parties": [
            {
                "partyid_contact@odata.bind": f"/contacts({guid_for('contact', contact['id'])})",
                "participationtypemask": 2,
            }
        ],
    }
    created = webapi(sandbox, "POST", "phonecalls", headers={"Prefer": "return=representation"}, json=body)
    assert created.status_code == 201, created.text
    activity = created.json()["activityid"]

    expand = "activity_pointer_activity_parties($select=_partyid_value,participationtypemask)"
    rows = webapi(
        sandbox,
        "GET",
        f"activitypointers?$select=activityid&$filter=activityid eq {activity}&$expand={expand}",
    ).json()["value"]
    assert rows == [
        {
            "@odata.etag": rows[0]["@odata.etag"],
            "activityid": activity,
            "activity_pointer_activity_parties": [
                {
                    "activitypartyid": rows[0]["activity_pointer_activity_parties"][0]["activitypartyid"],
                    "participationtypemask": 2,
                    "_partyid_value": guid_for("contact", contact["id"]),
                    "_partyid_value@Microsoft.Dynamics.CRM.lookuplogicalname": "contact",
                }
            ],
        }
    ]
    full = webapi(
        sandbox, "GET", f"activitypointers({activity})?$expand=activity_pointer_activity_parties"
    ).json()["activity_pointer_activity_parties"]
    assert [p["_activityid_value"] for p in full] == [activity]
    # Only the activity pointer's collection has that name: a phone call's is its own.
    assert webapi(sandbox, "GET", "phonecalls?$expand=activity_pointer_activity_parties").status_code == 400


def test_a_canceled_task_is_read_only_until_reopened(sandbox: SandboxProcess):
    created = webapi(
        sandbox,
        "POST",
        "tasks",
        headers={"Prefer": "return=representation"},
        json={"subject": "Chase signature", **_task_regarding(sandbox)},
    ).json()
    path = f"tasks({created['activityid']})"

    canceled = webapi(sandbox, "PATCH", path, json={"statecode": 2, "statuscode": 6})
    edit = webapi(sandbox, "PATCH", path, json={"subject": "Edited after cancel"})
    row = next(
        a
        for a in sandbox.admin("GET", "/admin/export")["activities"]
        if a["external_id"] == created["new_copilotkey"]
    )

    assert canceled.status_code == 204
    assert edit.status_code == 400
    assert row["voided_at"] is not None  # the reference CRM sees it as voided
    assert webapi(sandbox, "GET", path).json()["statecode"] == 2


def test_a_reference_mcp_write_is_visible_through_the_web_api(sandbox: SandboxProcess):
    key = _key()
    written = sandbox.call(
        "alex",
        "upsert_activity",
        external_id=key,
        type="call",
        subject="Logged via MCP",
        opportunity_id="opp-acme-renewal",
    )["structuredContent"]["activity"]

    by_key = webapi(sandbox, "GET", f"phonecalls(new_copilotkey='{key}')")
    by_id = webapi(sandbox, "GET", f"phonecalls({guid_for('activity', written['id'])})")

    assert by_key.status_code == 200
    assert by_key.json() == by_id.json()
    assert by_key.json()["_regardingobjectid_value"] == _acme_renewal(sandbox)


# --- security ----------------------------------------------------------------------------------


def test_a_west_rep_cannot_read_or_change_an_east_account_or_its_deals(sandbox: SandboxProcess):
    east = east_account_of_diego(sandbox)
    account_guid = guid_for("account", east["id"])
    deal = next(
        o for o in sandbox.admin("GET", "/admin/export")["opportunities"] if o["account_id"] == east["id"]
    )
    deal_guid = guid_for("opportunity", deal["id"])

    listed = webapi(sandbox, "GET", "accounts?$select=name").json()["value"]
    direct = webapi(sandbox, "GET", f"accounts({account_guid})")
    patched = webapi(sandbox, "PATCH", f"opportunities({deal_guid})", json={"description": "mine now"})
    filtered = webapi(
        sandbox, "GET", f"opportunities?$filter=_parentaccountid_value eq {account_guid}"
    ).json()["value"]
    globex = webapi(sandbox, "GET", f"accounts({guid_for('account', 'acc-globex')})")
    diego = webapi(sandbox, "GET", f"accounts({account_guid})", rep="diego")

    assert account_guid not in {r["accountid"] for r in listed}
    assert direct.status_code == 403
    assert direct.json()["error"]["code"] == "0x80040220"
    assert patched.status_code == 403
    assert filtered == []
    assert globex.status_code == 200  # shared with alex
    assert diego.status_code == 200


def test_commission_reads_null_for_a_rep_and_its_value_for_the_manager(sandbox: SandboxProcess):
    path = f"opportunities({_acme_renewal(sandbox)})?$select=new_commission"

    rep = webapi(sandbox, "GET", path).json()
    manager = webapi(sandbox, "GET", path, rep="nestor").json()
    by_filter = webapi(sandbox, "GET", "opportunities?$filter=new_commission gt 0").json()["value"]

    assert rep["new_commission"] is None
    assert isinstance(manager["new_commission"], float)
    assert manager["new_commission"] > 0
    assert by_filter == []  # a secured column counts as null in a filter too


def test_writing_the_secured_commission_column_is_403(sandbox: SandboxProcess):
    response = webapi(
        sandbox, "PATCH", f"opportunities({_acme_renewal(sandbox)})", json={"new_commission": 1.0}
    )

    assert response.status_code == 403
    assert "new_commission" in response.json()["error"]["message"]


def test_only_tokens_for_the_org_url_with_user_impersonation_are_accepted(sandbox: SandboxProcess):
    reference_token = sandbox.token("alex")
    no_scope = sandbox.token("alex", ["mcp.tools"], audience=sandbox.settings.org_url)

    assert webapi(sandbox, "GET", "accounts", token=reference_token).status_code == 401
    assert webapi(sandbox, "GET", "accounts", token=no_scope).status_code == 401
    missing = webapi(sandbox, "GET", "accounts", rep=None)
    assert missing.status_code == 401
    assert "WWW-Authenticate" in missing.headers


def test_the_identity_provider_issues_org_url_tokens_on_behalf_of_the_rep(sandbox: SandboxProcess):
    settings = sandbox.settings
    user = find_user("alex")
    assert user is not None
    assertion = issue_token(settings, user=user, audience=settings.bot_app_id_uri, scopes=["access_as_user"])
    context = ssl.create_default_context(cafile=str(settings.ca_cert_path))
    scopes: dict[str, tuple[str, frozenset[str]]] = {}
    for scope in (f"{settings.org_url}/.default", f"{settings.org_url}/user_impersonation"):
        with httpx.Client(verify=context) as client:
            response = client.post(
                f"{settings.idp_base_url}/{CONTOSO.id}/oauth2/v2.0/token",
                data={
                    "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                    "client_id": settings.bot_app_id,
                    "client_secret": settings.bot_client_secret,
                    "assertion": assertion,
                    "scope": scope,
                    "requested_token_use": "on_behalf_of",
                },
            )
        assert response.status_code == 200, response.text
        token = response.json()["access_token"]
        claims = jwt.decode(token, options={"verify_signature": False})
        scopes[scope] = (claims["aud"], frozenset(claims["scp"].split()))
        assert webapi(sandbox, "GET", "WhoAmI", token=token).json()["UserId"] == user_guid("alex")

    assert set(scopes.values()) == {(settings.org_url, frozenset({"user_impersonation", "mcp.tools"}))}


# --- throttling and metadata -----------------------------------------------------------------


def test_requests_past_the_budget_get_429_with_retry_after_in_seconds(sandbox: SandboxProcess):
    with knobs(sandbox, dataverse_request_budget=3, dataverse_window_seconds=300):
        statuses = [webapi(sandbox, "GET", "WhoAmI", rep="megan").status_code for _ in range(3)]
        throttled = webapi(sandbox, "GET", "WhoAmI", rep="megan")
        other_user = webapi(sandbox, "GET", "WhoAmI", rep="diego")

    assert statuses == [200, 200, 200]
    assert throttled.status_code == 429
    assert throttled.json()["error"]["code"] == "0x80072322"
    assert 1 <= int(throttled.headers["Retry-After"]) <= 300
    assert other_user.status_code == 200  # the budget is per user


def test_sales_stage_labels_come_from_the_picklist_metadata(sandbox: SandboxProcess):
    response = webapi(
        sandbox,
        "GET",
        "EntityDefinitions(LogicalName='opportunity')/Attributes(LogicalName='salesstage')"
        "/Microsoft.Dynamics.CRM.PicklistAttributeMetadata?$select=LogicalName&$expand=OptionSet",
    )

    assert response.status_code == 200, response.text
    options = response.json()["OptionSet"]["Options"]
    assert [(o["Value"], o["Label"]["UserLocalizedLabel"]["Label"]) for o in options] == list(
        enumerate(OPEN_STAGES)
    )


def test_the_activity_alternate_key_is_published_in_entity_metadata(sandbox: SandboxProcess):
    keys = webapi(sandbox, "GET", "EntityDefinitions(LogicalName='phonecall')/Keys").json()["value"]
    concurrency = webapi(
        sandbox, "GET", "EntityDefinitions(LogicalName='opportunity')?$select=IsOptimisticConcurrencyEnabled"
    ).json()

    assert [k["KeyAttributes"] for k in keys] == [[sandbox.settings.dataverse_activity_key]]
    assert keys[0]["EntityKeyIndexStatus"] == "Active"
    assert concurrency["IsOptimisticConcurrencyEnabled"] is True


KEY_COLUMN_BODY = {
    "@odata.type": "Microsoft.Dynamics.CRM.StringAttributeMetadata",
    "SchemaName": "new_copilotkey",
    "MaxLength": 100,
}
KEY_BODY = {"SchemaName": "new_copilotkey_key", "KeyAttributes": ["new_copilotkey"]}


def test_only_an_admin_creates_the_key_column_and_its_alternate_key_and_only_once(sandbox):
    with knobs(sandbox, dataverse_key_column_present=False):
        attribute = "EntityDefinitions(LogicalName='task')/Attributes(LogicalName='new_copilotkey')"
        assert webapi(sandbox, "GET", attribute).status_code == 404
        assert webapi(sandbox, "GET", "EntityDefinitions(LogicalName='task')/Keys").json()["value"] == []
        # A key over a column that does not exist yet is refused, even for the admin.
        early = webapi(sandbox, "POST", "EntityDefinitions(LogicalName='task')/Keys", "nestor", json=KEY_BODY)
        assert early.status_code == 400, early.text

        refused = webapi(
            sandbox, "POST", "EntityDefinitions(LogicalName='task')/Attributes", "alex", json=KEY_COLUMN_BODY
        )
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "0x80040220"
        assert "System Administrator" in refused.json()["error"]["message"]

        created = webapi(
            sandbox,
            "POST",
            "EntityDefinitions(LogicalName='task')/Attributes",
            "nestor",
            json=KEY_COLUMN_BODY,
        )
        assert created.status_code == 204, created.text
        assert "/Attributes(" in created.headers["OData-EntityId"]
        assert webapi(sandbox, "GET", attribute).json()["MaxLength"] == 100
        again = webapi(
            sandbox,
            "POST",
            "EntityDefinitions(LogicalName='task')/Attributes",
            "nestor",
            json=KEY_COLUMN_BODY,
        )
        assert again.status_code == 400

        key = webapi(sandbox, "POST", "EntityDefinitions(LogicalName='task')/Keys", "nestor", json=KEY_BODY)
        assert key.status_code == 204, key.text
        keys = webapi(sandbox, "GET", "EntityDefinitions(LogicalName='task')/Keys").json()["value"]
        assert [(k["KeyAttributes"], k["EntityKeyIndexStatus"]) for k in keys] == [
            (["new_copilotkey"], "Active")
        ]
    # Setting the knobs again puts the organisation back as they say (the key present).
    assert webapi(sandbox, "GET", "EntityDefinitions(LogicalName='phonecall')/Keys").json()["value"]


def test_the_allowed_mcp_clients_table_decides_who_may_call_the_mcp_endpoint(sandbox):
    other = "0c412cc3-0dd6-449b-987f-05b053db9457"
    ours = sandbox.settings.bot_app_id
    with knobs(sandbox, dataverse_allowed_mcp_clients=[other]):
        rows = webapi(sandbox, "GET", "allowedmcpclients", "nestor").json()["value"]
        assert [(r["applicationid"], r["isenabled"]) for r in rows] == [(other, True)]
        assert webapi(sandbox, "GET", "allowedmcpclients", "alex").status_code == 403
        added = webapi(
            sandbox, "POST", "allowedmcpclients", "nestor", json={"applicationid": ours, "name": "copilot"}
        )
        assert added.status_code == 204, added.text
        filtered = webapi(sandbox, "GET", f"allowedmcpclients?$filter=applicationid eq '{ours}'", "nestor")
        (row,) = filtered.json()["value"]
        assert row["isenabled"] is False  # the column's default
        token = issue_token(
            sandbox.settings,
            user=find_user("alex"),  # type: ignore[arg-type]
            audience=sandbox.settings.org_url,
            scopes=["user_impersonation", "mcp.tools"],
        )
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        headers = {"authorization": f"Bearer {token}", "accept": "application/json, text/event-stream"}
        url = f"{sandbox.settings.http_base_url}/api/mcp"
        assert httpx.post(url, json=body, headers=headers, timeout=30).status_code == 403
        enabled = webapi(
            sandbox,
            "PATCH",
            f"allowedmcpclients({row['allowedmcpclientid']})",
            "nestor",
            json={"isenabled": True},
        )
        assert enabled.status_code == 204, enabled.text
        assert httpx.post(url, json=body, headers=headers, timeout=30).status_code == 200
