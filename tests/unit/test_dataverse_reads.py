"""The Dataverse reads' guards, on the wire (``httpx.MockTransport``): an id that is no GUID never
reaches a query, and paging follows ``@odata.nextLink`` only back to the environment (the rep's
token goes nowhere else). The reads themselves are tested end to end in
``tests/integration/test_dataverse_briefs.py``."""

from __future__ import annotations

import httpx
import pytest

from copilot.crm.dataverse import DataverseConfig
from copilot.crm.dataverse_reads import DataverseReads
from copilot.errors import CrmCallError
from copilot.settings import Settings

ORG = "https://org.crm.dynamics.com"
ACCOUNT = "0b3c6a52-0000-4000-8000-0000000000a1"


async def _token() -> str:
    return "rep-obo-token"


def _reads(handler: httpx.MockTransport) -> DataverseReads:
    config = DataverseConfig.from_settings(Settings(CRM_KIND="dataverse", CRM_URL=ORG))
    return DataverseReads(config, _token, "dataverse:test", transport=handler)


def _recording(pages: dict[str, dict[str, object]]) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if "EntityDefinitions" in request.url.path:
            return httpx.Response(404, json={"error": {"code": "0x80040217", "message": "none"}})
        return httpx.Response(200, json=pages.get(str(request.url.params.get("page", "1")), {"value": []}))

    return httpx.MockTransport(handle), sent


@pytest.mark.parametrize(
    "record_id", ["acc-acme", f"{ACCOUNT}) or (statecode eq 1", "", f"{ACCOUNT}/../systemusers"]
)
async def test_an_id_that_is_no_guid_is_not_found_without_a_query(record_id: str) -> None:
    transport, sent = _recording({})
    reads = _reads(transport)

    for read in (
        reads.record("opportunity", record_id),
        reads.contacts(record_id),
        reads.open_opportunities(account_id=record_id),
        reads.activities(opportunity_id=record_id),
    ):
        with pytest.raises(CrmCallError) as refused:
            await read
        assert refused.value.crm_code == "not_found"
    assert [r for r in sent if "EntityDefinitions" not in r.url.path] == []


async def test_paging_follows_next_links_back_to_the_environment_only() -> None:
    base = f"{ORG}/api/data/v9.2"
    transport, sent = _recording(
        {
            "1": {
                "value": [{"accountid": ACCOUNT, "name": "Acme"}],
                "@odata.nextLink": f"{base}/accounts?page=2",
            },
            "2": {
                "value": [{"accountid": "0b3c6a52-0000-4000-8000-0000000000a2", "name": "Globex"}],
                "@odata.nextLink": "https://elsewhere.example/api/data/v9.2/accounts?page=3",
            },
        }
    )

    accounts = await _reads(transport).accounts()

    assert [a["name"] for a in accounts] == ["Acme", "Globex"]
    queries = [r for r in sent if "EntityDefinitions" not in r.url.path]
    assert [r.url.host for r in queries] == ["org.crm.dynamics.com", "org.crm.dynamics.com"]
    assert all(r.headers["Authorization"] == "Bearer rep-obo-token" for r in queries)


async def test_a_won_deal_in_the_audit_history_moves_from_the_stage_it_had_to_won_though_only_its_state_changed() -> (
    None
):
    """Dynamics 365 audits a close as a ``statecode`` change: the sales stage appears only where it
    changed, so the stage it was won from is the one the history gave it last."""
    deal = "0b3c6a52-0000-4000-8000-0000000000b1"
    user = "0b3c6a52-0000-4000-8000-0000000000c1"

    def detail(at: str, operation: int, old: dict[str, object], new: dict[str, object]) -> dict[str, object]:
        record = {"createdon": at, "operation": operation, "_userid_value": user}
        return {"AuditRecord": record, "OldValue": old, "NewValue": new}

    def handle(request: httpx.Request) -> httpx.Response:
        if "EntityDefinitions" in request.url.path:
            return httpx.Response(404, json={"error": {"code": "0x80040217", "message": "none"}})
        if request.url.path.endswith(f"systemusers({user})"):
            return httpx.Response(200, json={"systemuserid": user, "fullname": "Nestor Wilke"})
        assert "RetrieveRecordChangeHistory" in request.url.path
        details = [
            detail(
                "2026-12-08T10:00:00Z", 2, {"statecode": 0}, {"statecode": 1, "actualclosedate": "2026-12-08"}
            ),
            detail("2026-11-01T10:00:00Z", 1, {}, {"name": "Fleet", "salesstage": 2, "statecode": 0}),
        ]
        return httpx.Response(200, json={"AuditDetailCollection": {"AuditDetails": details}})

    history = await _reads(httpx.MockTransport(handle)).history("opportunity", deal)

    assert [v["operation"] for v in history] == ["create", "update"]
    assert history[1]["by"] == {"id": user, "name": "Nestor Wilke"}
    assert history[1]["changes"] == [{"field": "stage", "old": "Propose", "new": "Closed Won"}]


async def test_an_activitys_contacts_are_its_contact_parties_the_rep_can_read_named_from_their_contacts() -> (
    None
):
    """The parties come expanded with the activities (their table annotated on request); a user
    party (the call's From) is not a contact, and a contact the CRM does not return to the rep
    is left out, as the reference CRM leaves it out."""
    deal = "0b3c6a52-0000-4000-8000-0000000000b1"
    call = "0b3c6a52-0000-4000-8000-0000000000d1"
    sarah, hidden = "0b3c6a52-0000-4000-8000-0000000000e1", "0b3c6a52-0000-4000-8000-0000000000e2"
    user = "0b3c6a52-0000-4000-8000-0000000000c1"
    table = "_partyid_value@Microsoft.Dynamics.CRM.lookuplogicalname"
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if "EntityDefinitions" in request.url.path:
            return httpx.Response(404, json={"error": {"code": "0x80040217", "message": "none"}})
        if request.url.path.endswith("/contacts"):
            assert request.url.params["$filter"] == f"contactid eq {sarah} or contactid eq {hidden}"
            return httpx.Response(200, json={"value": [{"contactid": sarah, "fullname": "Sarah Chen"}]})
        parties = [
            {"participationtypemask": 1, "_partyid_value": user, table: "systemuser"},
            {"participationtypemask": 2, "_partyid_value": sarah, table: "contact"},
            {"participationtypemask": 2, "_partyid_value": hidden, table: "contact"},
        ]
        row = {
            "activityid": call,
            "activitytypecode": "phonecall",
            "subject": "Budget call",
            "actualend": "2026-12-08T10:00:00Z",
            "_regardingobjectid_value": deal,
            "statecode": 1,
            "activity_pointer_activity_parties": parties,
        }
        return httpx.Response(200, json={"value": [row]})

    activities = await _reads(httpx.MockTransport(handle)).activities(opportunity_id=deal)

    assert activities[0]["contacts"] == [{"id": sarah, "name": "Sarah Chen"}]
    query = next(r for r in sent if r.url.path.endswith("/activitypointers"))
    assert query.url.params["$expand"].startswith("activity_pointer_activity_parties(")
    assert 'odata.include-annotations="Microsoft.Dynamics.CRM.lookuplogicalname"' in query.headers["Prefer"]
