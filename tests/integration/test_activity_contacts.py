"""An activity's contacts, read back on both CRM profiles, against the real sandbox over HTTP.

A call is logged naming a contact through the connector's own writer (the reference CRM's
``upsert_activity`` with ``contact_ids``; Dataverse's ``phonecall`` with its activity parties),
then read as the rep through the copilot's typed reads (the reference CRM's ``list_activities``;
Dataverse's ``activitypointers`` with ``activity_pointer_activity_parties``): it carries the
contact's id and name, and a brief's line for it names the contact, the same on both profiles.
The call happened at a named moment (the seeded meeting's day), never read off the wall clock.
"""

from __future__ import annotations

import re
from contextlib import AsyncExitStack
from datetime import datetime, timedelta
from typing import Any

import pytest

from copilot.briefs.compose import AccountReads, account_items
from copilot.context import crm_gateway
from copilot.crm import connector
from copilot.crm.dataverse import DataverseConfig, DataverseWriter
from copilot.crm.reference import ReferenceWriter
from copilot.crm.types import ActivityRequest, CrmWriter
from copilot.settings import Settings
from copilot.vocabulary import current_vocabulary
from sandbox.dataverse.ids import guid_for
from tests.support.copilot_env import copilot_settings, prepare_database, sign_in
from tests.support.dataverse_env import dataverse_settings
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

MEETING = "Acme renewal pricing review"
"""alex's seeded meeting with Acme (the day after the seed day, 15:00 UTC)."""
SUBJECT = "Fleet expansion budget call"
"""Names no one: the contact's name on the brief's line comes from the activity's contacts."""


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    """A sandbox of this module's own, seeded from the named day: its calendar and activities."""
    return pinned_sandbox


@pytest.fixture(params=["reference", "dataverse"])
async def profile(request: pytest.FixtureRequest, database_url: str, sandbox: SandboxProcess) -> Settings:
    from copilot.middleware.resilience import reset_breakers

    reset_breakers()
    if request.param == "dataverse":
        settings = dataverse_settings(database_url, sandbox)
    else:
        settings = copilot_settings(database_url, sandbox)
    await prepare_database(settings)
    return settings


def _id(settings: Settings, kind: str, sandbox_id: str) -> str:
    """The id the copilot sees for a sandbox record on this profile."""
    return guid_for(kind, sandbox_id) if settings.crm_kind == "dataverse" else sandbox_id


def _meeting(sandbox: SandboxProcess) -> dict[str, Any]:
    events = sandbox.admin("GET", "/admin/export")["events"]
    return next(e for e in events if e["subject"] == MEETING)


def _start(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["start_at"].replace("Z", "+00:00"))


async def test_a_call_logged_with_a_contact_reads_back_with_the_contacts_id_and_name_and_the_brief_names_them(
    profile: Settings, sandbox: SandboxProcess
) -> None:
    state = sandbox.admin("GET", "/admin/export")
    sarah = next(c for c in state["contacts"] if c["account_id"] == "acc-acme" and c["name"] == "Sarah Chen")
    sarah_id = _id(profile, "contact", sarah["id"])
    deal_id = _id(profile, "opportunity", "opp-acme-expansion")
    meeting = _meeting(sandbox)
    rep = await sign_in(profile, "alex")

    async with AsyncExitStack() as stack:
        writer: CrmWriter
        if profile.crm_kind == "dataverse":

            async def token() -> str:
                return await rep.broker.crm_token(write=True)

            writer = DataverseWriter(DataverseConfig.from_settings(profile), token, current_vocabulary())
        else:
            writer = ReferenceWriter(crm_gateway(stack, profile, rep.broker, write=True))
        logged = await writer.create_activity(
            ActivityRequest(
                key=f"test-activity-contacts:{profile.crm_kind}",
                type="call",
                subject=SUBJECT,
                notes="Budget confirmed for the fleet expansion.",
                occurred_at=_start(meeting) - timedelta(hours=3),
                account_id=_id(profile, "account", "acc-acme"),
                opportunity_id=deal_id,
                contact_ids=(sarah_id,),
            )
        )
    assert logged.created
    call_id = str(logged.activity["id"])

    # Read back as the rep, through the copilot's own typed reads (the deal's and the account's).
    async with AsyncExitStack() as stack:
        reads = connector.reads(stack, profile, rep.broker)
        for activities in (
            await reads.activities(opportunity_id=deal_id, limit=10),
            await reads.activities(account_id=_id(profile, "account", "acc-acme"), limit=10),
        ):
            call = next(a for a in activities if a["id"] == call_id)
            assert call["contacts"] == [{"id": sarah_id, "name": "Sarah Chen"}]
        account = await reads.account(_id(profile, "account", "acc-acme"))
        # An activity that names no one has no contacts (the seeded Acme activities).
        assert all(a["contacts"] == [] for a in activities if a["id"] != call_id and a["subject"] != SUBJECT)

    # A brief's line for the call names her, as on the reference profile (composed from the call
    # as read; its date is when it happened, which the sandbox's Dataverse face gives an open call
    # as its creation, so the date is not compared).
    line = next(
        i for i in account_items(AccountReads(account, [], [], [call], {})) if i.section == "activity"
    )
    assert re.fullmatch(
        rf"\d{{4}}-\d{{2}}-\d{{2}} call: {SUBJECT} with Sarah Chen \[{call_id}\]", line.text
    ), line.text
