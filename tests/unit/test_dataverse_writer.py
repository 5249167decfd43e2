"""The Dataverse writer against the Web API's wire protocol (tests/support/fake_dataverse.py)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from copilot.crm.dataverse import DataverseConfig, DataverseWriter, load_vocabulary, version_of
from copilot.crm.types import ActivityRef, ActivityRequest, Conflict, OpportunityUpdate, Updated
from copilot.errors import CrmCallError, CrmUnavailable
from copilot.settings import Settings
from copilot.vocabulary import Vocabulary
from tests.support.fake_dataverse import CONCURRENCY, KEY_COLUMN, FakeDataverse

OPP = "0b3c6a52-0000-4000-8000-000000000001"
ACCOUNT = "0b3c6a52-0000-4000-8000-0000000000a1"
CONTACT = "0b3c6a52-0000-4000-8000-0000000000c1"
KEY = "thread-1:call_1"
VOCABULARY = Vocabulary(
    stages=("Qualify", "Develop", "Propose", "Close"),
    stage_codes={"Qualify": 0, "Develop": 1, "Propose": 2, "Close": 3},
    activity_types=("call", "meeting", "task"),
)


def _config() -> DataverseConfig:
    return DataverseConfig.from_settings(
        Settings(CRM_KIND="dataverse", CRM_URL="https://org.crm.dynamics.com")
    )


async def _token() -> str:
    return "rep-obo-token"


@pytest.fixture
def crm() -> FakeDataverse:
    fake = FakeDataverse()
    fake.add(
        "opportunities",
        {
            "opportunityid": OPP,
            "name": "Acme renewal",
            "salesstage": 1,
            "estimatedvalue": 50000.0,
            "estimatedclosedate": "2026-12-15",
            "stepname": "Send the quote",
            "closeprobability": 40,
            "transactioncurrencyid": {"isocurrencycode": "USD"},
        },
    )
    fake.add("accounts", {"accountid": ACCOUNT, "name": "Acme"})
    fake.add(
        "contacts",
        {
            "contactid": CONTACT,
            "fullname": "Dana Reyes",
            "emailaddress1": "dana@acme.example",
            "jobtitle": "CTO",
        },
    )
    return fake


def _writer(crm: FakeDataverse) -> DataverseWriter:
    return DataverseWriter(_config(), _token, VOCABULARY, transport=crm.transport())


def _version(crm: FakeDataverse, entity_set: str, row_id: str) -> int:
    version = version_of(crm.tables[entity_set][row_id]["@odata.etag"])
    assert version is not None
    return version


async def test_a_read_takes_the_version_from_the_etag_and_the_stage_label_from_its_option_value(crm):
    record = await _writer(crm).read("opportunity", OPP)

    assert record.version == _version(crm, "opportunities", OPP)
    assert record.values["stage"] == "Develop"
    assert record.values["amount"] == 50000.0
    assert record.values["currency"] == "USD"
    assert record.name == "Acme renewal"
    # Dataverse does not say what the rep may do: the write itself decides.
    assert record.access.edit is None
    sent = crm.requests[-1]
    assert sent.headers["Authorization"] == "Bearer rep-obo-token"
    assert sent.headers["OData-Version"] == "4.0"
    assert sent.headers["Accept"] == "application/json"


async def test_an_update_is_a_patch_under_if_match_of_the_version_read_with_the_stage_as_its_option_value(
    crm,
):
    version = _version(crm, "opportunities", OPP)

    result = await _writer(crm).update_opportunity(
        OpportunityUpdate(
            key=KEY,
            opportunity_id=OPP,
            expected_version=version,
            changes={"stage": "Propose", "amount": 62000.0},
            previous={"stage": "Develop", "amount": 50000.0},
        )
    )

    assert isinstance(result, Updated)
    assert not result.replayed
    assert result.opportunity["stage"] == "Propose"
    assert result.opportunity["version"] > version
    assert result.previous == {"stage": "Develop", "amount": 50000.0}
    patch = next(r for r in crm.requests if r.method == "PATCH")
    assert patch.headers["If-Match"] == f'W/"{version}"'
    assert patch.headers["Prefer"] == "return=representation"
    body = json.loads(patch.content)
    assert body == {"salesstage": 2, "estimatedvalue": 62000.0, KEY_COLUMN: KEY}
    assert crm.tables["opportunities"][OPP]["salesstage"] == 2


async def test_a_stale_version_is_a_conflict_with_the_current_values_and_nothing_written(crm):
    version = _version(crm, "opportunities", OPP)
    crm.bump("opportunities", OPP, estimatedvalue=70000.0)

    result = await _writer(crm).update_opportunity(
        OpportunityUpdate(key=KEY, opportunity_id=OPP, expected_version=version, changes={"stage": "Close"})
    )

    assert isinstance(result, Conflict)
    assert result.current is not None
    assert result.current["amount"] == 70000.0
    assert result.current["stage"] == "Develop"
    assert crm.tables["opportunities"][OPP]["salesstage"] == 1
    refused = [r for r in crm.requests if r.method == "PATCH"]
    assert len(refused) == 1


async def test_a_repeat_of_an_applied_update_is_replayed_by_its_key_not_reported_as_a_conflict(crm):
    version = _version(crm, "opportunities", OPP)
    update = OpportunityUpdate(
        key=KEY, opportunity_id=OPP, expected_version=version, changes={"stage": "Close"}
    )
    writer = _writer(crm)
    await writer.update_opportunity(update)

    # The answer was lost (a timeout, a crash): the same request again meets a newer ETag.
    again = await writer.update_opportunity(update)

    assert isinstance(again, Updated)
    assert again.replayed
    assert again.opportunity["stage"] == "Close"


async def test_find_update_recognises_the_key_of_the_last_copilot_write_and_nothing_else(crm):
    writer = _writer(crm)
    assert await writer.find_update(KEY, OPP) is None
    await writer.update_opportunity(
        OpportunityUpdate(
            key=KEY,
            opportunity_id=OPP,
            expected_version=_version(crm, "opportunities", OPP),
            changes={"amount": 1.0},
        )
    )

    found = await writer.find_update(KEY, OPP)

    assert found is not None
    assert found.replayed
    assert found.opportunity["amount"] == 1.0
    assert await writer.find_update("thread-1:call_2", OPP) is None


async def test_logging_a_call_is_a_create_only_upsert_on_the_key_regarding_the_opportunity_with_contacts_as_to(
    crm,
):
    result = await _writer(crm).create_activity(
        ActivityRequest(
            key="thread-1:call_'7",
            type="call",
            subject="Pricing call",
            notes="Asked for a quote",
            opportunity_id=OPP,
            contact_ids=(CONTACT,),
        )
    )

    assert result.created
    assert result.activity["type"] == "call"
    assert result.activity["subject"] == "Pricing call"
    assert result.activity["regarding_id"] == OPP
    create = crm.requests[-1]
    assert create.method == "PATCH"
    # The key column in the URL, its quote doubled (OData) and percent-encoded.
    assert (
        create.url.raw_path.decode()
        .split("?")[0]
        .endswith("/api/data/v9.2/phonecalls(new_copilotkey='thread-1%3Acall_''7')")
    )
    assert create.headers["If-None-Match"] == "*"
    assert create.headers["Prefer"] == "return=representation"
    body = json.loads(create.content)
    assert body["regardingobjectid_opportunity_phonecall@odata.bind"] == f"/opportunities({OPP})"
    assert body["phonecall_activity_parties"] == [
        {"partyid_contact@odata.bind": f"/contacts({CONTACT})", "participationtypemask": 2}
    ]
    assert KEY_COLUMN not in body
    (stored,) = crm.tables["phonecalls"].values()
    assert stored[KEY_COLUMN] == "thread-1:call_'7"


async def test_logging_the_same_key_again_returns_the_stored_activity_and_creates_no_second(crm):
    request = ActivityRequest(key=KEY, type="meeting", subject="Kick-off", account_id=ACCOUNT)
    writer = _writer(crm)
    first = await writer.create_activity(request)

    second = await writer.create_activity(request)

    assert not second.created
    assert second.activity["id"] == first.activity["id"]
    assert len(crm.tables["appointments"]) == 1
    statuses = [r.method for r in crm.requests]
    assert statuses == ["PATCH", "PATCH", "GET"]  # the 412 "already exists", then the read by key


async def test_a_task_is_due_on_its_scheduledend(crm):
    due = dt.date(2026, 12, 1)

    result = await _writer(crm).create_activity(
        ActivityRequest(key=KEY, type="task", subject="Send the quote", account_id=ACCOUNT, due=due)
    )

    body = json.loads(crm.requests[-1].content)
    assert body["scheduledend"] == "2026-12-01T00:00:00+00:00"
    assert body["regardingobjectid_account_task@odata.bind"] == f"/accounts({ACCOUNT})"
    assert "task_activity_parties" not in body
    assert result.activity["due"] == "2026-12-01T00:00:00+00:00"


async def test_a_server_answering_204_with_odata_entityid_is_read_back_by_the_key(crm):
    crm.honour_prefer = False

    result = await _writer(crm).create_activity(
        ActivityRequest(key=KEY, type="call", subject="Intro", account_id=ACCOUNT)
    )

    assert result.created
    assert result.activity["subject"] == "Intro"
    assert [r.method for r in crm.requests] == ["PATCH", "GET"]


async def test_an_activity_type_the_crm_does_not_log_is_refused_before_any_request(crm):
    with pytest.raises(CrmCallError) as refused:
        await _writer(crm).create_activity(
            ActivityRequest(key=KEY, type="email", subject="x", account_id=ACCOUNT)
        )

    assert refused.value.crm_code == "validation"
    assert crm.requests == []


async def test_throttling_is_a_transient_outage_carrying_the_retry_after_delay(crm):
    crm.budget = 0
    crm.retry_after = 12

    with pytest.raises(CrmUnavailable) as raised:
        await _writer(crm).read("opportunity", OPP)

    assert raised.value.retry_after == 12.0


async def test_a_privilege_error_is_permission_denied(crm):
    crm.forbidden_sets.add("opportunities")

    with pytest.raises(CrmCallError) as refused:
        await _writer(crm).read("opportunity", OPP)

    assert refused.value.crm_code == "permission_denied"


def test_a_refused_write_tells_the_rep_plainly_names_the_privilege_and_echoes_no_guid():
    import httpx

    from copilot.crm.dataverse import refusal

    body = {
        "error": {
            "code": "0x80040220",
            "message": "Principal user (Id=64c420a3-3398-56df-8118-19b75e4e1c49, type=8) is missing"
            " prvWriteOpportunity privilege on record opportunity With Id = 063d1b16-13c8-53eb-b3db-24c83ae2ed94",
        }
    }
    written = refusal(httpx.Response(403, json=body), writing=True)
    read = refusal(httpx.Response(403, json=body))

    assert isinstance(written, CrmCallError)
    assert written.crm_code == "permission_denied"
    assert written.message == (
        "the CRM does not let you change this record (your CRM security role lacks"
        " prvWriteOpportunity on it); nothing was written"
    )
    assert "nothing was written" not in read.message
    assert "063d1b16" not in read.message
    assert "64c420a3" not in read.message


async def test_a_missing_record_is_not_found_with_dataverses_code(crm):
    with pytest.raises(CrmCallError) as refused:
        await _writer(crm).update_opportunity(
            OpportunityUpdate(
                key=KEY,
                opportunity_id="0b3c6a52-0000-4000-8000-00000000dead",
                expected_version=1,
                changes={"amount": 1.0},
            )
        )

    assert refused.value.crm_code == "not_found"
    assert refused.value.details["dataverse_code"] == "0x80040217"


async def test_voiding_cancels_the_activity_and_voiding_it_again_writes_nothing(crm):
    writer = _writer(crm)
    logged = await writer.create_activity(
        ActivityRequest(key=KEY, type="task", subject="Call back", account_id=ACCOUNT)
    )
    ref = ActivityRef(id=logged.activity["id"], type="task")

    voided = await writer.void_activity(ref, "undone by its rep")
    patches = sum(r.method == "PATCH" for r in crm.requests)
    again = await writer.void_activity(ref, "undone by its rep")

    assert voided["state"] == "canceled"
    row = crm.tables["tasks"][logged.activity["id"]]
    assert (row["statecode"], row["statuscode"]) == (2, 6)
    void = [r for r in crm.requests if r.method == "PATCH"][-1]
    assert json.loads(void.content) == {"statecode": 2, "statuscode": 6}
    # Never creates a row that is gone.
    assert void.headers["If-Match"] == "*"
    assert again["state"] == "canceled"
    assert sum(r.method == "PATCH" for r in crm.requests) == patches


async def test_the_vocabulary_comes_from_the_stage_option_set_and_the_updatable_columns(crm):
    vocabulary = await load_vocabulary(_config(), _token, transport=crm.transport())

    assert vocabulary.stages == ("Qualify", "Develop", "Propose", "Close")
    assert vocabulary.stage_codes["Close"] == 3
    assert vocabulary.activity_types == ("call", "meeting", "task")
    # The fake's stepname is not valid for update: next_step is not offered.
    assert vocabulary.opportunity_fields == ("stage", "close_date", "amount")
    picklist = crm.requests[0]
    assert picklist.url.path.endswith(
        "EntityDefinitions(LogicalName='opportunity')/Attributes(LogicalName='salesstage')"
        "/Microsoft.Dynamics.CRM.PicklistAttributeMetadata"
    )
    assert picklist.url.params["$expand"] == "OptionSet($select=Options)"


async def test_without_metadata_the_vocabulary_is_dataverses_default_option_set(crm):
    crm.serve_metadata = False

    vocabulary = await load_vocabulary(_config(), _token, transport=crm.transport())

    assert vocabulary.stage_codes == {"Qualify": 0, "Develop": 1, "Propose": 2, "Close": 3}
    assert vocabulary.source.startswith("fallback")


def test_the_concurrency_error_the_fake_sends_is_dataverses_row_version_fault():
    # The writer tells a version conflict from other 412s by this code.
    from copilot.crm.dataverse import CONCURRENCY_MISMATCH

    assert CONCURRENCY == CONCURRENCY_MISMATCH
