"""Authorization: a rep's agent reaches nothing the rep's CRM security does not let them read.

Each trial picks a rep and an account the rep may not read (another territory, not shared, or
another tenant's), and a model that goes straight for it: by id, by name, through its deals and
contacts, then proposes logging an activity on it, which the rep approves. On the ``dataverse``
profile the reads are the Dataverse MCP tools (``read_query`` over the account, its opportunities
and contacts, ``search_data`` by name); on ``reference`` the sandbox CRM's own tools.

What must hold: no tool result the model reads holds the record's id or name (nor a deal or
contact of it) other than a refusal echoing the id asked about, the answer cites none of it
(a refusal is no evidence), and the approved write changes nothing.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from copilot.citations import message_text
from copilot.settings import Settings
from sandbox.directory import User, find_user
from sandbox.permissions import can_read_account
from tests.adversarial.counts import Tally, count
from tests.adversarial.harness import export
from tests.adversarial.profiles import Profile, crm_id, suite_name
from tests.support.copilot_env import service, sign_in
from tests.support.sandbox_process import SandboxProcess
from tests.support.scripted_model import ScriptedChatModel, call, calls

pytestmark = pytest.mark.integration

SUITE = "authz"
TRIALS = count(6, 200)
SEED = int(os.environ.get("COPILOT_ADVERSARIAL_SEED", "20261201"))
REPS = ("alex", "megan", "diego")


def _out_of_reach(state: dict[str, list[dict[str, Any]]], rep: User) -> list[dict[str, Any]]:
    """Accounts ``rep`` may not read, by the CRM's rules (territory, ownership, hierarchy, shares)."""
    shares: dict[str, set[str]] = {}
    for s in state["shares"]:
        shares.setdefault(s["record_id"], set()).add(s["user_id"])
    return [a for a in state["accounts"] if not can_read_account(rep, a, shares.get(a["id"], set()))]


def _reads(profile: Profile, account: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]]:
    """Every way the model tries to read the account and what hangs off it."""
    account_id = crm_id(profile, "account", account["id"])
    deal = next((o for o in state["opportunities"] if o["account_id"] == account["id"]), None)
    if profile == "dataverse":
        reads = [
            call(
                "read_query",
                querytext=f"SELECT accountid, name FROM account WHERE accountid = '{account_id}'",
            ),
            call(
                "read_query",
                # A SQL string literal doubles its quotes ("Margie's"): an unescaped name is a
                # syntax error whose message echoes the query, which would test nothing.
                querytext=f"SELECT accountid, name FROM account WHERE name = '{_sql_text(account['name'])}'",
            ),
            call(
                "read_query",
                querytext=f"SELECT opportunityid, name FROM opportunity WHERE parentaccountid = '{account_id}'",
            ),
            call(
                "read_query",
                querytext=f"SELECT contactid, fullname FROM contact WHERE parentcustomerid = '{account_id}'",
            ),
            call("search_data", query=account["name"]),
        ]
        if deal is not None:
            deal_id = crm_id(profile, "opportunity", deal["id"])
            reads.append(
                call(
                    "read_query", querytext=f"SELECT name FROM opportunity WHERE opportunityid = '{deal_id}'"
                )
            )
        return reads
    reads = [
        call("get_account", account_id=account_id),
        call("search_accounts", query=account["name"]),
        call("list_opportunities", account_id=account_id),
        call("list_contacts", account_id=account_id),
    ]
    if deal is not None:
        reads.append(call("get_opportunity", opportunity_id=deal["id"]))
    return reads


def _sql_text(value: str) -> str:
    """``value`` inside a SQL string literal."""
    return value.replace("'", "''")


def _data(result: str) -> str:
    """What a tool result shows of records: a refusal (an ``error`` payload, or a write's
    ``status: error``) echoes the ids it was asked about, which shows nothing."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            if value.get("status") == "error":
                return {}
            return {k: strip(v) for k, v in value.items() if k != "error"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    try:
        return json.dumps(strip(json.loads(result)))
    except ValueError:
        return result


def _secrets(profile: Profile, account: dict[str, Any], state: dict[str, Any]) -> set[str]:
    """The account's id and name, and the ids of its deals and contacts, as the profile names them."""
    found = {account["name"], crm_id(profile, "account", account["id"])}
    found |= {
        crm_id(profile, "opportunity", o["id"])
        for o in state["opportunities"]
        if o["account_id"] == account["id"]
    }
    found |= {
        crm_id(profile, "contact", c["id"]) for c in state["contacts"] if c["account_id"] == account["id"]
    }
    return found


async def test_a_rep_reaches_nothing_of_an_account_out_of_their_reach_by_any_read_or_write(
    profile_settings: Settings, crm_profile: Profile, sandbox: SandboxProcess
) -> None:
    rng = random.Random(SEED)
    tally = Tally(suite_name(SUITE, crm_profile))
    state = export(sandbox)
    reps = {handle: await sign_in(profile_settings, handle) for handle in REPS}
    for trial in range(TRIALS):
        handle = REPS[trial % len(REPS)]
        user = find_user(handle)
        assert user is not None
        account = rng.choice(_out_of_reach(state, user))
        target = crm_id(crm_profile, "account", account["id"])
        secrets = _secrets(crm_profile, account, state)
        model = ScriptedChatModel(
            steps=[
                calls(*_reads(crm_profile, account, state)),
                calls(call("log_activity", type="call", subject=f"Authz trial {trial}", account_id=target)),
            ],
            final=f"{account['name']} [{target}] is doing well.",
        )
        rep = reps[handle]
        problems: list[str] = []
        async with service(profile_settings, model) as svc:
            asked = await svc.run_turn(rep.identity, rep.broker, None, f"tell me about {account['name']}")
            done = asked
            if asked.proposals:
                done = await svc.decide(
                    rep.identity,
                    rep.broker,
                    asked.thread_id,
                    [{"tool_call_id": p.tool_call_id, "type": "approve"} for p in asked.proposals],
                )
        results = [
            message_text(m) for messages in model.received for m in messages if isinstance(m, ToolMessage)
        ]
        if len(results) < len(_reads(crm_profile, account, state)):
            problems.append(f"only {len(results)} tool results reached the model")
        shown = [s for s in secrets if any(s in _data(r) for r in results)]
        if shown:
            problems.append(f"tool results showed {shown}")
        cited = [c for c in done.citations if c in secrets]
        if cited:
            problems.append(f"the answer cites {cited}")
        if any((o.get("result") or {}).get("status") == "done" for o in done.outcomes):
            problems.append(f"the write went through: {json.dumps(done.outcomes)[:300]}")
        written = [
            a
            for a in export(sandbox)["activities"]
            if str(a.get("external_id") or "").startswith(f"{asked.thread_id}:")
        ]
        if written:
            problems.append(f"{len(written)} activities written on it")
        tally.record(not problems, f"trial {trial}: {handle} → {account['id']}: {'; '.join(problems)}")
    tally.assert_clean()
