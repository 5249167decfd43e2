"""Deals at risk, computed from the rep's own CRM reads (``copilot/insight/risk.py``), against the
real sandbox over MCP (reference) and over the Dataverse Web API (``RetrieveRecordChangeHistory``).

Each test makes a deal risky through the CRM's own write tools (as its owner, alex), then reads
the report as alex: the deal appears with that signal, citing the deal's id; a healthy deal does
not; a deal of an account alex may not see never appears. The moment is pinned
(``tests/support/moments.py``): the sandbox is seeded from ``SEED_DAY``.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from datetime import date, timedelta
from typing import Any

import pytest

from copilot.cited_text import check_citations
from copilot.crm import connector
from copilot.errors import CrmCallError
from copilot.evidence import Evidence
from copilot.insight.risk import NOTES_SKIPPED, RiskReport, RiskSettings, deal_risks, report_text
from copilot.settings import Settings
from sandbox.dataverse.ids import guid_for
from tests.support.copilot_env import sign_in
from tests.support.dataverse import east_account_of_diego
from tests.support.dataverse_env import dataverse_settings
from tests.support.moments import SEED_DAY, SEED_MIDNIGHT
from tests.support.sandbox_process import SandboxProcess

pytestmark = pytest.mark.integration

NOW = SEED_MIDNIGHT + timedelta(hours=12)
HEALTHY = "opp-acme-renewal"
"""Proposal since 6 days, a call 2 days ago, closing in 45 days, never pushed or lowered."""


@pytest.fixture(scope="module")
def sandbox(pinned_sandbox: SandboxProcess) -> SandboxProcess:
    return pinned_sandbox


async def _report(
    settings: Settings, handle: str = "alex", thresholds: RiskSettings | None = None, **scope: Any
) -> RiskReport:
    rep = await sign_in(settings, handle)
    async with AsyncExitStack() as stack:
        evidence = Evidence(connector.reads(stack, settings, rep.broker))
        report = await deal_risks(evidence, thresholds or RiskSettings(), NOW, today=SEED_DAY, **scope)
        check = check_citations(report_text(report), evidence.messages)
    assert check.unverified == ()
    return report


def _kinds(report: RiskReport, deal_id: str) -> dict[str, tuple[str, ...]]:
    return {s.kind: s.cited for d in report.deals if d.id == deal_id for s in d.signals}


def _alex_open_deals(sandbox: SandboxProcess) -> list[dict[str, Any]]:
    state = sandbox.admin("GET", "/admin/export")
    open_stages = {"Prospecting", "Qualification", "Proposal", "Negotiation"}
    return sorted(
        (o for o in state["opportunities"] if o["owner_id"] == "u-alex" and o["stage"] in open_stages),
        key=lambda o: o["id"],
    )


def _update(sandbox: SandboxProcess, deal_id: str, **changes: Any) -> None:
    current = sandbox.call("alex", "get_opportunity", opportunity_id=deal_id)["structuredContent"]
    result = sandbox.call(
        "alex",
        "update_opportunity",
        opportunity_id=deal_id,
        expected_version=current["version"],
        changes=changes,
    )
    assert result["isError"] is False, result


async def test_a_deal_made_risky_by_each_signal_appears_with_that_signal_cited_and_a_healthy_one_does_not(
    sandbox: SandboxProcess, copilot_settings: Settings
):
    before = await _report(copilot_settings)
    assert _kinds(before, HEALTHY) == {}
    assert NOTES_SKIPPED in before.skipped
    candidates = [o for o in _alex_open_deals(sandbox) if not o["id"].startswith("opp-acme")]
    clean = [o for o in candidates if not _kinds(before, o["id"])]
    assert len(clean) >= 4, [o["id"] for o in candidates]
    clean = clean[:4]
    activities = sandbox.admin("GET", "/admin/export")["activities"]
    recent = {
        a["opportunity_id"] for a in activities if a["occurred_at"] >= f"{SEED_DAY - timedelta(days=14)}"
    }
    quiet = next(o["id"] for o in clean if o["id"] not in recent)
    passed, pushed, lowered = (o["id"] for o in clean if o["id"] != quiet)

    _update(sandbox, passed, close_date=str(SEED_DAY - timedelta(days=3)))
    _update(sandbox, quiet, close_date=str(SEED_DAY + timedelta(days=10)))
    deal = next(o for o in candidates if o["id"] == pushed)
    for weeks in (1, 2):
        _update(
            sandbox, pushed, close_date=str(date.fromisoformat(deal["close_date"]) + timedelta(weeks=weeks))
        )
    amount = next(o for o in candidates if o["id"] == lowered)["amount"]
    _update(sandbox, lowered, amount=round(amount * 0.8, 2))

    after = await _report(copilot_settings)
    for deal_id, kind in (
        (passed, "close_date_passed"),
        (quiet, "closing_quiet"),
        (pushed, "close_date_pushed"),
        (lowered, "amount_lowered"),
    ):
        kinds = _kinds(after, deal_id)
        assert kind in kinds, (deal_id, kinds)
        assert deal_id in kinds[kind]
    assert _kinds(after, HEALTHY) == {}
    pushed_text = next(s.text for d in after.deals if d.id == pushed for s in d.signals)
    assert "moved later 2 times" in pushed_text
    assert "Alex Wilber" in pushed_text


async def test_time_in_stage_is_read_from_the_history_and_its_threshold_is_a_setting(
    sandbox: SandboxProcess, copilot_settings: Settings
):
    # The renewal moved into Proposal six days before the seed day (the CRM's history says so).
    strict = RiskSettings(stage_days={"Proposal": 3})
    assert "stage_stalled" not in _kinds(await _report(copilot_settings, account_id="acc-acme"), HEALTHY)
    kinds = _kinds(await _report(copilot_settings, thresholds=strict, account_id="acc-acme"), HEALTHY)
    assert kinds == {"stage_stalled": (HEALTHY,)}
    lenient = RiskSettings(
        closing_within_days=1, quiet_days=1, close_date_pushes=5, stage_days={}, default_stage_days=3650
    )
    report = await _report(copilot_settings, thresholds=lenient)
    assert {s.kind for d in report.deals for s in d.signals} <= {"close_date_passed", "amount_lowered"}


async def test_a_hidden_accounts_deals_never_appear(sandbox: SandboxProcess, copilot_settings: Settings):
    hidden = east_account_of_diego(sandbox)
    hidden_deals = {
        o["id"]
        for o in sandbox.admin("GET", "/admin/export")["opportunities"]
        if o["account_id"] == hidden["id"]
    }
    with pytest.raises(CrmCallError):
        await _report(copilot_settings, account_id=hidden["id"])
    with pytest.raises(CrmCallError):
        await _report(copilot_settings, opportunity_id=sorted(hidden_deals)[0])
    everything = await _report(copilot_settings)
    assert not hidden_deals & set(everything.cited)
    # The shared East account's deals are read (alex may see them) and their risks are his to see.
    shared = await _report(copilot_settings, account_id="acc-globex")
    assert shared.checked >= 1


async def test_on_dataverse_the_history_signals_come_from_the_audit_history(
    sandbox: SandboxProcess, database_url: str
):
    from tests.support.copilot_env import prepare_database

    settings = dataverse_settings(database_url, sandbox)
    await prepare_database(settings)
    deals = [o for o in _alex_open_deals(sandbox) if not o["id"].startswith("opp-acme")]
    before = await _report(settings)
    target = next(
        o for o in deals if "close_date_pushed" not in _kinds(before, guid_for("opportunity", o["id"]))
    )
    for weeks in (3, 4):
        _update(
            sandbox,
            target["id"],
            close_date=str(date.fromisoformat(target["close_date"]) + timedelta(weeks=weeks)),
        )
    report = await _report(settings)
    deal = guid_for("opportunity", target["id"])
    kinds = _kinds(report, deal)
    assert "close_date_pushed" in kinds, kinds
    assert kinds["close_date_pushed"] == (deal,)
    assert all(len(i) == 36 for i in report.cited)
    assert guid_for("opportunity", HEALTHY) not in {d.id for d in report.deals}


class _NothingWaiting:
    async def waiting(self, identity: Any, thread_id: str) -> list[Any]:
        return []


async def test_the_digest_has_a_section_of_deals_whose_history_shows_a_risk(
    sandbox: SandboxProcess, copilot_settings: Settings
):
    from copilot.briefs.digest import digest_at
    from copilot.briefs.types import DIGEST_TITLES
    from copilot.persistence.database import connect

    rep = await sign_in(copilot_settings, "alex")
    async with connect(copilot_settings) as conn:
        digest = await digest_at(copilot_settings, rep.identity, rep.broker, conn, _NothingWaiting(), at=NOW)
    lines = [i for i in digest.items if i.section == "at_risk"]
    # The expansion's close date was pushed twice (by alex, then by nestor): the CRM's history says so.
    expansion = [i for i in lines if i.cited == ("opp-acme-expansion",)]
    assert len(expansion) == 1, digest.text
    assert "close date moved later 2 times" in expansion[0].text
    assert "Nestor Wilke" in expansion[0].text
    assert DIGEST_TITLES["at_risk"] in digest.text
    assert HEALTHY not in {i.cited[0] for i in lines}
    assert digest.citation_check.unverified == ()


async def test_the_brief_of_a_meeting_about_an_at_risk_deal_says_why_citing_the_deal(
    sandbox: SandboxProcess, copilot_settings: Settings
):
    from copilot.briefs.service import briefs_at
    from copilot.persistence.database import connect

    rep = await sign_in(copilot_settings, "alex")
    # "Acme renewal pricing review", the day after the seed day at 15:00 UTC (sandbox/seed.py).
    at = SEED_MIDNIGHT + timedelta(days=1, hours=14, minutes=30)
    async with connect(copilot_settings) as conn:
        run = await briefs_at(copilot_settings, rep.identity, rep.broker, conn, at=at, lead_minutes=60)
    (brief,) = [b for b in run.briefs if "Acme renewal pricing review" in b.text]
    risky = [i for a in brief.accounts for i in a.items if "is at risk" in i.text]
    assert [i.cited for i in risky] == [("opp-acme-expansion",)], brief.text
    assert "close date moved later 2 times" in risky[0].text
    assert not any(HEALTHY in i.cited for i in risky)
    assert brief.citation_check.unverified == ()


async def test_with_a_real_model_a_note_about_a_slip_makes_a_deal_risky_cited_to_the_activity(
    sandbox: SandboxProcess, copilot_settings: Settings, monkeypatch: pytest.MonkeyPatch
):
    from copilot.models.factory import build_model
    from tests.support.fake_openai import FakeOpenAI, call, tool_calls, use_openai_at

    deal = "opp-acme-renewal"
    planted = sandbox.call(
        "alex",
        "upsert_activity",
        external_id="insight-notes-1",
        type="call",
        subject="Renewal check-in",
        notes="Maria said the timeline slipped two weeks; call her at +1 206-555-0143.",
        occurred_at=str(SEED_DAY - timedelta(days=1)),
        opportunity_id=deal,
    )["structuredContent"]["activity"]["id"]
    with FakeOpenAI() as fake:
        use_openai_at(monkeypatch, fake)
        fake.script(
            tool_calls(
                call(
                    "report_concerns",
                    concerns=[
                        {"activity_id": planted, "kind": "slip", "quote": "the timeline slipped two weeks"},
                        # Words the note does not say, and an activity it was not shown: left out.
                        {"activity_id": planted, "kind": "budget", "quote": "budget was cut"},
                        {"activity_id": "act-9999", "kind": "competitor", "quote": "Maria said"},
                    ],
                )
            )
        )
        rep = await sign_in(copilot_settings, "alex")
        async with AsyncExitStack() as stack:
            evidence = Evidence(connector.reads(stack, copilot_settings, rep.broker))
            report = await deal_risks(
                evidence,
                RiskSettings(),
                NOW,
                today=SEED_DAY,
                account_id="acc-acme",
                notes_model=build_model("openai:gpt-test"),
            )
        (request,) = fake.requests
    sent = json.dumps(request.body)
    assert "timeline slipped two weeks" in sent
    assert "206-555-0143" not in sent  # the phone number was masked before the model saw the note
    notes = [s for d in report.deals if d.id == deal for s in d.signals if s.kind == "notes_concern"]
    assert [(s.cited, "slipped" in s.reason) for s in notes] == [((deal, planted), True)]
    assert NOTES_SKIPPED not in report.skipped
